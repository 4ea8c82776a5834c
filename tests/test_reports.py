"""Runner and index: claims files -> index.html; a failing notebook keeps the last good report."""

from __future__ import annotations

import json

import nbformat
import pytest

from specdec_lib import reports, results


def _notebook(path, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'default'\nfail = False")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, str(path))


GOOD = """
from specdec_lib import results
if fail:
    raise RuntimeError('deliberate failure')
print('ran with profile', profile)
results.save_results('{name}/numbers', {{'x': 1}}, {{'profile': profile}})
results.save_claims('{name}', [results.claim('block', 'block >= token', '8.3%', 0.05, True),
                               results.claim('sequoia', 'wall clock', '4x', '-', 'not applicable offline')])
"""


def test_claim_records_and_verdicts():
    c = results.claim("block", "gain", 0.083, 0.051234, True)
    assert c.verdict == "reproduced" and c.ours == "0.05123" and c.paper.startswith("Sun et al.")
    assert results.claim("asps", "x", 1, 2, False).verdict == "not reproduced"
    assert results.claim("asps", "x", 1, 2, False, partly=True).verdict == "partly"
    with pytest.raises(ValueError, match="verdict"):
        results.claim("asps", "x", 1, 2, "great")
    assert results.verdict_from_ci(0.01, 0.03) == "reproduced"
    assert results.verdict_from_ci(-0.01, 0.03) == "partly"
    assert results.verdict_from_ci(-0.03, -0.01) == "not reproduced"
    assert results.verdict_from_ci(-0.03, -0.01, direction="<") == "reproduced"


def test_save_results_writes_data_and_provenance(tmp_path):
    import pandas as pd

    path = results.save_results("04_block/be", pd.DataFrame({"a": [1, 2]}), {"gamma": 4}, directory=tmp_path)
    assert path == tmp_path / "04_block" / "be.csv"
    meta = json.loads((tmp_path / "04_block" / "be.meta.json").read_text())
    assert meta["params"] == {"gamma": 4}
    assert {"git_revision", "versions", "machine", "created"} <= set(meta)
    assert "torch" in meta["versions"]
    assert results.save_results("x", {"k": 1.5}, {}, directory=tmp_path).name == "results.json"
    with pytest.raises(ValueError):
        results.save_results("../evil", {}, {}, directory=tmp_path)


def test_index_from_claim_files(tmp_path):
    results.save_claims("01_a", [results.claim("asps", "n=1 equal", "0.0%", "0.01%", True)],
                        directory=tmp_path / "claims")
    results.save_claims("02_b", [results.claim("erss", "k=1 GSS > ERSS", "yes", "no", False)],
                        directory=tmp_path / "claims")
    (tmp_path / "01_a.html").write_text("<html></html>")
    path = reports.build_index(tmp_path, notebook_dir=None)
    text = path.read_text()
    assert "n=1 equal" in text and "k=1 GSS &gt; ERSS" in text and 'href="01_a.html"' in text
    rows, nbs = reports.index_rows(tmp_path, notebook_dir=None)
    assert [r["verdict"] for r in rows] == ["reproduced", "not reproduced"]
    assert [n["status"] for n in nbs] == ["not run", "not run"]


@pytest.mark.slow
def test_runner_success_then_failure_keeps_last_good_report(tmp_path):
    nbdir, rep, res = tmp_path / "nb", tmp_path / "reports", tmp_path / "results"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", GOOD.format(name="01_good"))
    _notebook(nbdir / "02_other.ipynb", GOOD.format(name="02_other"))

    runs = reports.reproduce(None, "smoke", {}, rep, res, nbdir, progress=False)
    assert [r.status for r in runs] == ["ok", "ok"], [r.error for r in runs]
    good_html = (rep / "01_good.html").read_text()
    assert "ran with profile" in good_html and "smoke" in good_html
    assert (rep / "claims" / "01_good.json").exists()
    assert (res / "01_good" / "numbers.json").exists()
    assert not list(rep.glob(".stage-*"))

    # the same notebook now raises: old report, claims and data stay; failed output is kept; others still run
    runs = reports.reproduce(None, "smoke", {"fail": True}, rep, res, nbdir, progress=False)
    assert [r.status for r in runs] == ["failed", "failed"]
    assert "deliberate failure" in runs[0].error
    assert (rep / "01_good.html").read_text() == good_html
    assert (rep / "claims" / "01_good.json").exists() and (res / "01_good" / "numbers.json").exists()
    assert (rep / "failed" / "01_good.ipynb").exists() and (rep / "failed" / "01_good.html").exists()
    rows, nbs = reports.index_rows(rep, nbdir)
    assert {r["verdict"] for r in rows} == {"failed"}
    assert all(r["report"] == f"failed/{r['notebook']}.html" for r in rows)
    index = (rep / "index.html").read_text()
    assert "last good report" in index and "deliberate failure" in index

    # success again clears the failed output
    run = reports.run_notebook("01_good", "smoke", {}, rep, res, nbdir, progress_bar=False)
    assert run.status == "ok" and not (rep / "failed" / "01_good.ipynb").exists()


@pytest.mark.slow
def test_notebook_without_claims_is_a_failure(tmp_path):
    nbdir, rep = tmp_path / "nb", tmp_path / "reports"
    nbdir.mkdir()
    _notebook(nbdir / "03_silent.ipynb", "x = 1")
    run = reports.run_notebook("03_silent", "smoke", {}, rep, tmp_path / "res", nbdir, progress_bar=False)
    assert run.status == "failed" and "saved no claims" in run.error
    assert not (rep / "03_silent.html").exists()
    reports.build_index(rep, nbdir)
    rows, _ = reports.index_rows(rep, nbdir)
    assert rows[0]["verdict"] == "failed" and rows[0]["claim"] == "all claims of 03_silent"


def test_resolve_notebooks(tmp_path):
    for n in ("01_asps", "04_block"):
        _notebook(tmp_path / f"{n}.ipynb", "")
    assert reports.resolve_notebooks(["04_block"], tmp_path) == ["04_block"]
    assert reports.resolve_notebooks(["block", "01"], tmp_path) == ["04_block", "01_asps"]
    assert reports.resolve_notebooks(None, tmp_path) == ["01_asps", "04_block"]
    with pytest.raises(ValueError, match="unknown notebook"):
        reports.resolve_notebooks(["99_nope"], tmp_path)
    with pytest.raises(ValueError, match="unknown profile"):
        reports.default_reports_dir("huge")


# ----- bad input and data safety (issue #13): fast runs with papermill replaced by a fake -----------------

def _fake_execute(calls, interrupt=False):
    """A stand-in for papermill.execute_notebook: copies the notebook, then saves claims and one result
    file as the notebook would (through the runner's staging variables), or raises KeyboardInterrupt."""

    def execute(source, output, parameters=None, **_):
        import os
        from pathlib import Path

        calls.append(dict(parameters or {}))
        nbformat.write(nbformat.read(source, as_version=4), output)
        if interrupt:
            raise KeyboardInterrupt
        name = Path(source).stem
        assert os.environ["SPECDEC_RESULTS_DIR"].startswith(str(Path(output).parent))
        results.save_results(f"{name}/numbers", {"parameters": json.dumps(parameters, sort_keys=True)}, {})
        results.save_claims(name, [results.claim("block", "c", 1, 1, True)])

    return execute


def test_ctrl_c_leaves_no_staging_folder_and_keeps_the_report(tmp_path, monkeypatch):
    import papermill

    nbdir, rep, res = tmp_path / "nb", tmp_path / "reports", tmp_path / "results"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", "")
    calls = []
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(calls))
    assert reports.run_notebook("01_good", "smoke", {}, rep, res, nbdir, progress_bar=False).status == "ok"
    html_before = (rep / "01_good.html").read_text()
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(calls, interrupt=True))
    with pytest.raises(KeyboardInterrupt):
        reports.run_notebook("01_good", "smoke", {"fail": True}, rep, res, nbdir, progress_bar=False)
    assert not list(rep.glob(".stage-*")) and not list(rep.glob(".*"))
    assert (rep / "01_good.html").read_text() == html_before
    assert (res / "01_good" / "numbers.json").exists() and (rep / "claims" / "01_good.json").exists()
    assert reports.load_status(rep)["01_good"]["status"] == "ok"


