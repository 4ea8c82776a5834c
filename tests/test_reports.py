"""Runner and index: claims files -> index.html; a failing notebook keeps the last good report."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess

import nbformat
import pytest

from specdec_lib.reporting import destinations
from specdec_lib.reporting import reproduce as reports
from specdec_lib.reporting import results
from specdec_lib.reporting.index import data_seed_rows, wall_minutes


def _notebook(path, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'default'\nfail = False")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, str(path))


GOOD = """
from specdec_lib.reporting import results
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


def test_the_machine_record_names_the_cpu_and_its_bfloat16_matrix_unit():
    """Wall clock in bfloat16 differs about 5x between CPUs with and without a native bf16 matrix unit: every
    result's machine record and every report's machine line say which one ran it."""
    amx = "processor\t: 0\nmodel name\t: Xeon X\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n\nprocessor\t: 1\n"
    assert results.cpu_features(amx) == {"cpu_model": "Xeon X", "bf16_matrix": "AMX-BF16"}
    assert results.cpu_features("model name : Y\nflags : avx512f avx512_bf16\n")["bf16_matrix"] == "AVX512-BF16"
    assert results.cpu_features("model name : Z\nflags : avx2 avx512f\n") == {"cpu_model": "Z", "bf16_matrix": "none"}
    assert results.cpu_features("") == {}  # no /proc/cpuinfo (another OS): nothing claimed
    machine = results.machine()
    assert set(results.cpu_features()) <= set(machine)
    if "bf16_matrix" in machine:
        assert f"bf16 matrix unit: {machine['bf16_matrix']}" in reports.machine_description()
    # one record, every describer: the report line formats the same dict the metadata and bench files store
    record = {"hostname": "box", "cpu_count": 2, "architecture": "x86_64", "system": "Linux", "cpu_model": "Xeon X",
              "bf16_matrix": "AMX-BF16", "cuda_device": "NVIDIA H100"}
    assert reports.machine_description(record) == ("box: 2 CPUs (x86_64, Linux), Xeon X, bf16 matrix unit: AMX-BF16, "
                                                   "NVIDIA H100")
    assert reports.machine_description({**record, "cpu_model": "", "cuda_device": None}) == "box: 2 CPUs (x86_64, Linux)"


