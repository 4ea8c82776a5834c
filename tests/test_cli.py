"""The command line: argument parsing, notebook selection, exit status, the index command."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from specdec_lib import cli, results

BODY = """
from specdec_lib import results
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


def test_list_and_unknown_notebook(tmp_path, capsys):
    _notebook(tmp_path / "01_x.ipynb", "01_x")
    assert cli.main(["reproduce", "--list", "--notebook-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == ["01_x"]
    assert cli.main(["reproduce", "--notebook", "nope", "--notebook-dir", str(tmp_path)]) == 2
    assert "unknown notebook" in capsys.readouterr().err
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
    fake = types.ModuleType("specdec_lib.benchmark")
    fake.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "specdec_lib.benchmark", fake)
    assert cli.main(["bench", "--verifier", "block", "-n", "3"]) == 0
    assert seen["argv"] == ["--verifier", "block", "-n", "3"]
