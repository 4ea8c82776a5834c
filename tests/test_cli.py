"""The command line: argument parsing, notebook selection, exit status, the index command."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import nbformat
import pytest

from specdec_lib import cli
from specdec_lib.reporting import destinations
from specdec_lib.reporting import reproduce as reports
from specdec_lib.reporting import results

BODY = """
from specdec_lib.reporting import results
assert gamma == [4, 8] and isinstance(gamma[0], int), gamma
if fail:
    raise ValueError('boom')
results.save_claims('{name}', [results.claim('block', 'c', 1, 1, True)])
"""


def _notebook(path, name):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'default'\nfail = False\ngamma = None")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(BODY.format(name=name))]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, str(path))


def test_parse_value():
    assert cli.parse_value("3") == 3 and cli.parse_value("0.5") == 0.5
    assert cli.parse_value("[4, 8]") == [4, 8]
    assert cli.parse_value("True") is True and cli.parse_value("none") is None
    assert cli.parse_value("meta-llama/Llama-2-7b-hf") == "meta-llama/Llama-2-7b-hf"
    assert cli.parse_value("cuda") == "cuda"
    assert cli.parse_value("[true, null]") == [True, None] and cli.parse_value('{"a": 1}') == {"a": 1}
    # text that only looks like a literal is an error, never passed on as a string
    for malformed in ("[0.6", "0.6]", "{'a': 1", "0.6.1", "1e", "'cuda", ""):
        with pytest.raises(ValueError, match="not a valid value"):
            cli.parse_value(malformed)
    with pytest.raises(ValueError, match="not a valid value"):
        cli.parse_value("cuda", strict=True)


def test_list_and_unknown_notebook(tmp_path, capsys):
    _notebook(tmp_path / "01_x.ipynb", "01_x")
    assert cli.main(["reproduce", "--list", "--notebook-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == ["01_x"]
    assert cli.main(["reproduce", "--notebook", "nope", "--notebook-dir", str(tmp_path)]) == 2
    assert "unknown notebook" in capsys.readouterr().err
    assert cli.main(["reproduce", "--jobs", "0", "--notebook-dir", str(tmp_path)]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--profile", "huge"])


def test_index_command(tmp_path, capsys):
    results.save_claims("01_x", [results.claim("asps", "claim text", 1, 1, True)], directory=tmp_path / "claims")
    assert cli.main(["index", "--reports-dir", str(tmp_path)]) == 0
    assert "claim text" in (tmp_path / "index.html").read_text()


@pytest.mark.slow
def test_reproduce_subprocess_exit_status(tmp_path):
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    _notebook(nbdir / "01_x.ipynb", "01_x")
    base = [sys.executable, "-m", "specdec_lib", "reproduce", "--profile", "smoke", "--no-progress",
            "--notebook-dir", str(nbdir), "--reports-dir", str(tmp_path / "rep"),
            "--results-dir", str(tmp_path / "res"), "-p", "gamma", "[4, 8]"]
    ok = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "rep" / "01_x.html").exists() and (tmp_path / "rep" / "index.html").exists()
    bad = subprocess.run(base + ["-p", "fail", "true", "--notebook", "01_x"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 1 and "01_x" in bad.stderr
    assert (tmp_path / "rep" / "failed" / "01_x.ipynb").exists()
    assert "failed" in (tmp_path / "rep" / "index.html").read_text()


def test_bench_passes_arguments_through(monkeypatch):
    import sys
    import types

    seen = {}
    fake = types.ModuleType("specdec_lib.experiments.benchmark")
    fake.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "specdec_lib.experiments.benchmark", fake)
    assert cli.main(["bench", "--verifier", "block", "-n", "3"]) == 0
    assert seen["argv"] == ["--verifier", "block", "-n", "3"]


# ----- bad input and data safety (issue #13) ---------------------------------------------------------------

def _typed_notebook(path):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "default"\ndevice = None   # e.g. "cuda"\nsplit = "heldout"\n'
                                       'layers = 2\nrate = 0.5\nfast = False\ntemperatures = None\nsizes = [4, 8]')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params]
    nbformat.write(nb, str(path))


@pytest.fixture
def published(tmp_path, monkeypatch):
    """The published reports/ and data/results/ moved to a temporary folder (a regression writes there)."""
    monkeypatch.setattr(destinations, "PUBLISHED_REPORTS_DIR", tmp_path / "published" / "reports")
    monkeypatch.setattr(destinations, "PUBLISHED_RESULTS_DIR", tmp_path / "published" / "data" / "results")
    return tmp_path / "published"


def test_p_profile_is_an_error_naming_the_flag(tmp_path, capsys, published):
    """`-p profile smoke` used to publish toy results over reports/ labelled default."""
    _notebook(tmp_path / "01_x.ipynb", "01_x")
    assert cli.main(["reproduce", "-n", "01_x", "-p", "profile", "smoke", "--notebook-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "-p profile" in err and "use --profile smoke" in err
    assert not published.exists()


def test_missing_notebook_dir_is_an_error_before_anything_is_written(tmp_path, capsys, published):
    missing = str(tmp_path / "nonexistent")
    assert cli.main(["reproduce", "--notebook-dir", missing, "--no-progress"]) == 2
    assert "notebook_dir" in capsys.readouterr().err
    assert cli.main(["reproduce", "--list", "--notebook-dir", missing]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert cli.main(["reproduce", "--notebook-dir", str(tmp_path), "--reports-dir", str(tmp_path / "r")]) == 2
    assert "holds no notebooks" in capsys.readouterr().err
    assert not published.exists() and not (tmp_path / "r").exists()


def test_unknown_or_malformed_parameters_are_errors(tmp_path, capsys):
    _notebook(tmp_path / "01_x.ipynb", "01_x")
    base = ["reproduce", "--notebook-dir", str(tmp_path), "--reports-dir", str(tmp_path / "r"),
            "--results-dir", str(tmp_path / "res")]
    assert cli.main(base + ["-p", "gama", "[4, 8]"]) == 2
    err = capsys.readouterr().err
    assert "unknown name(s) 'gama'" in err and "known: fail, gamma" in err
    assert cli.main(base + ["-p", "gamma", "[4, 8"]) == 2
    assert "-p gamma: '[4, 8' is not a valid value" in capsys.readouterr().err
    assert cli.main(base + ["-p", "gamma", "four"]) == 2
    assert "-p gamma" in capsys.readouterr().err
    assert cli.main(base + ["-p", "fail", "3"]) == 2
    assert "-p fail: 3 (int) does not match the type of the notebook's default False" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_parse_parameters_types(tmp_path):
    _typed_notebook(tmp_path / "01_t.ipynb")
    _notebook(tmp_path / "02_x.ipynb", "02_x")
    nbs = ["01_t", "02_x"]
    parsed = cli.parse_parameters([("device", "cuda:0"), ("split", "train"), ("layers", "3"), ("rate", "1"),
                                   ("fast", "true"), ("temperatures", "[0.6]"), ("sizes", "(2, 4)"),
                                   ("gamma", "None")], nbs, tmp_path)
    assert parsed == {"device": "cuda:0", "split": "train", "layers": 3, "rate": 1, "fast": True,
                      "temperatures": [0.6], "sizes": (2, 4), "gamma": None}
    assert cli.parse_parameters([("device", "none"), ("split", "'x y'")], nbs, tmp_path) == {"device": None,
                                                                                          "split": "x y"}
    for pairs, message in (([("layers", "2.5")], "-p layers: 2.5 (float) does not match"),
                           ([("layers", "true")], "-p layers: True (bool)"),
                           ([("sizes", "8")], "-p sizes: 8 (int)"),
                           ([("temperatures", "0.6,")], None),
                           ([("temperatures", "[0.6")], "-p temperatures"),
                           ([("rate", "fast")], "-p rate"),
                           ([("rate", "1"), ("rate", "2")], "given twice"),
                           ([("profile", "smoke")], "use --profile smoke"),
                           ([("nope", "1")], "unknown name")):
        if message is None:  # a tuple literal: accepted as written
            assert cli.parse_parameters(pairs, nbs, tmp_path) == {"temperatures": (0.6,)}
            continue
        with pytest.raises(ValueError, match=re.escape(message)):
            cli.parse_parameters(pairs, nbs, tmp_path)
    # each notebook gets only the parameters its parameters cell declares
    assert reports.check_parameters(nbs, {"layers": 3, "fail": True}, tmp_path) == {"01_t": {"layers": 3},
                                                                                   "02_x": {"fail": True}}


def test_runs_with_parameters_go_to_custom_folders(tmp_path, capsys, monkeypatch, published):
    """A smaller run (-p) goes to reports/custom/ and data/results/custom/; writing it into the published
    folders needs --publish."""
    published_rep, published_res = published / "reports", published / "data" / "results"
    _notebook(tmp_path / "01_x.ipynb", "01_x")
    seen = {}

    def fake_reproduce(notebooks, profile, parameters, options):
        seen.update(dataclasses.asdict(options), notebooks=notebooks, profile=profile, parameters=parameters)
        return []

    monkeypatch.setattr(reports, "reproduce", fake_reproduce)
    args = ["reproduce", "--notebook-dir", str(tmp_path), "-p", "gamma", "[4, 8]"]
    assert cli.main(args) == 0
    assert seen["reports_dir"] == published_rep / "custom" and seen["results_dir"] == published_res / "custom"
    assert seen["parameters"] == {"gamma": [4, 8]} and seen["publish"] is False
    assert f"index: {published_rep / 'custom' / 'index.html'}" in capsys.readouterr().out
    assert cli.main(args + ["--reports-dir", str(published_rep)]) == 2
    assert "--publish" in capsys.readouterr().err
    assert cli.main(["reproduce", "--notebook-dir", str(tmp_path), "--profile", "smoke",
                     "--results-dir", str(published_res)]) == 2
    assert "smoke profile" in capsys.readouterr().err
    assert cli.main(args + ["--publish"]) == 0
    assert seen["reports_dir"] == published_rep and seen["results_dir"] == published_res and seen["publish"]
    assert cli.main(["reproduce", "--notebook-dir", str(tmp_path)]) == 0  # the notebooks' own settings
    assert seen["reports_dir"] == published_rep and seen["parameters"] == {}
    assert "--publish" in cli._parser()._subparsers._group_actions[0].choices["reproduce"].format_help()