def test_published_outputs_do_not_make_the_revision_dirty_but_code_does(tmp_path):
    """One `make reproduce` publishes a report, then starts the next notebook: that one must not record -dirty."""
    git = lambda *args: subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True)
    git("init", "-q")
    code, report, result, notes = (tmp_path.joinpath(*parts) for parts in (  # parts: not paths of this repository
        ("specdec_lib", "code.py"), ("reports", "01.html"), ("data", "results", "01", "x.csv"), ("docs", "notes.md")))
    for path in (code, report, result, notes):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("v1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    sha = git("rev-parse", "HEAD").stdout.strip()
    assert results.git_revision(tmp_path) == sha
    report.write_text("v2\n")  # a notebook published its report and results
    result.write_text("v2\n")
    assert results.git_revision(tmp_path) == sha
    notes.write_text("v2\n")  # anything else is an input
    assert results.git_revision(tmp_path) == sha + "-dirty"
    assert results.git_revision(tmp_path / "nowhere") == "unknown"


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


def test_index_lists_seed_dependent_verdicts(tmp_path):
    from specdec_lib import verdicts

    stable = results.claim("asps", "stable", "+1%", "+2%", True, notes=f"rule x; {verdicts.STABLE_MARK} 0, 1")
    flip = results.claim("asps", "flips", "+1%", "+0.5%", "partly",
                         notes=f"rule x; {verdicts.SEED_DEPENDENT}: reproduced (seed 0), partly (seed 1)")
    results.save_claims("01_a", [stable, flip, results.claim("asps", "hand", "1", "1", True)], directory=tmp_path / "claims")
    text = reports.build_index(tmp_path, notebook_dir=None).read_text()
    section = text[text.index("id='seed-stability'"):text.index("<h2>Notebooks")]
    assert "2 of 3 claims" in section and "1 of them change verdict" in section
    assert "flips" in section and "stable</td>" not in section


def test_index_sets_data_seed_checks_beside_the_published_verdicts(tmp_path):
    rep = tmp_path / "reports"
    results.save_claims("03_e", [results.claim("erss", "C4 tree above", "yes", "+1.8% [-1.6, +4.9]", "partly"),
                                 results.claim("erss", "C6 converge", "yes", "+2.0% [+0.5, +3.5]", True)],
                        directory=rep / "claims")
    assert "Data-seed checks" not in reports.build_index(rep, notebook_dir=None).read_text()  # none stored
    checks = tmp_path / "data" / "results" / "seed_checks"
    checks.mkdir(parents=True)
    status = {"notebook": "03_e", "git_revision": "0123456789abcdef", "parameters": {"seeds": [1]}}
    (checks / "03_e_seed1.json").write_text(json.dumps({"status": status, "claims": [
        dataclasses.asdict(results.claim("erss", "C4 tree above", "yes", "+4.4% [+0.3, +8.9]", True)),
        dataclasses.asdict(results.claim("erss", "C6 converge", "yes", "+1.0% [+0.1, +2.0]", True)),
        dataclasses.asdict(results.claim("erss", "C9 gone", "yes", "+1%", "partly"))]}))
    rows = data_seed_rows(checks, *reports.index_rows(rep, notebook_dir=None))
    assert [(r["claim"], r["agree"]) for r in rows] == [("C4 tree above", False), ("C6 converge", True), ("C9 gone", False)]
    assert rows[0]["published_verdict"] == "partly" and rows[0]["seeds"] == [1] and rows[2]["published_verdict"] == ""
    text = reports.build_index(rep, notebook_dir=None).read_text()
    section = text[text.index("id='data-seed-checks'"):text.index("<h2>Notebooks")]
    assert "3 claim(s) rerun" in section and "2 with a verdict other than the published one" in section
    assert "+4.4% [+0.3, +8.9]" in section and "no such claim published" in section and "0123456789" in section


@pytest.mark.slow
def test_runner_success_then_failure_keeps_last_good_report(tmp_path):
    nbdir, rep, res = tmp_path / "nb", tmp_path / "reports", tmp_path / "results"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", GOOD.format(name="01_good"))
    _notebook(nbdir / "02_other.ipynb", GOOD.format(name="02_other"))

    runs = reports.reproduce(None, "smoke", {}, reports.RunOptions(rep, res, nbdir, progress=False))
    assert [r.status for r in runs] == ["ok", "ok"], [r.error for r in runs]
    good_html = (rep / "01_good.html").read_text()
    assert "ran with profile" in good_html and "smoke" in good_html
    assert (rep / "claims" / "01_good.json").exists()
    assert (res / "01_good" / "numbers.json").exists()
    assert not list(rep.glob(".stage-*"))

    # the same notebook now raises: old report, claims and data stay; failed output is kept; others still run
    runs = reports.reproduce(None, "smoke", {"fail": True}, reports.RunOptions(rep, res, nbdir, progress=False))
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
    run = reports.run_notebook("01_good", "smoke", {}, reports.RunOptions(rep, res, nbdir, progress=False))
    assert run.status == "ok" and not (rep / "failed" / "01_good.ipynb").exists()


@pytest.mark.slow
def test_notebook_without_claims_is_a_failure(tmp_path):
    nbdir, rep = tmp_path / "nb", tmp_path / "reports"
    nbdir.mkdir()
    _notebook(nbdir / "03_silent.ipynb", "x = 1")
    run = reports.run_notebook("03_silent", "smoke", {},
                               reports.RunOptions(rep, tmp_path / "res", nbdir, progress=False))
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
    assert reports.run_notebook("01_good", "smoke", {},
                                reports.RunOptions(rep, res, nbdir, progress=False)).status == "ok"
    html_before = (rep / "01_good.html").read_text()
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(calls, interrupt=True))
    with pytest.raises(KeyboardInterrupt):
        reports.run_notebook("01_good", "smoke", {"fail": True}, reports.RunOptions(rep, res, nbdir, progress=False))
    assert not list(rep.glob(".stage-*")) and not list(rep.glob(".*"))
    assert (rep / "01_good.html").read_text() == html_before
    assert (res / "01_good" / "numbers.json").exists() and (rep / "claims" / "01_good.json").exists()
    assert reports.load_status(rep)["01_good"]["status"] == "ok"


