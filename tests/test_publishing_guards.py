"""Nothing published changes unless a complete, successful run of the published profile produced it, and every
argument of the command line is checked before anything runs: `reproduce`, `index` and `seed-check` refuse what
would change reports/ or data/results/ from a failed, toy or mismatched run, each with a one-line error and exit
status 2 (1 for a notebook that failed), and the tests compare every published file before and after.

Notebooks run through a stand-in for papermill (no kernel), so the whole module takes seconds."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import re
from pathlib import Path

import nbformat
import pytest

from specdec_lib import cli
from specdec_lib.reporting import destinations
from specdec_lib.reporting import reproduce as reports
from specdec_lib.reporting import publication, results
from specdec_lib.reporting.seed_checks import check_out_dir, record_seed_check

PARAMETERS = ("profile = 'default'\nnum_threads = 1\nseeds = None\ntemperatures = None\ntarget_model = None\n"
              "draft_model = None\ndevice = None\ndtype = None")


def digest(*folders: Path) -> dict[str, str]:
    """sha256 of every file under ``folders`` (by path): equal digests mean byte-for-byte equal trees."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in folders for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(PARAMETERS)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    nbformat.write(nb, str(path))


class FakePapermill:
    """papermill.execute_notebook without a kernel: writes the executed notebook, then saves the claims and a
    result file as a notebook does (into the runner's staging folders), or raises as a failing cell would."""

    def __init__(self):
        self.calls: list[dict] = []
        self.failing: set[str] = set()
        self.interrupted: set[str] = set()

    def __call__(self, source, output, parameters=None, **kwargs):
        name = Path(source).stem
        self.calls.append({"notebook": name, "parameters": dict(parameters or {}), **kwargs})
        nbformat.write(nbformat.read(source, as_version=4), output)
        if name in self.failing:
            raise RuntimeError("set_num_threads expects a positive integer")
        if name in self.interrupted:
            results.save_claims(name, [results.claim("block", "half-way", 1, 1, True)])  # a partial output
            raise KeyboardInterrupt
        results.save_results(f"{name}/numbers", {"x": 1}, {})
        results.save_claims(name, [results.claim("block", "c", 1, 1, True),
                                   results.not_applicable("block", "wall clock on TPUs", "+6%", "no TPU")])


@pytest.fixture
def papermill(monkeypatch):
    import papermill as pm

    fake = FakePapermill()
    monkeypatch.setattr(pm, "execute_notebook", fake)
    return fake


@pytest.fixture
def published(tmp_path, monkeypatch):
    """The published reports/ and data/results/ moved to a temporary folder, with two notebooks to run."""
    root = tmp_path / "published"
    monkeypatch.setattr(destinations, "PUBLISHED_REPORTS_DIR", root / "reports")
    monkeypatch.setattr(destinations, "PUBLISHED_RESULTS_DIR", root / "data" / "results")
    (root / "reports").mkdir(parents=True)
    (root / "data" / "results").mkdir(parents=True)
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    for name in ("01_good", "02_other"):
        _notebook(nbdir / f"{name}.ipynb")
    return root


def _nbdir(published: Path) -> str:
    return str(published.parent / "nb")


def _publish_once(published, papermill) -> dict[str, str]:
    """A complete run of the notebooks' own settings into the published folders; returns their digest."""
    runs = reports.reproduce(None, "default", None,
                             reports.RunOptions(notebook_dir=_nbdir(published), progress=False, jobs=1))
    assert [r.status for r in runs] == ["ok", "ok"]
    assert (published / "reports" / "index.html").is_file() and (published / "data" / "results" / "01_good").is_dir()
    return digest(published)


# ----- a failed run leaves the published reports as they were ----------------------------------------------

def test_a_failing_notebook_leaves_the_published_tree_byte_for_byte(published, papermill, capsys):
    before = _publish_once(published, papermill)
    papermill.failing.add("01_good")
    assert cli.main(["reproduce", "-n", "01_good", "--notebook-dir", _nbdir(published), "--no-progress"]) == 1
    err = capsys.readouterr().err
    custom = published / "reports" / "custom"
    assert "failed: 01_good" in err and str(custom / "failed") in err and "keeps its last good reports" in err
    assert {k: v for k, v in digest(published).items() if "/custom/" not in k} == before
    assert not (published / "reports" / "failed").exists()
    # the failure is kept, with its record and an index showing it, in the custom run folder
    assert (custom / "failed" / "01_good.ipynb").is_file()
    assert reports.load_status(custom)["01_good"]["status"] == "failed"
    assert "set_num_threads" in (custom / "index.html").read_text()


