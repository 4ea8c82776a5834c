"""Every notebook runs end to end on the smoke profile (toy models, tiny sizes) through the real runner.

CI catches a broken notebook here. The notebooks run one after another in fresh kernels; each must save its
claims, and its report must render. Output goes to a temporary folder (never to reports/).
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest

from specdec_lib.reporting import reproduce as reports
from specdec_lib.reporting.results import VERDICTS

NOTEBOOKS = reports.list_notebooks()


def test_notebooks_have_kernel_metadata_and_parameters():
    assert NOTEBOOKS, "no notebooks found"
    for name in NOTEBOOKS:
        nb = nbformat.read(str(reports.NOTEBOOK_DIR / f"{name}.ipynb"), as_version=4)
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3", name
        assert nb.metadata.get("language_info", {}).get("name") == "python", name
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{name}: exactly one cell tagged 'parameters'"
        assert "profile" in tagged[0].source, f"{name}: the parameters cell sets the profile"
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{name}: committed with outputs"


def test_notebooks_only_orchestrate():
    """Logic lives in the library, tested: no notebook code cell defines a function or a class."""
    offenders = []
    for name in NOTEBOOKS:
        nb = nbformat.read(str(reports.NOTEBOOK_DIR / f"{name}.ipynb"), as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and re.search(r"^\s*(async\s+def|def|class)\s+\w+", cell.source, re.M):
                offenders.append(f"{name} cell {i}")
    assert not offenders, offenders


@pytest.mark.slow
def test_all_notebooks_run_on_smoke_profile(tmp_path):
    runs = reports.reproduce(None, "smoke", {},
                             reports.RunOptions(tmp_path / "reports", tmp_path / "results", progress=False))
    failed = {r.notebook: r.error for r in runs if r.status != "ok"}
    assert not failed, failed
    for run in runs:
        assert (tmp_path / "reports" / f"{run.notebook}.html").stat().st_size > 10_000
        claims = json.loads((tmp_path / "reports" / "claims" / f"{run.notebook}.json").read_text())["claims"]
        assert claims and all(c["verdict"] in VERDICTS for c in claims)
    index = (tmp_path / "reports" / "index.html").read_text()
    assert all(name in index for name in NOTEBOOKS)
    # reports a reader enjoys: no stderr at all, the claims table on top, the papers' figures
    status = reports.load_status(tmp_path / "reports")
    for run in runs:
        html = (tmp_path / "reports" / f"{run.notebook}.html").read_text()
        assert "vnd.jupyter.stderr" not in html, run.notebook
        assert status[run.notebook]["stderr_outputs"] == 0, (tmp_path / "reports" / "logs").glob("*")
        assert html.index('id="claims-summary"') < html.index('class="jp-Cell jp-CodeCell'), run.notebook
        figures = html.count('src="data:image/png')
        if run.notebook[:2] in PAPER_REPORTS:
            assert figures >= 3, (run.notebook, figures)
    # the synthetic draft family is labelled as such (notebook 07)
    assert "never wall clock" in (tmp_path / "reports" / "07_regime.html").read_text()


PAPER_REPORTS = ("01", "02", "03", "04", "05")
"""The paper notebooks: each report carries at least three figures (the papers' own where data allows)."""


def test_sequoia_notebook_runs_one_data_seed_at_a_time(tmp_path):
    """05's sections draw their sampling seeds from its one data seed: two seeds are refused (ValueError), not
    silently run as the first."""
    (run,) = reports.reproduce(["05_sequoia"], "smoke", {"seeds": [0, 1]},
                               reports.RunOptions(tmp_path / "reports", tmp_path / "results", progress=False))
    assert run.status != "ok"
    assert "ValueError" in run.error and "seeds: 05 runs one data seed at a time" in run.error