def test_run_with_parameters_never_replaces_the_published_results(tmp_path, monkeypatch):
    """The full run's data/results survive a smaller run: -p runs go to custom/, and writing them (or a
    smoke run) into the published folders needs publish=True."""
    import papermill

    published_rep, published_res = tmp_path / "reports", tmp_path / "data" / "results"
    monkeypatch.setattr(destinations, "PUBLISHED_REPORTS_DIR", published_rep)
    monkeypatch.setattr(destinations, "PUBLISHED_RESULTS_DIR", published_res)
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", "")
    _notebook(nbdir / "02_other.ipynb", "")
    calls = []
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(calls))

    runs = reports.reproduce(None, "default", None,
                             reports.RunOptions(notebook_dir=nbdir, progress=False, jobs=1))  # the full run
    assert [r.status for r in runs] == ["ok", "ok"]
    full = (published_res / "01_good" / "numbers.json").read_text()
    full_html = (published_rep / "01_good.html").read_text()

    runs = reports.reproduce(["01_good"], "default", {"fail": False},
                             reports.RunOptions(notebook_dir=nbdir, progress=False, jobs=1))
    assert runs[0].status == "ok" and calls[-1] == {"profile": "default", "fail": False}
    assert (published_res / "01_good" / "numbers.json").read_text() == full
    assert (published_rep / "01_good.html").read_text() == full_html
    assert (published_res / "custom" / "01_good" / "numbers.json").exists()
    assert (published_rep / "custom" / "01_good.html").exists() and (published_rep / "custom" / "index.html").exists()
    assert reports.load_status(published_rep)["01_good"]["parameters"] == {"profile": "default"}

    # naming the published folders explicitly is refused for a run with parameters or a smoke run ...
    n = len(calls)
    with pytest.raises(ValueError, match="reports_dir: a run with parameters"):
        reports.reproduce(["01_good"], "default", {"fail": False},
                          reports.RunOptions(published_rep, notebook_dir=nbdir, progress=False, jobs=1))
    with pytest.raises(ValueError, match="results_dir: a run with the smoke profile"):
        reports.reproduce(["01_good"], "smoke", None,
                          reports.RunOptions(tmp_path / "toy", published_res, nbdir, progress=False))
    with pytest.raises(ValueError, match="reports_dir"):
        reports.run_notebook("01_good", "default", {"fail": False}, reports.RunOptions(published_rep, notebook_dir=nbdir))
    assert len(calls) == n  # nothing ran
    # ... and allowed with publish=True, which also makes the published folders the default
    assert reports.destinations("default", {"fail": False}, publish=True) == (published_rep, published_res)
    assert reports.destinations("smoke", {"fail": False}) == (published_rep / "smoke" / "custom",
                                                              published_res / "smoke" / "custom")
    reports.reproduce(["01_good"], "default", {"fail": False},
                      reports.RunOptions(notebook_dir=nbdir, progress=False, jobs=1, publish=True))
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
        reports.reproduce(None, "default", {"profile": "smoke"},
                          reports.RunOptions(rep, tmp_path / "res", nbdir, progress=False))
    with pytest.raises(ValueError, match="unknown name.*'nope'.*known: fail"):
        reports.reproduce(None, "default", {"nope": 1},
                          reports.RunOptions(rep, tmp_path / "res", nbdir, progress=False))
    with pytest.raises(ValueError, match="unknown name"):
        reports.run_notebook("01_good", "default", {"nope": 1}, reports.RunOptions(rep, tmp_path / "res", nbdir))
    with pytest.raises(ValueError, match="notebook_dir .* is not a directory"):
        reports.reproduce(None, "default", None,
                          reports.RunOptions(rep, tmp_path / "res", tmp_path / "missing", progress=False))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no notebooks"):
        reports.reproduce(None, "default", None,
                          reports.RunOptions(rep, tmp_path / "res", tmp_path / "empty", progress=False))
    assert not calls and not rep.exists()
# ----------------------------------------------------------------------------------------- reports a reader enjoys

def _claims():
    return [results.claim("block", "BE(block) > BE(token), γ = 8", "+8.30%", "+2.60% [+0.94, +4.10]", "reproduced"),
            results.claim("block", "Gain grows with temperature", "+3.7% → +8.7%", "T=0.2: +1%, T=1: +0.5%", False,
                          partly=True),
            results.claim("block", "Table 4 ordering", "2.9 < 3.0 < 4.1", "no", False),
            results.not_applicable("block", "Wall clock on TPUs", "+6.49%", "no TPU offline")]