def test_a_run_with_one_failure_publishes_the_other_notebook_only(published, papermill):
    _publish_once(published, papermill)
    status_before = reports.load_status(published / "reports")
    good_report = (published / "reports" / "01_good.html").read_bytes()
    papermill.failing.add("01_good")
    runs = reports.reproduce(None, "default", None,
                             reports.RunOptions(notebook_dir=_nbdir(published), progress=False, jobs=1))
    assert [r.status for r in runs] == ["failed", "ok"]
    status = reports.load_status(published / "reports")
    assert status["01_good"] == status_before["01_good"] and status["02_other"] != status_before["02_other"]
    assert (published / "reports" / "01_good.html").read_bytes() == good_report
    assert not (published / "reports" / "failed").exists()


def _outside(tree: dict[str, str], folder: str) -> dict[str, str]:
    """``tree`` (a `digest`) without the files under a ``/<folder>/`` run folder."""
    return {k: v for k, v in tree.items() if f"/{folder}/" not in k}


@pytest.mark.parametrize("fail_at, error", [(2, OSError), (4, OSError), (5, OSError), (3, KeyboardInterrupt)],
                         ids=["after-the-report", "at-the-data", "at-the-status", "ctrl-c-at-the-claims"])
def test_publishing_is_all_or_nothing(published, papermill, monkeypatch, fail_at, error):
    """An error part-way through publishing (a full disk, a folder it cannot write, Ctrl-C) undoes every move
    made before it: the published tree is byte for byte as it was, and the run is recorded as failed."""
    before = _publish_once(published, papermill)
    real_move, moves = publication.move, []

    def failing_move(src, dst):  # report, previous claims, claims, data, status.json: the 5 moves of 01_good
        moves.append(Path(dst))
        if len(moves) == fail_at:
            raise error("No space left on device")
        real_move(src, dst)

    monkeypatch.setattr(publication, "move", failing_move)
    options = reports.RunOptions(notebook_dir=_nbdir(published), progress=False, jobs=1)
    if error is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            reports.reproduce(["01_good"], "default", None, options)
    else:
        [run] = reports.reproduce(["01_good"], "default", None, options)
        assert run.status == "failed" and "publishing failed and was undone" in run.error
        assert "No space left on device" in run.error
        assert reports.load_status(published / "reports" / "custom")["01_good"]["status"] == "failed"
    assert len(moves) == fail_at
    if fail_at == 2:  # the folder made for the previous claims (the first run had none) is gone again
        assert not (published / "reports" / ".previous").exists()
    assert _outside(digest(published), "custom") == before
    assert not [p for p in published.rglob("*") if ".old-" in p.name or p.name.startswith(".stage-")]


def test_a_successful_smoke_run_changes_nothing_published(published, papermill):
    before = _publish_once(published, papermill)
    assert cli.main(["reproduce", "--profile", "smoke", "--notebook-dir", _nbdir(published), "--no-progress"]) == 0
    assert (published / "reports" / "smoke" / "index.html").is_file()
    assert (published / "data" / "results" / "smoke" / "01_good").is_dir()
    assert _outside(digest(published), "smoke") == before


def test_an_interrupted_run_into_the_published_folders_changes_nothing_there(published, papermill, capsys):
    before = _publish_once(published, papermill)
    papermill.interrupted.add("01_good")
    assert cli.main(["reproduce", "--notebook-dir", _nbdir(published), "--no-progress", "-j", "1"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert [c["notebook"] for c in papermill.calls[-1:]] == ["01_good"]  # 02_other never started
    assert digest(published) == before
    assert not list((published / "reports").glob(".stage-*"))


def test_a_smoke_index_leaves_the_published_index_as_it_was(published, papermill, capsys):
    before = _publish_once(published, papermill)
    assert cli.main(["index", "--profile", "smoke"]) == 2  # no smoke run yet: refused, never created
    assert "does not exist" in capsys.readouterr().err and digest(published) == before
    reports.reproduce(None, "smoke", None, reports.RunOptions(notebook_dir=_nbdir(published), progress=False))
    smoke_index = published / "reports" / "smoke" / "index.html"
    smoke_index.write_text("stale")
    capsys.readouterr()
    assert cli.main(["index", "--profile", "smoke"]) == 0
    assert capsys.readouterr().out.strip() == str(smoke_index) and smoke_index.read_text() != "stale"
    assert _outside(digest(published), "smoke") == before


class InlinePool:
    """concurrent.futures.ProcessPoolExecutor run in this process (so the stand-in papermill is seen): each
    submitted call runs at once and its future holds its result or its exception."""

    def __init__(self, max_workers, mp_context=None, initializer=None, initargs=()):
        pass

    def submit(self, fn, *args):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args))
        except BaseException as error:  # noqa: BLE001 - the future carries it, as a worker's would
            future.set_exception(error)
        return future

    def shutdown(self, wait=True, cancel_futures=False):
        pass


