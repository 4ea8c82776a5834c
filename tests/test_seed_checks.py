"""Recording a run under another data seed for the index (`seed_checks.record_seed_check`, ``specdec seed-check``)."""

from __future__ import annotations

import json
import subprocess

import pytest

from specdec_lib import cli
from specdec_lib.reporting import destinations
from specdec_lib.reporting import reproduce as reports
from specdec_lib.reporting import results
from specdec_lib.reporting.index import SEED_CHECKS, data_seed_rows
from specdec_lib.reporting.seed_checks import SEED_CHECKS_DIR, code_difference, record_seed_check, seed_run_differences


def _run(folder, status="ok", parameters=None, profile="default", revision="abc123"):
    """A finished custom run of notebook 02_t in ``folder``: its status.json and claims/02_t.json."""
    parameters = {"seeds": [1], "num_threads": 1} if parameters is None else parameters
    results.save_claims("02_t", [results.claim("trav", "P(tau >= 1) equal", "equal", "+0.000", True),
                                 results.claim("trav", "gain at depth 8", "+10%", "+12% [+9, +15]", True),
                                 results.claim("trav", "speedup (wall clock)", "1.2x", "1.1x", "partly")],
                        directory=folder / "claims")
    (folder / "status.json").write_text(json.dumps({"02_t": {
        "notebook": "02_t", "status": status, "profile": profile, "git_revision": revision,
        "parameters": {"profile": profile, **parameters}}}))
    return folder


@pytest.fixture(autouse=True)
def published(tmp_path, monkeypatch):
    """The published reports/ moved to a temporary folder holding the published run of 02_t (default profile,
    revision abc123, the profile's own models)."""
    folder = tmp_path / "published" / "reports"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"02_t": {
        "notebook": "02_t", "status": "ok", "profile": "default", "git_revision": "abc123",
        "parameters": {"profile": "default"}}}))
    monkeypatch.setattr(destinations, "PUBLISHED_REPORTS_DIR", folder)
    return folder


def test_a_run_under_seed_1_is_recorded_and_read_by_the_index(tmp_path):
    run = _run(tmp_path / "run")
    out = tmp_path / "data" / "results" / "seed_checks"
    path = record_seed_check(run, "02_t", "  the full default design  ", out_dir=out)
    assert path == out / "02_t_seed1.json"
    record = json.loads(path.read_text())
    assert record["purpose"] == "the full default design" and record["status"]["parameters"]["seeds"] == [1]
    assert [c["claim"] for c in record["claims"]] == ["P(tau >= 1) equal", "gain at depth 8", "speedup (wall clock)"]
    # the index reads it beside the published claims
    published = tmp_path / "reports"
    results.save_claims("02_t", [results.claim("trav", "gain at depth 8", "+10%", "+13% [+10, +17]", True)],
                        directory=published / "claims")
    rows = data_seed_rows(out, *reports.index_rows(published, notebook_dir=None))
    assert [(r["claim"], r["agree"]) for r in rows][1] == ("gain at depth 8", True)


def test_keep_records_only_the_claims_the_run_kept(tmp_path):
    run = _run(tmp_path / "run")
    path = record_seed_check(run, "02_t", "timings beside another run", keep=["P(tau", "depth 8"], out_dir=tmp_path)
    assert [c["claim"] for c in json.loads(path.read_text())["claims"]] == ["P(tau >= 1) equal", "gain at depth 8"]
    with pytest.raises(ValueError, match="keep.*depth 9"):
        record_seed_check(run, "02_t", "x", keep=["depth 9"], out_dir=tmp_path)


@pytest.mark.parametrize("status, parameters, notebook, purpose, match", [
    ("ok", {"num_threads": 1}, "02_t", "x", "not given data seeds"),
    ("ok", {"seeds": []}, "02_t", "x", "not given data seeds"),
    ("ok", {"seed": True}, "02_t", "x", "not given data seeds"),
    ("failed", None, "02_t", "x", "run_dir.*'failed'"),
    ("ok", None, "03_other", "x", "run_dir.*no run of 03_other"),
    ("ok", None, "02_t", " ", "purpose"),
])
def test_bad_runs_and_arguments_are_value_errors_and_write_nothing(tmp_path, status, parameters, notebook, purpose,
                                                                   match):
    run = _run(tmp_path / "run", status, parameters)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        record_seed_check(run, notebook, purpose, out_dir=out)
    assert not out.exists()