def _executed_notebook(path):
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("print('x')")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x\n"),
                    nbformat.v4.new_output("stream", name="stderr", text="\rbar:  50%|#####     | 1/2\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# 04 — Title\n\nIntro."), code,
                nbformat.v4.new_markdown_cell("## Claims")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return nb


def test_stderr_is_moved_out_and_the_report_opens_with_its_claims(tmp_path):
    nb = _executed_notebook(tmp_path / "04_x.ipynb")
    stray = reports.strip_stderr(nb)
    assert len(stray) == 1 and "bar:  50%" in stray[0] and "cell 1" in stray[0]
    assert [o["name"] for o in nb.cells[1].outputs] == ["stdout"]
    nbformat.write(nb, str(tmp_path / "04_x.ipynb"))
    run = {"profile": "smoke", "started": "2026-01-01T00:00:00+00:00", "duration_s": 90.0,
           "git_revision": "0123456789abcdef-dirty", "machine": "box: 2 CPUs"}
    text = reports.render_html(tmp_path / "04_x.ipynb", tmp_path / "04_x.html", claims=[
        dataclasses.asdict(c) for c in _claims()], run=run).read_text()
    assert "vnd.jupyter.stderr" not in text  # neither an output nor its (now useless) CSS rule
    top, title, first_code = (text.index('id="claims-summary"'), text.index("04 — Title"),
                              text.index('class="jp-Cell jp-CodeCell'))
    assert title < top < first_code  # right after the title cell, before any code
    summary = text[top:first_code]
    for header in ("paper's value", "ours", "95% CI", "verdict"):
        assert header in summary
    assert "[+0.94, +4.10]" in summary and ">+2.60%<" in summary  # the CI in its own column
    assert "1 reproduced, 1 partly, 1 not reproduced, 1 not applicable offline" in summary
    assert "Not reproduced: “Table 4 ordering”" in summary and "1.5 min" in summary and "git 0123456789ab-dirty" in summary
    # a notebook that still has stderr keeps it (and its style) -- e.g. a failed run's report
    _executed_notebook(tmp_path / "failed.ipynb")
    assert "vnd.jupyter.stderr" in reports.render_html(tmp_path / "failed.ipynb", tmp_path / "f.html").read_text()


def test_split_ci_and_summary_paragraph():
    assert reports.split_ci("+2.39% [+0.90, +3.93]") == ("+2.39%", "[+0.90, +3.93]")
    assert reports.split_ci("ERSS vs GSS -1.2% [-3.0, +0.5]") == ("ERSS vs GSS -1.2%", "[-3.0, +0.5]")
    assert reports.split_ci("a [1, 2]; b [3, 4]") == ("a [1, 2]; b [3, 4]", "")  # two intervals: left as they are
    assert reports.split_ci("max |ours − paper| = 4.8e-05") == ("max |ours − paper| = 4.8e-05", "")
    text = reports.summary_paragraph("04_block", [dataclasses.asdict(c) for c in _claims()[:1]], {"profile": "default"})
    assert text.startswith("04_block checks 1 claim of Sun et al.") and "Every claim checked was reproduced" in text