@pytest.mark.parametrize("failing", [{"01_good"}, {"01_good", "02_other"}])
def test_a_parallel_run_with_failures_publishes_only_the_notebooks_that_succeeded(published, papermill, monkeypatch,
                                                                                  failing):
    before = _publish_once(published, papermill)
    status_before = reports.load_status(published / "reports")
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", InlinePool)
    papermill.failing.update(failing)
    runs = reports.reproduce(None, "default", None,
                             reports.RunOptions(notebook_dir=_nbdir(published), progress=False, jobs=2))
    assert [r.status for r in runs] == ["failed" if n in failing else "ok" for n in ("01_good", "02_other")]
    status = reports.load_status(published / "reports")
    assert status["01_good"] == status_before["01_good"]
    assert not (published / "reports" / "failed").exists()
    if failing == {"01_good", "02_other"}:   # nothing succeeded: the published tree is byte for byte as it was
        assert {k: v for k, v in digest(published).items() if "/custom/" not in k} == before
    else:
        assert status["02_other"] != status_before["02_other"]
        def of_01(tree):   # the failed notebook's published files, none added, changed or removed
            return {k: v for k, v in tree.items() if "01_good" in k and "/custom/" not in k}
        assert of_01(digest(published)) == of_01(before) != {}


@pytest.mark.parametrize("threads", ["0", "-1"])
def test_num_threads_below_one_is_refused_before_any_notebook_runs(published, papermill, capsys, threads):
    assert cli.main(["reproduce", "-n", "01_good", "--notebook-dir", _nbdir(published), "-p", "num_threads",
                     threads]) == 2
    assert f"parameter num_threads must be >= 1, got {threads}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="num_threads"):
        reports.reproduce(["01_good"], "default", {"num_threads": int(threads)},
                          reports.RunOptions(notebook_dir=_nbdir(published)))
    assert not papermill.calls and digest(published) == {}


# ----- folders: none inside the published tree but its own, no file, no read-only folder ---------------------