def test_run_with_parameters_never_replaces_the_published_results(tmp_path, monkeypatch):
    """The full run's data/results survive a smaller run: -p runs go to custom/, and writing them (or a
    smoke run) into the published folders needs publish=True."""
    import papermill

    published_rep, published_res = tmp_path / "reports", tmp_path / "data" / "results"
    monkeypatch.setattr(reports, "PUBLISHED_REPORTS_DIR", published_rep)
    monkeypatch.setattr(reports, "PUBLISHED_RESULTS_DIR", published_res)
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", "")
    _notebook(nbdir / "02_other.ipynb", "")
    calls = []
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(calls))

    runs = reports.reproduce(None, "default", None, notebook_dir=nbdir, progress=False)  # the full run
    assert [r.status for r in runs] == ["ok", "ok"]
    full = (published_res / "01_good" / "numbers.json").read_text()
    full_html = (published_rep / "01_good.html").read_text()

    runs = reports.reproduce(["01_good"], "default", {"fail": False}, notebook_dir=nbdir, progress=False)
    assert runs[0].status == "ok" and calls[-1] == {"profile": "default", "fail": False}
    assert (published_res / "01_good" / "numbers.json").read_text() == full
    assert (published_rep / "01_good.html").read_text() == full_html
    assert (published_res / "custom" / "01_good" / "numbers.json").exists()
    assert (published_rep / "custom" / "01_good.html").exists() and (published_rep / "custom" / "index.html").exists()
    assert reports.load_status(published_rep)["01_good"]["parameters"] == {"profile": "default"}

    # naming the published folders explicitly is refused for a run with parameters or a smoke run ...
    n = len(calls)
    with pytest.raises(ValueError, match="reports_dir: a run with parameters"):
        reports.reproduce(["01_good"], "default", {"fail": False}, published_rep, None, nbdir, progress=False)
    with pytest.raises(ValueError, match="results_dir: a run with the smoke profile"):
        reports.reproduce(["01_good"], "smoke", None, tmp_path / "toy", published_res, nbdir, progress=False)
    with pytest.raises(ValueError, match="reports_dir"):
        reports.run_notebook("01_good", "default", {"fail": False}, published_rep, None, nbdir)
    assert len(calls) == n  # nothing ran
    # ... and allowed with publish=True, which also makes the published folders the default
    assert reports.destinations("default", {"fail": False}, publish=True) == (published_rep, published_res)
    assert reports.destinations("smoke", {"fail": False}) == (published_rep / "smoke" / "custom",
                                                              published_res / "smoke" / "custom")
    reports.reproduce(["01_good"], "default", {"fail": False}, notebook_dir=nbdir, progress=False, publish=True)
    assert (published_res / "01_good" / "numbers.json").read_text() != full


def test_parameters_are_checked_before_anything_runs(tmp_path, monkeypatch):
    import papermill

    nbdir, rep = tmp_path / "nb", tmp_path / "reports"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", "")
    assert reports.notebook_parameters("01_good", nbdir) == {"profile": "default", "fail": False}
    calls = []
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(calls))
    with pytest.raises(ValueError, match="'profile' is not a notebook parameter"):
        reports.reproduce(None, "default", {"profile": "smoke"}, rep, tmp_path / "res", nbdir, progress=False)
    with pytest.raises(ValueError, match="unknown name.*'nope'.*known: fail"):
        reports.reproduce(None, "default", {"nope": 1}, rep, tmp_path / "res", nbdir, progress=False)
    with pytest.raises(ValueError, match="unknown name"):
        reports.run_notebook("01_good", "default", {"nope": 1}, rep, tmp_path / "res", nbdir)
    with pytest.raises(ValueError, match="notebook_dir .* is not a directory"):
        reports.reproduce(None, "default", None, rep, tmp_path / "res", tmp_path / "missing", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no notebooks"):
        reports.reproduce(None, "default", None, rep, tmp_path / "res", tmp_path / "empty", progress=False)
    assert not calls and not rep.exists()