def test_kernel_environment_and_progress_switch(monkeypatch):
    from specdec_lib import progress

    env = reports.KERNEL_ENV
    assert env["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"  # Agg would drop every figure
    assert env["SPECDEC_PROGRESS"] == "0" and env["TQDM_DISABLE"] == "1" and env["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setenv("SPECDEC_PROGRESS", "1")
    assert progress.enabled() and not progress.enabled(False)
    monkeypatch.setenv("SPECDEC_PROGRESS", "0")
    assert not progress.enabled()
    bar = progress.tqdm(range(3), desc="x")
    assert bar.disable and list(bar) == [0, 1, 2]
    monkeypatch.setenv("SPECDEC_PROGRESS", "1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert not progress.enabled()


def test_known_harmless_messages_are_dropped_and_others_kept(caplog):
    import logging
    import warnings

    from specdec_lib import progress

    progress.quiet_known_warnings()
    log = logging.getLogger("transformers.utils.generic")
    with caplog.at_level(logging.WARNING, logger="transformers.utils.generic"):
        log.warning("`past_key_values`/`cache_params` are deprecated. Use `cache` instead.")
        log.warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        progress.quiet_known_warnings()
        for category, message in progress.KNOWN_HARMLESS["warnings"]:
            warnings.filterwarnings("ignore", message=message, category=category)
        warnings.warn("`past_key_values` is deprecated and will be removed in version 5.40.0", FutureWarning)
        warnings.warn("another deprecation", FutureWarning)
    assert [str(w.message) for w in seen] == ["another deprecation"]


QUIET = """
import sys, warnings
import matplotlib.pyplot as plt
from tqdm.auto import tqdm as raw_tqdm
from specdec_lib import progress
from specdec_lib.reporting import results
for _ in progress.tqdm(range(3), desc='library bar'):
    pass
for _ in raw_tqdm(range(3), desc='third-party bar'):
    pass
warnings.warn('`past_key_values` is deprecated and will be removed in version 5.40.0 for `X.forward`.', FutureWarning)
plt.plot([1, 2], [3, 4])
plt.show()
print('UNEXPECTED LINE', file=sys.stderr)
results.save_claims('{name}', [results.claim('block', 'block >= token', '8.3%', '+2.60% [+0.94, +4.10]', True)])
"""


@pytest.mark.slow
def test_runner_reports_are_quiet_have_figures_and_log_stray_stderr(tmp_path):
    nbdir, rep = tmp_path / "nb", tmp_path / "reports"
    nbdir.mkdir()
    _notebook(nbdir / "01_quiet.ipynb", QUIET.format(name="01_quiet"))
    nb = nbformat.read(str(nbdir / "01_quiet.ipynb"), as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("# 01 — Quiet"))
    nbformat.write(nb, str(nbdir / "01_quiet.ipynb"))
    run = reports.run_notebook("01_quiet", "smoke", {},
                               reports.RunOptions(rep, tmp_path / "res", nbdir, progress=False))
    assert run.status == "ok", run.error
    text = (rep / "01_quiet.html").read_text()
    assert "vnd.jupyter.stderr" not in text
    assert text.count('src="data:image/png') == 1  # the inline backend, not Agg
    assert text.index('id="claims-summary"') < text.index('class="jp-Cell jp-CodeCell')
    log = (rep / "logs" / "01_quiet.stderr.txt").read_text()
    assert "UNEXPECTED LINE" in log and "bar" not in log and "past_key_values" not in log
    assert run.stderr_outputs == 1 and run.git_revision and run.machine
    status = reports.load_status(rep)["01_quiet"]
    assert status["stderr_outputs"] == 1 and status["machine"] == run.machine
    index = reports.build_index(rep, nbdir).read_text()
    assert 'href="logs/01_quiet.stderr.txt"' in index


def _index_setup(tmp_path):
    claims = tmp_path / "claims"
    results.save_claims("04_block", _claims(), directory=claims)
    results.save_claims("05_sequoia", [results.claim("sequoia", "DP beats k-ary", "yes", "+3% [+1, +5]", True)],
                        directory=claims)
    status = {name: {"notebook": name, "status": "ok", "profile": "default", "started": f"2026-01-01T0{i}:00:00+00:00",
                     "duration_s": 120.0 * (i + 1), "error": "", "report": f"{name}.html", "parameters": {},
                     "git_revision": "abcdef0123456789", "machine": "box: 2 CPUs", "stderr_outputs": 0}
              for i, name in enumerate(["04_block", "05_sequoia"])}
    (tmp_path / "status.json").write_text(json.dumps(status))


def test_wall_minutes_spans_overlapping_runs():
    rows = [{"status": "ok", "started": "2026-01-01T00:00:00+00:00", "duration_s": 600.0},
            {"status": "ok", "started": "2026-01-01T00:01:00+00:00", "duration_s": 300.0},  # inside the first
            {"status": "ok", "started": "2026-01-01T00:08:00+00:00", "duration_s": 240.0},
            {"status": "not run", "started": "", "duration_s": None}]
    assert wall_minutes(rows) == pytest.approx(12.0)
    assert wall_minutes(rows[3:]) is None


def test_index_counts_metadata_and_filter(tmp_path):
    _index_setup(tmp_path)
    text = reports.build_index(tmp_path, notebook_dir=None).read_text()
    meta = text[text.index("id='run-metadata'"):text.index("</dl>")]
    assert "default" in meta and "abcdef0123" in meta and "box: 2 CPUs" in meta and "6.0 min in all" in meta
    assert "64.0 min of wall clock" in meta  # 00:00 to 01:00 + 4 min
    counts = text[text.index("id='paper-counts'"):]
    counts = counts[:counts.index("</table>")]
    block_row = [r for r in counts.split("<tr>") if "Block Verification" in r][0]
    assert re.findall(r"<td>(\d*)</td>", block_row) == ["1", "1", "1", "1", "", "4"]
    assert "<td>2.0</td>" in text and "<td>4.0</td>" in text  # minutes per notebook
    assert "<select id='verdict-filter'" in text and "function filterClaims" in text
    for verdict in results.VERDICTS:
        assert f"<option value='{verdict}'>" in text
    assert text.count("data-verdict=") == 5
    assert "No previous run to compare with" in text
    if shutil.which("node"):  # run the filter on a stub DOM
        rows = re.findall(r"<tr data-verdict='([^']*)' data-changed='(\d)'>", text)
        script = text[text.index("<script>") + 8:text.index("</script>")]
        js = ("var rows = " + json.dumps([{"v": v, "c": c} for v, c in rows]) + ".map(function (r) {"
              " return {style: {}, getAttribute: function (a) { return a === 'data-verdict' ? r.v : r.c; }}; });"
              "var sel = {value: 'partly'}, count = {textContent: ''};"
              "var document = {getElementById: function (id) { return id === 'verdict-filter' ? sel : count; },"
              " querySelectorAll: function () { return rows; }};" + script +
              "filterClaims(); console.log(count.textContent + '|' + rows.map(function (r) {"
              " return r.style.display === 'none' ? 0 : 1; }).join(''));")
        out = subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "1 shown|01000"


def test_index_shows_verdicts_changed_since_the_previous_run(tmp_path):
    _index_setup(tmp_path)
    prev = tmp_path / reports.PREVIOUS_CLAIMS
    prev.mkdir(parents=True)
    (prev / "04_block.json").write_text((tmp_path / "claims" / "04_block.json").read_text())
    changed = _claims()
    changed[1] = results.claim("block", "Gain grows with temperature", "+3.7% → +8.7%", "T=0.2: +1%, T=1: +3%", True)
    changed[3] = results.claim("block", "A new claim", "x", "y", True)
    results.save_claims("04_block", changed, directory=tmp_path / "claims")
    previous, source = reports.previous_claims(tmp_path, "04_block")
    assert source == "previous run" and len(previous) == 4
    kinds = {(c["change"], c["claim"], c["before"], c["after"]) for c in reports.claim_changes(previous, changed and
             [dataclasses.asdict(c) for c in changed])}
    assert kinds == {("verdict", "Gain grows with temperature", "partly", "reproduced"),
                     ("new", "A new claim", "", "reproduced"),
                     ("removed", "Wall clock on TPUs", "not applicable offline", "")}
    text = reports.build_index(tmp_path, notebook_dir=None).read_text()
    changes = text[text.index("id='changes'"):text.index("<h2>Notebooks")]
    assert "3 change(s)" in changes and "Gain grows with temperature" in changes and "Wall clock on TPUs" in changes
    assert text.count("data-changed='1'") == 2 and "<option value='changed'>changed since the previous run (2)" in text


def test_previous_claims_come_from_git_head_when_the_reports_are_tracked(tmp_path):
    if not shutil.which("git"):
        pytest.skip("git not available")
    repo = tmp_path / "repo"
    rep = repo / "reports"
    results.save_claims("04_block", _claims(), directory=rep / "claims")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "reports"], check=True)
    results.save_claims("04_block", _claims()[:2], directory=rep / "claims")
    # a kept copy exists too, but the committed run is the baseline
    (rep / reports.PREVIOUS_CLAIMS).mkdir(parents=True)
    (rep / reports.PREVIOUS_CLAIMS / "04_block.json").write_text((rep / "claims" / "04_block.json").read_text())
    previous, source = reports.previous_claims(rep, "04_block")
    assert source == "git HEAD" and len(previous) == 4
    changes, sources = reports.index_changes(rep, ["04_block"])
    assert sources == {"04_block": "git HEAD"} and {c["change"] for c in changes} == {"removed"}
    # once the new run is committed, the index rebuilt later still compares it with the run before it
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "new run"], check=True)
    previous, source = reports.previous_claims(rep, "04_block")
    assert source.startswith("git ") and source.endswith("~1") and len(previous) == 4
    assert {c["change"] for c in reports.index_changes(rep, ["04_block"])[0]} == {"removed"}


