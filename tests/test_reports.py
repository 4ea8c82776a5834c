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