def test_a_run_without_claims_is_a_value_error(tmp_path):
    run = _run(tmp_path / "run")
    (run / "claims" / "02_t.json").unlink()
    with pytest.raises(ValueError, match="run_dir.*no claims of 02_t"):
        record_seed_check(run, "02_t", "x", out_dir=tmp_path / "out")


def test_the_command_line_records_or_says_why_not(tmp_path, capsys):
    run = _run(tmp_path / "run")
    out = tmp_path / "out"
    argv = ["seed-check", "-n", "02_t", "--run-dir", str(run), "--purpose", "full design", "--out-dir", str(out)]
    assert cli.main(argv) == 0 and (out / "02_t_seed1.json").is_file()
    assert cli.main(argv + ["--keep", "nothing like this"]) == 2
    assert "error: keep" in capsys.readouterr().err


def test_a_notebook_with_one_seed_parameter_names_the_file_by_it(tmp_path):
    run = _run(tmp_path / "run", parameters={"seed": 2})
    out = tmp_path / "out"
    assert record_seed_check(run, "02_t", "x", out_dir=out).name == "02_t_seed2.json"
    assert [r["seeds"] for r in data_seed_rows(out, [], [])] == [[2], [2], [2]]


def test_the_default_folder_is_the_one_the_published_index_reads():
    assert SEED_CHECKS_DIR == (results.REPO_ROOT / "reports" / SEED_CHECKS).resolve()
    assert SEED_CHECKS_DIR == results.REPO_ROOT / "data" / "results" / "seed_checks"


# ----- only a run comparable with the published report is recorded ------------------------------------------

def test_a_run_of_another_profile_models_or_code_is_refused_naming_each_difference(tmp_path):
    run = _run(tmp_path / "run", parameters={"seeds": [1], "target_model": "meta-llama/Llama-2-7b-hf"},
               profile="smoke", revision="abc123-dirty")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="not comparable") as caught:
        record_seed_check(run, "02_t", "x", out_dir=out)
    message = str(caught.value)
    assert "profile 'smoke', not the published 'default'" in message
    assert "target_model 'meta-llama/Llama-2-7b-hf', not the published None" in message
    assert "abc123-dirty had uncommitted changes" in message
    assert not out.exists()


def test_a_notebook_without_a_published_run_cannot_be_checked(tmp_path, published):
    (published / "status.json").write_text(json.dumps({}))
    with pytest.raises(ValueError, match="no published run of 02_t"):
        record_seed_check(_run(tmp_path / "run"), "02_t", "x", out_dir=tmp_path / "out")


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def test_revisions_that_differ_only_in_published_outputs_or_documentation_run_the_same_code(tmp_path):
    repo = tmp_path / "repo"
    (repo / "specdec_lib").mkdir(parents=True)
    (repo / "specdec_lib" / "cli.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    first = _git(repo, "commit", "-q", "-m", "code")
    for path in ("reports/status.json", "data/results/seed_checks/01_asps_seed1.json", "docs/RESULTS.md", "README.md"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("published\n")
    _git(repo, "add", ".")
    outputs = _git(repo, "commit", "-q", "-m", "outputs and docs")
    (repo / "specdec_lib" / "cli.py").write_text("x = 2\n")
    _git(repo, "add", ".")
    code = _git(repo, "commit", "-q", "-m", "code changed")
    assert code_difference(first, first, repo) == "" and code_difference(outputs, first, repo) == ""
    assert "specdec_lib/cli.py" in code_difference(code, first, repo)
    assert "not recorded" in code_difference("unknown", first, repo)
    assert "could not compare" in code_difference("0" * 40, first, repo)
    assert seed_run_differences({"profile": "default", "git_revision": outputs, "parameters": {"seeds": [1]}},
                                {"profile": "default", "git_revision": first, "parameters": {}}, repo) == []