@pytest.mark.slow
def test_parallel_runner_runs_every_notebook_and_records_each(tmp_path):
    nbdir, rep, res = tmp_path / "nb", tmp_path / "reports", tmp_path / "results"
    nbdir.mkdir()
    for name in ("01_good", "02_other", "03_third"):
        _notebook(nbdir / f"{name}.ipynb", GOOD.format(name=name))
    runs = reports.reproduce(None, "smoke", {}, reports.RunOptions(rep, res, nbdir, progress=False, jobs=2))
    assert [r.notebook for r in runs] == ["01_good", "02_other", "03_third"]
    assert [r.status for r in runs] == ["ok", "ok", "ok"], [r.error for r in runs]
    assert set(reports.load_status(rep)) == {"01_good", "02_other", "03_third"}
    assert all((rep / f"{n}.html").exists() and (res / n / "numbers.json").exists() for n in ("01_good", "03_third"))
    assert (rep / "index.html").exists() and not list(rep.glob(".stage-*"))
    with pytest.raises(ValueError, match="jobs"):
        reports.reproduce(None, "smoke", {}, reports.RunOptions(rep, res, nbdir, progress=False, jobs=0))


def test_threads_are_an_execution_setting_published_and_shared_among_the_notebooks_at_once(tmp_path, monkeypatch):
    """num_threads changes the speed, not the measurement: a run that sets only it publishes (and records it);
    an unset num_threads takes this process's CPUs shared among the notebooks running at once."""
    import papermill

    published_rep, published_res = tmp_path / "reports", tmp_path / "data" / "results"
    monkeypatch.setattr(destinations, "PUBLISHED_REPORTS_DIR", published_rep)
    monkeypatch.setattr(destinations, "PUBLISHED_RESULTS_DIR", published_res)
    monkeypatch.setattr(reports.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert [reports.threads_per_notebook(j) for j in (1, 2, 3, 4, 8)] == [4, 2, 1, 1, 1]
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    for name in ("01_good", "02_other"):
        _notebook(nbdir / f"{name}.ipynb", GOOD.format(name=name))
        nb = nbformat.read(str(nbdir / f"{name}.ipynb"), as_version=4)
        nb.cells[0].source += "\nnum_threads = 1"
        nbformat.write(nb, str(nbdir / f"{name}.ipynb"))
    calls = []
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(calls))

    assert reports.destinations("default", {"num_threads": 2}) == (published_rep, published_res)
    assert reports.design_parameters({"num_threads": 2, "fail": False}) == {"fail": False}
    runs = reports.reproduce(["01_good"], "default", {"num_threads": 3},
                             reports.RunOptions(notebook_dir=nbdir, progress=False))
    assert runs[0].status == "ok" and calls[-1] == {"profile": "default", "num_threads": 3}
    assert (published_rep / "01_good.html").exists() and (published_res / "01_good" / "numbers.json").exists()
    assert reports.load_status(published_rep)["01_good"]["parameters"] == {"profile": "default", "num_threads": 3}
    reports.reproduce(["02_other"], "default", None,
                      reports.RunOptions(notebook_dir=nbdir, progress=False))  # alone: every CPU
    assert calls[-1] == {"profile": "default", "num_threads": 4}
    reports.reproduce(None, "default", None,
                      reports.RunOptions(notebook_dir=nbdir, progress=False, jobs=1))  # one at a time
    assert calls[-2:] == [{"profile": "default", "num_threads": 4}] * 2
    seen = {}
    monkeypatch.setattr(reports, "_reproduce_parallel", lambda names, jobs, profile, per_notebook, *a:
                        seen.update(per_notebook) or [])
    reports.reproduce(None, "default", None,
                      reports.RunOptions(notebook_dir=nbdir, progress=False, jobs=2))  # two at a time: half each
    assert seen == {"01_good": {"num_threads": 2}, "02_other": {"num_threads": 2}}
    reports.reproduce(None, "default", {"fail": False}, reports.RunOptions(notebook_dir=nbdir, progress=False, jobs=1))
    assert (published_rep / "custom" / "01_good.html").exists()  # any other parameter still makes the run custom