@pytest.mark.parametrize("option, folder, message", [
    ("--reports-dir", "reports/claims", "lies inside the published"),
    ("--results-dir", "reports", "lies inside the published"),
    ("--reports-dir", "data/results/seed_checks", "lies inside the published"),
    ("--reports-dir", "a_file", "is a file, not a folder"),
    ("--results-dir", "a_file", "results_dir: .* is a file, not a folder"),
    ("--results-dir", "a_file/below", "cannot be created"),
])
def test_bad_folders_are_refused_before_the_notebook_runs(published, papermill, capsys, option, folder, message):
    for path in ("reports/index.html", "reports/status.json", "reports/claims/01_good.json",
                 "data/results/seed_checks/01_asps_seed1.json"):
        (published / path).parent.mkdir(parents=True, exist_ok=True)
        (published / path).write_text("published")
    before = digest(published)
    (published.parent / "a_file").write_text("x")
    where = published / folder if folder.startswith(("reports", "data")) else published.parent / folder
    assert cli.main(["reproduce", "-n", "01_good", "--notebook-dir", _nbdir(published), "--profile", "smoke",
                     option, str(where)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not papermill.calls and digest(published) == before


def test_the_real_published_claims_folder_is_refused_as_a_reports_folder(papermill, capsys):
    assert cli.main(["reproduce", "-n", "01_asps", "--reports-dir", "reports/claims"]) == 2
    assert "reports_dir: reports/claims lies inside the published" in capsys.readouterr().err
    assert not papermill.calls


def test_a_read_only_reports_folder_is_refused_up_front(published, papermill, capsys, monkeypatch):
    read_only = published.parent / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    real_access = destinations.os.access  # root may write anyway: the check asks os.access, as a user's would
    monkeypatch.setattr(destinations.os, "access",
                        lambda path, mode: False if Path(path) == read_only else real_access(path, mode))
    assert cli.main(["reproduce", "-n", "01_good", "--notebook-dir", _nbdir(published), "--profile", "smoke",
                     "--reports-dir", str(read_only / "run")]) == 2
    assert f"reports_dir: {read_only / 'run'} is not writable" in capsys.readouterr().err
    assert not papermill.calls and not (read_only / "run").exists()


def test_index_refuses_a_read_only_reports_folder_up_front(published, capsys, monkeypatch):
    read_only = published.parent / "read_only"
    (read_only / "claims").mkdir(parents=True)
    (read_only / "index.html").write_text("the last index")
    read_only.chmod(0o555)
    real_access = destinations.os.access  # root may write anyway: the check asks os.access, as a user's would
    monkeypatch.setattr(destinations.os, "access",
                        lambda path, mode: False if Path(path) == read_only else real_access(path, mode))
    before = digest(read_only)
    try:
        assert cli.main(["index", "--reports-dir", str(read_only)]) == 2
        err = capsys.readouterr().err
        assert err == f"error: reports_dir: {read_only} is not writable ({read_only} is read-only for this user)\n"
        with pytest.raises(ValueError, match="reports_dir: .* is not writable"):
            reports.build_index(read_only)
        assert digest(read_only) == before
    finally:
        read_only.chmod(0o755)


@pytest.mark.parametrize("folder, message", [("missing", "does not exist"), ("a_file", "is a file, not a folder"),
                                             ("published/reports/claims", "lies inside the published")])
def test_index_refuses_a_missing_folder_a_file_or_a_published_subfolder(published, capsys, folder, message):
    (published.parent / "a_file").write_text("x")
    (published / "reports" / "claims").mkdir()
    before = digest(published)
    assert cli.main(["index", "--reports-dir", str(published.parent / folder)]) == 2
    assert message in capsys.readouterr().err
    assert not (published.parent / "missing").exists() and digest(published) == before


# ----- parameter values: real models on the smoke profile, dtypes, temperatures, seeds, timeout -------------

@pytest.mark.parametrize("extra, message", [
    ("--profile smoke -p target_model meta-llama/Llama-2-7b-hf", "smoke profile runs its toy pair and takes no "
                                                                 "target_model"),
    ("--profile smoke -p device cuda", "takes no device"),
    ("--profile smoke -p dtype bfloat16", "takes no dtype"),
    ("-p dtype float8", "parameter dtype: unknown dtype 'float8'"),
    ("--profile full -p dtype float8", "parameter dtype: unknown dtype 'float8'"),
    ("--profile smoke -p temperatures [Infinity]", "parameter temperatures[0] must be a finite number"),
    ("-p temperatures [-0.5]", "parameter temperatures[0] must be >= 0"),
    ("-p temperatures []", "parameter temperatures must not be empty"),
    ("--profile smoke -p seeds []", "parameter seeds must not be empty"),
    ("--timeout -5", "--timeout"),
    ("--timeout 0", "--timeout"),
])
def test_bad_parameter_values_are_refused_before_any_model_loads(published, papermill, capsys, extra, message):
    assert cli.main(["reproduce", "-n", "01_good", "--notebook-dir", _nbdir(published)] + extra.split()) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not papermill.calls and digest(published) == {}


def test_the_api_refuses_the_same_values_by_name(published):
    nbdir = _nbdir(published)
    for profile, parameters, timeout, message in (
            ("smoke", {"target_model": "meta-llama/Llama-2-7b-hf"}, None, "target_model"),
            ("default", {"temperatures": [float("inf")]}, None, "temperatures"),
            ("default", {"seeds": []}, None, "seeds"),
            ("default", None, -5, "execution_timeout")):
        with pytest.raises(ValueError, match=message):
            reports.reproduce(["01_good"], profile, parameters,
                              reports.RunOptions(notebook_dir=nbdir, execution_timeout=timeout))
        with pytest.raises(ValueError, match=message):
            reports.run_notebook("01_good", profile, parameters,
                                 reports.RunOptions(notebook_dir=nbdir, execution_timeout=timeout))
    assert reports.check_run_parameters("default", {"temperatures": None, "seeds": [1], "dtype": "bf16"}) is None


# ----- seed-check: only a run of the published profile, models and code -------------------------------------

def test_seed_check_of_a_smoke_run_is_refused_and_changes_no_published_file(tmp_path, capsys):
    """A toy run's claims must never replace data/results/seed_checks/01_asps_seed1.json."""
    run = tmp_path / "smoke_run"
    results.save_claims("01_asps", [results.claim("asps", "toy claim", 1, 1, True)], directory=run / "claims")
    (run / "status.json").write_text(json.dumps({"01_asps": {
        "notebook": "01_asps", "status": "ok", "profile": "smoke", "git_revision": results.git_revision(),
        "parameters": {"profile": "smoke", "seeds": [1], "num_threads": 2}}}))
    seed_checks = results.REPO_ROOT / "data" / "results" / "seed_checks"
    published_status = results.REPO_ROOT / "reports" / "status.json"
    before = digest(seed_checks), published_status.read_bytes()
    assert cli.main(["seed-check", "-n", "01_asps", "--run-dir", str(run), "--purpose", "x"]) == 2
    err = capsys.readouterr().err
    assert "not comparable with its published report" in err and "profile 'smoke', not the published 'default'" in err
    assert (digest(seed_checks), published_status.read_bytes()) == before


@pytest.mark.parametrize("out_dir, message", [
    ("reports", "lies inside the published"),
    ("reports/claims", "lies inside the published"),
    ("data/results", "lies inside the published"),
    ("a_file", "is a file, not a folder"),
    ("a_file/below", "cannot be created"),
])
def test_seed_check_writes_only_to_the_seed_checks_folder_or_outside_the_published_tree(published, capsys, out_dir,
                                                                                        message):
    for path in ("reports/index.html", "reports/status.json", "reports/claims/01_asps.json",
                 "data/results/seed_checks/01_asps_seed1.json"):
        (published / path).parent.mkdir(parents=True, exist_ok=True)
        (published / path).write_text("published")
    (published.parent / "a_file").write_text("x")
    run = published.parent / "seed_run"
    results.save_claims("01_asps", [results.claim("asps", "a claim", 1, 1, True)], directory=run / "claims")
    (run / "status.json").write_text(json.dumps({"01_asps": {
        "notebook": "01_asps", "status": "ok", "profile": "default", "git_revision": "abc",
        "parameters": {"profile": "default", "seeds": [1]}}}))
    before = digest(published.parent)
    where = published / out_dir if out_dir.startswith(("reports", "data")) else published.parent / out_dir
    assert cli.main(["seed-check", "-n", "01_asps", "--run-dir", str(run), "--purpose", "x",
                     "--out-dir", str(where)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out-dir: {where}") and message in err and len(err.strip().splitlines()) == 1
    assert digest(published.parent) == before
    with pytest.raises(ValueError, match=f"out_dir: .*{message}"):
        record_seed_check(run, "01_asps", "x", out_dir=where)
    assert digest(published.parent) == before
    # the published seed-checks folder and folders outside the published tree pass this check
    seed_checks = published / "data" / "results" / "seed_checks"
    for ok in (seed_checks, published.parent / "elsewhere" / "new"):
        check_out_dir("out_dir", ok)


# ----- progress: one line as each notebook starts and ends; no kernel or papermill noise --------------------

def test_each_notebook_prints_a_line_as_it_starts_and_ends_with_its_verdict_counts(published, papermill, capsys):
    reports.reproduce(["01_good"], "smoke", None, reports.RunOptions(notebook_dir=_nbdir(published), progress=False))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "01_good: started (smoke profile)"
    assert out[1].startswith("01_good: done in ") and out[1].endswith(", 1 reproduced / 0 partly / 0 not / 1 n.a.")
    papermill.failing.add("01_good")
    reports.reproduce(["01_good"], "smoke", None, reports.RunOptions(notebook_dir=_nbdir(published), progress=False))
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("01_good: failed after ") and "set_num_threads expects a positive integer" in line
    # the kernel's own log (its TCP warning, the KeyboardInterrupt of every shutdown) is off
    assert all(call["extra_arguments"] == list(reports.KERNEL_ARGUMENTS) for call in papermill.calls)
    assert "--IPKernelApp.log_level=CRITICAL" in reports.KERNEL_ARGUMENTS


def test_papermills_parameter_cell_warning_is_dropped_and_other_warnings_kept(caplog):
    reports._quiet_papermill()
    reports._quiet_papermill()  # once per process, however often a run starts
    logger = logging.getLogger("papermill.translators")
    assert sum(isinstance(f, reports._DropPrefix) for f in logger.filters) == 1
    with caplog.at_level(logging.WARNING):
        logger.warning("Unable to parse line 14 'category_prompts = None  # default 12 = every prompt'.")
        logger.warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]