def test_default_profile_runs_two_notebooks_at_a_time_with_one_thread_each(tmp_path, monkeypatch):
    assert reports.PROFILE_JOBS == {"smoke": 1, "default": 2, "full": 1}
    for name in ("01_asps", "02_traversal", "03_erss", "04_block", "05_sequoia", "06_leaderboard", "07_regime"):
        assert reports.notebook_parameters(name)["num_threads"] == 1, name
    seen = {}
    monkeypatch.setattr(reports, "_reproduce_parallel", lambda names, jobs, *a, **k: seen.setdefault("jobs", jobs) and [])
    monkeypatch.setattr(reports, "build_index", lambda *a, **k: None)
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    for name in ("01_good", "02_other"):
        _notebook(nbdir / f"{name}.ipynb", GOOD.format(name=name))
    reports.reproduce(None, "default", {}, reports.RunOptions(tmp_path / "r", tmp_path / "d", nbdir, progress=False))
    assert seen["jobs"] == 2
    with pytest.raises(ValueError, match="jobs"):
        reports.reproduce(None, "default", {},
                          reports.RunOptions(tmp_path / "r", tmp_path / "d", nbdir, progress=False, jobs=True))


def test_a_kernel_that_dies_before_starting_is_started_again_and_nothing_else_is():
    calls = []

    class FlakyPapermill:
        def __init__(self, failures, message):
            self.failures, self.message = failures, message

        def execute_notebook(self, *args, **kwargs):
            calls.append(args)
            if len(calls) <= self.failures:
                raise RuntimeError(self.message)

    reports._execute(FlakyPapermill(2, reports.KERNEL_START_FAILURE), "in.ipynb", "out.ipynb")
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(RuntimeError, match="kernel_info"):
        reports._execute(FlakyPapermill(5, reports.KERNEL_START_FAILURE), "in.ipynb", "out.ipynb")
    assert len(calls) == reports.KERNEL_START_TRIES
    calls.clear()
    with pytest.raises(RuntimeError, match="cell failed"):
        reports._execute(FlakyPapermill(1, "cell failed"), "in.ipynb", "out.ipynb")
    assert len(calls) == 1


SLEEPER = """
import os, pathlib, time
pathlib.Path({marker!r}).write_text(str(os.getpid()))
for _ in range(1200):
    time.sleep(0.1)
"""


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z"  # a zombie is not running


@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_signal_to_reproduce_stops_every_worker_and_kernel_and_publishes_nothing(tmp_path, signum):
    """Issue #13: SIGINT / SIGTERM to a two-job `reproduce` used to mark the killed kernels failed and start the
    next notebooks. Now: exit code 130 within seconds, no queued notebook starts, every kernel is gone, no
    staging folder is left and the last good report is untouched."""
    import signal
    import sys
    import time

    nbdir, rep, res = tmp_path / "nb", tmp_path / "reports", tmp_path / "results"
    nbdir.mkdir()
    rep.mkdir()
    (rep / "01_a.html").write_text("the last good report")
    markers = {name: tmp_path / f"started_{name}" for name in ("01_a", "02_b", "03_c")}
    for name, marker in markers.items():
        _notebook(nbdir / f"{name}.ipynb", SLEEPER.format(marker=str(marker)))
    proc = subprocess.Popen([sys.executable, "-m", "specdec_lib", "reproduce", "--profile", "smoke", "--jobs", "2",
                             "--notebook-dir", str(nbdir), "--reports-dir", str(rep), "--results-dir", str(res),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a shell's background job (CI, `make test &`) starts with SIGINT ignored: undo that,
                            # as a terminal's Ctrl-C would find it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while sum(m.exists() for m in markers.values()) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    started = [m for m in markers.values() if m.exists()]
    assert len(started) == 2, proc.communicate(timeout=5)
    kernels = [int(m.read_text()) for m in started]
    proc.send_signal(getattr(signal, signum))
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("reproduce did not stop within 60 s of the signal")
    assert proc.returncode == 130, err
    assert "interrupted" in err
    time.sleep(1.0)
    assert sum(m.exists() for m in markers.values()) == 2  # the third notebook never started
    assert not any(_alive(pid) for pid in kernels)
    assert not list(rep.glob(".stage-*"))
    assert (rep / "01_a.html").read_text() == "the last good report"
    assert not (res / "01_a").exists() and (rep / "index.html").exists()
