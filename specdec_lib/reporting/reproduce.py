"""Run the notebooks with papermill, render them to HTML, and build ``reports/index.html``.

`reproduce` runs the selected notebooks (several at a time: `PROFILE_JOBS`, `threads_per_notebook`) and
`run_notebook` one of them. A run is staged in a temporary folder and moved into place only when the notebook
succeeded, all or nothing with its status record (`publication`: an error while publishing undoes every
move), so a failure never overwrites the last good report. The kernel runs with `KERNEL_ENV` (no progress
bars, inline figures), and stderr left in a notebook moves to ``logs/``. Ctrl-C or SIGTERM stops the whole
run, parallel workers included, publishes nothing partial and exits with 130.

``reports/`` and ``data/results/`` hold the reports of the notebooks' own settings. The smoke profile writes to
``reports/smoke/``, a run with overridden parameters to a ``custom/`` folder, and neither may write into the
published folders unless ``RunOptions(publish=True)`` (``--publish``). Parameters and folders are checked before
anything runs (`check_parameters`, `destinations.check_run`).

The reports folder's layout, progress lines, failures, stopping and publishing rules: docs/ARCHITECTURE.md,
"Reports: reproduce and publishing".

This module runs the notebooks and publishes their output; the pieces it uses (all re-exported here):
`notebooks` (which notebooks, their parameters), `destinations` (folders, profiles, run checks), `html` (one
report's HTML and claims summary), `index` (``index.html``, run records, claims changed since the previous run).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as _dt
import fcntl
import multiprocessing
import json
import logging
import os
import shutil
import signal
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .destinations import (CUSTOM, EXECUTION_PARAMETERS, PROFILES, PUBLISHED_REPORTS_DIR, PUBLISHED_RESULTS_DIR,
                           check_profile, check_run, check_run_parameters, check_timeout, default_reports_dir,
                           default_results_dir, design_parameters, destinations, failures_dir, is_published)
from .contention import record_overlaps
from .html import add_claims_summary, claims_summary_html, render_html, split_ci, strip_stderr, summary_paragraph
from .index import PREVIOUS_CLAIMS, build_index, claim_changes, index_changes, index_rows, load_status, previous_claims
from .publication import publication
from .notebooks import NOT_A_LITERAL, NOTEBOOK_DIR, check_parameters, list_notebooks, notebook_parameters, resolve_notebooks
from .results import atomic_write_text, git_revision, load_claims, machine

PROFILE_JOBS = {"smoke": 1, "default": 2, "full": 1}
"""Notebooks run at a time when ``jobs`` is not given. The default profile runs on this project's 2-core CPU
with one torch thread per notebook (the notebooks' ``num_threads`` default), so two notebooks at a time use
both cores: about half the time of one after another. The timings measured inside a notebook then share
the memory bus with the other notebook, which can slow a step's baseline by well over half. ``jobs=1`` gives them the machine alone."""
KERNEL = "python3"
KERNEL_ARGUMENTS = ("--IPKernelApp.log_level=CRITICAL",)
"""Command-line options of the notebook kernel: its own log off (the notebook's output, errors of its cells and
a kernel that dies still reach the runner), so that neither its warning about running over TCP without
encryption (local ports, this machine only) nor the "KeyboardInterrupt caught in kernel" of the interrupt
jupyter_client sends at every shutdown reaches the terminal."""

def threads_per_notebook(jobs: int) -> int:
    """Torch threads for each of ``jobs`` notebooks running at once: this process's CPUs shared evenly."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, jobs))


KERNEL_ENV = {
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",  # figures embedded in the report (not Agg)
    "SPECDEC_PROGRESS": "0",                 # the library's progress bars off (specdec_lib.progress)
    "TQDM_DISABLE": "1",                     # any other tqdm bar created without an explicit `disable`
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",     # transformers' "Loading weights" and the Hub's download bars
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",  # transformers' advisory (known-harmless) warnings
    "TOKENIZERS_PARALLELISM": "false",       # the tokenizers fork warning
    # tqdm.auto's "IProgress not found" in a kernel without ipywidgets, whoever imports it first
    # (the library itself imports it quietly: specdec_lib.progress); appended to any PYTHONWARNINGS already set
    "PYTHONWARNINGS": "ignore:IProgress not found:Warning",
}
"""Environment of the notebook kernel under the runner: report-friendly output (no bars, inline figures)."""


@dataclass(frozen=True)
class RunOptions:
    """Where and how `reproduce` and `run_notebook` write and report: the reports and results folders (None:
    `destinations`), the folder of the notebooks, progress bars, the notebooks' output streamed to the terminal,
    the per-cell timeout in seconds (None: no limit), ``publish`` (let a run with parameters, or a smoke run,
    write into the published folders) and ``jobs``, the notebooks `reproduce` runs at a time (None: the
    profile's `PROFILE_JOBS`)."""

    reports_dir: Path | str | None = None
    results_dir: Path | str | None = None
    notebook_dir: Path | str = NOTEBOOK_DIR
    progress: bool = True
    log_output: bool = False
    execution_timeout: int | None = None
    publish: bool = False
    jobs: int | None = None

    def __post_init__(self) -> None:
        check_timeout(self.execution_timeout)
        jobs = self.jobs
        if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
            raise ValueError(f"jobs must be a positive integer, got {jobs!r}")


@dataclass
class NotebookRun:
    """Outcome of one notebook run."""

    notebook: str
    status: str  # "ok" | "failed"
    profile: str
    started: str
    duration_s: float
    error: str = ""
    report: str = ""  # path of the HTML report, relative to the reports folder
    parameters: dict[str, Any] = field(default_factory=dict)
    git_revision: str = ""
    machine: str = ""
    stderr_outputs: int = 0  # stderr outputs moved out of the report into logs/<notebook>.stderr.txt


# ----------------------------------------------------------------------------------------- running

@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """Temporarily set environment variables (inherited by the notebook's kernel)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def machine_description(info: Mapping[str, Any] | None = None) -> str:
    """A machine record (`results.machine`, default: this machine's) in a few words: host, CPU count,
    architecture and OS, CPU model and its bfloat16 matrix unit, GPU if any."""
    m = dict(machine() if info is None else info)
    text = (f"{m.get('hostname') or 'unknown host'}: {m.get('cpu_count')} CPUs "
            f"({m.get('architecture')}, {m.get('system')})")
    if m.get("cpu_model"):
        text += f", {m['cpu_model']}, bf16 matrix unit: {m.get('bf16_matrix', 'none')}"
    if m.get("cuda_device"):
        text += f", {m['cuda_device']}"
    return text


def _kernel_env() -> dict[str, str]:
    """`KERNEL_ENV`, keeping warning filters already set in ``$PYTHONWARNINGS`` (ours come last)."""
    env = dict(KERNEL_ENV)
    if os.environ.get("PYTHONWARNINGS"):
        env["PYTHONWARNINGS"] = os.environ["PYTHONWARNINGS"] + "," + KERNEL_ENV["PYTHONWARNINGS"]
    return env


def run_notebook(name: str, profile: str = "default", parameters: Mapping[str, Any] | None = None,
                 options: RunOptions = RunOptions()) -> NotebookRun:
    """Execute one notebook with papermill and publish its report, claims and results on success.

    The notebook gets ``profile`` and ``parameters`` injected after its ``parameters`` cell; every
    parameter must be declared there (`check_parameters`) and every argument passes `check_run` before
    anything runs. ``options``: folders, output and timeout (`RunOptions`; ``jobs`` is `reproduce`'s).
    Folders: `destinations` (with parameters, the ``custom/`` subfolders; the published folders only with
    ``publish=True``). Nothing of a failed or interrupted run replaces the last good
    report: the partial executed notebook of a failed run goes to ``<reports>/failed/<name>.ipynb`` (and
    ``.html``), and ``status.json`` records the error, both in `failures_dir` (for the published
    ``reports/``, its ``custom/`` run folder: a failure leaves the published files as they were); the
    staging folder is removed in every case (Ctrl-C included).
    """
    # lazy: notebook tooling is only needed when reports are built
    import nbformat
    import papermill as pm

    check_profile(profile)
    source = Path(options.notebook_dir) / f"{name}.ipynb"
    if not source.exists():
        raise ValueError(f"no notebook {source}")
    check_parameters([name], parameters, options.notebook_dir)
    reports, results = check_run(profile, parameters, options.reports_dir, options.results_dir, options.publish,
                                 options.execution_timeout)
    _quiet_papermill()
    params = {"profile": profile, **dict(parameters or {})}
    reports.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    stage = Path(tempfile.mkdtemp(prefix=f".stage-{name}-", dir=reports))
    info = {"git_revision": git_revision(), "machine": machine_description()}
    try:  # the stage goes whatever happens, KeyboardInterrupt included
        executed = stage / f"{name}.ipynb"
        error = ""
        stray: list[str] = []
        try:
            with _environ({**_kernel_env(),
                           "SPECDEC_CLAIMS_DIR": str(stage / "claims"),
                           "SPECDEC_RESULTS_DIR": str(stage / "results"),
                           "SPECDEC_PROFILE": profile}):
                _execute(pm, str(source), str(executed), parameters=params, kernel_name=KERNEL,
                         language="python", cwd=str(source.parent), progress_bar=options.progress,
                         log_output=options.log_output, execution_timeout=options.execution_timeout,
                         extra_arguments=list(KERNEL_ARGUMENTS))
            claims_file = stage / "claims" / f"{name}.json"
            if not claims_file.exists():
                raise RuntimeError(f"notebook {name} ran but saved no claims (results.save_claims('{name}', ...))")
            records = load_claims(claims_file)  # validates every record
            nb = nbformat.read(str(executed), as_version=4)
            stray = strip_stderr(nb)  # whatever still reached stderr goes to logs/, not into the report
            if stray:
                atomic_write_text(stage / "logs" / f"{name}.stderr.txt", "\n".join(stray) + "\n")
            nbformat.write(nb, str(executed))
            render_html(executed, stage / f"{name}.html", claims=records,
                        run={"profile": profile, "started": started, "duration_s": time.perf_counter() - t0, **info})
        except Exception as exc:  # noqa: BLE001 - any failure of one notebook is recorded, never propagated
            error = _describe(exc)
        duration = time.perf_counter() - t0
        if not error:
            run = NotebookRun(name, "ok", profile, started, duration, "", f"{name}.html", _jsonable(params), **info,
                              stderr_outputs=len(stray))
            try:
                _publish(stage, reports, results, name, stray, run)  # its status record included
                return run
            except Exception as exc:  # noqa: BLE001 - undone (all or nothing): recorded as a failed run
                error = f"publishing failed and was undone, nothing of the run is published: {_describe(exc)}"
        record = failures_dir(profile, reports)
        record.mkdir(parents=True, exist_ok=True)
        report = _keep_failed(executed, record, name)
        run = NotebookRun(name, "failed", profile, started, duration, error, report, _jsonable(params), **info)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _record_status(record, run)
    return run


def _keep_failed(executed: Path, reports: Path, name: str) -> str:
    """Move a failed run's partial executed notebook to ``<reports>/failed/`` and render it when it can be;
    returns the failed report's path relative to ``reports`` ("" when there is none)."""
    failed = reports / "failed"
    failed.mkdir(parents=True, exist_ok=True)
    if executed.exists():
        os.replace(executed, failed / f"{name}.ipynb")
        try:
            render_html(failed / f"{name}.ipynb", failed / f"{name}.html")
        except Exception:  # noqa: BLE001 - the .ipynb is kept even if it cannot be rendered
            pass
    return f"failed/{name}.html" if (failed / f"{name}.html").exists() else ""


def _publish(stage: Path, reports: Path, results: Path, name: str, stray: list[str], run: NotebookRun) -> None:
    """Move a successful run's staged report, claims (the replaced ones kept as the baseline of "changed
    since"), stderr log and result folders into place, drop a stale failed output and record ``run`` in
    status.json: all or nothing (`publication`; an error part-way undoes every move and propagates)."""
    with _status_lock(reports), publication() as pub:
        pub.put(stage / f"{name}.html", reports / f"{name}.html")
        claims = reports / "claims" / f"{name}.json"
        if claims.exists():  # the baseline of "changed since" in the index
            shutil.copy2(claims, stage / "previous.json")
            pub.put(stage / "previous.json", reports / PREVIOUS_CLAIMS / f"{name}.json")
        pub.put(stage / "claims" / f"{name}.json", claims)
        log = reports / "logs" / f"{name}.stderr.txt"
        if stray:
            pub.put(stage / "logs" / f"{name}.stderr.txt", log)
        else:
            pub.remove(log)
        for produced in sorted((stage / "results").glob("*")) if (stage / "results").exists() else []:
            if produced.is_dir():
                pub.put(produced, results / produced.name)
        for stale in (reports / "failed" / f"{name}.ipynb", reports / "failed" / f"{name}.html"):
            pub.remove(stale)
        atomic_write_text(stage / "status.json", _status_with(reports, run))
        pub.put(stage / "status.json", reports / "status.json")


def _describe(exc: BaseException) -> str:
    """A short error text: papermill's cell error (ename: evalue) or the exception."""
    ename = getattr(exc, "ename", None)
    if ename:
        cell = getattr(exc, "exec_count", None)
        return f"{ename}: {getattr(exc, 'evalue', '')}" + (f" (cell [{cell}])" if cell is not None else "")
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[-2000:]


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(params), default=str))


@contextlib.contextmanager
def _status_lock(reports: Path) -> Iterator[None]:
    """An exclusive lock on the reports folder (parallel runs of `reproduce` write its status.json too); the
    lock is on the folder itself, so no lock file is left beside the reports."""
    fd = os.open(reports, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _status_with(reports: Path, run: NotebookRun) -> str:
    """The text of ``reports``' status.json with ``run`` added (under `_status_lock`)."""
    status = load_status(reports)
    status[run.notebook] = asdict(run)
    return json.dumps(record_overlaps(status), indent=1, sort_keys=True)


def _record_status(reports: Path, run: NotebookRun) -> None:
    """Add one run to ``status.json`` under `_status_lock`."""
    with _status_lock(reports):
        atomic_write_text(reports / "status.json", _status_with(reports, run))


KERNEL_START_FAILURE = "Kernel died before replying to kernel_info"
KERNEL_START_TRIES = 3


def _execute(pm, *args, **kwargs) -> None:
    """``pm.execute_notebook(*args, **kwargs)``, tried again (up to `KERNEL_START_TRIES` times in all) when the
    kernel dies before it answers at all (`KERNEL_START_FAILURE`): then no cell has run, so a new try is
    safe. This happens when two notebooks start their kernels at once and both pick the same local port
    (jupyter_client's ZMQError "Address already in use"), which `reproduce`'s two jobs made possible."""
    for attempt in range(1, KERNEL_START_TRIES + 1):
        try:
            pm.execute_notebook(*args, **kwargs)
            return
        except Exception as exc:  # noqa: BLE001 - only the kernel-start failure is retried
            if KERNEL_START_FAILURE not in str(exc) or attempt == KERNEL_START_TRIES:
                raise
            time.sleep(0.5 * attempt)


def _longest_first(names: list[str], reports: Path) -> list[str]:
    """``names`` ordered by their last recorded duration, longest first (unknown ones first), so that
    parallel workers finish close together."""
    status = load_status(reports)
    return sorted(names, key=lambda n: -float(status.get(n, {}).get("duration_s", float("inf"))))


def reproduce(notebooks: Iterable[str] | None = None, profile: str = "default",
              parameters: Mapping[str, Any] | None = None, options: RunOptions = RunOptions()) -> list[NotebookRun]:
    """Run the notebooks (all by default) one after another, or ``options.jobs`` at a time in separate
    processes (None: the profile's `PROFILE_JOBS`; longest first by their last duration; each notebook keeps
    its own ``num_threads``, so timings measured inside a notebook share the CPU with the other job), then
    write ``index.html``. ``options``: folders, output, timeout and jobs (`RunOptions`).

    A notebook whose ``num_threads`` is not given gets `threads_per_notebook` of the notebooks running at
    once when that is above 1 (on a 2-core CPU: a notebook run alone takes both cores, two at a time keep
    their default of one thread each); status.json records it with the parameters.

    Everything is checked before anything is written: the notebooks (``notebook_dir`` must hold them),
    the parameters (`check_parameters`; each notebook gets those its ``parameters`` cell declares) and
    the folders (`destinations`: a run with parameters goes to the ``custom/`` subfolders and never
    into the published ``reports/`` / ``data/results/`` unless ``publish=True``). A failing notebook is
    recorded and the next one runs.
    """
    check_profile(profile)
    jobs = PROFILE_JOBS[profile] if options.jobs is None else options.jobs
    notebook_dir = options.notebook_dir
    names = resolve_notebooks(notebooks, notebook_dir)
    per_notebook = check_parameters(names, parameters, notebook_dir)
    threads = threads_per_notebook(min(jobs, len(names)))
    if threads > 1:  # a notebook alone (or fewer jobs than CPUs): its unset num_threads takes the free CPUs
        for name in names:
            if "num_threads" not in per_notebook[name] and "num_threads" in notebook_parameters(name, notebook_dir):
                per_notebook[name] = {**per_notebook[name], "num_threads": threads}
    reports, results_dir = check_run(profile, parameters, options.reports_dir, options.results_dir, options.publish,
                                     options.execution_timeout)
    options = replace(options, reports_dir=reports, results_dir=results_dir)
    if jobs > 1 and len(names) > 1:
        return _reproduce_parallel(names, jobs, profile, per_notebook, options)
    before = _status_text(reports)
    runs = []
    try:
        # lazy: tqdm.auto probes for Jupyter widgets at import
        from tqdm.auto import tqdm
        bar = tqdm(names, desc=f"notebooks ({profile})", unit="nb", disable=not options.progress)
    except ImportError:  # tqdm is a dependency; keep the runner usable without it anyway
        bar = names
    try:
        with _sigterm_interrupts():
            for name in bar:
                if hasattr(bar, "set_postfix_str"):
                    bar.set_postfix_str(name)
                print(started_line(name, profile), flush=True)
                run = run_notebook(name, profile, per_notebook[name], options)
                runs.append(run)
                print(finished_line(run, reports), flush=True)
    finally:  # an interrupted run still indexes what it published
        _rebuild_indexes(runs, profile, reports, notebook_dir, before)
    return runs


def started_line(name: str, profile: str) -> str:
    """The line printed when a notebook starts."""
    return f"{name}: started ({profile} profile)"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def verdict_counts(claims_file: Path) -> str:
    """A claims file's verdicts in a few words: "9 reproduced / 1 partly / 0 not / 2 n.a."."""
    verdicts = [c["verdict"] for c in load_claims(claims_file)]
    return (f"{verdicts.count('reproduced')} reproduced / {verdicts.count('partly')} partly / "
            f"{verdicts.count('not reproduced')} not / {verdicts.count('not applicable offline')} n.a.")


def finished_line(run: NotebookRun, reports: Path) -> str:
    """The line printed when a notebook ends: its duration and verdict counts, or its error and where its
    partial output went."""
    if run.status == "ok":
        claims = Path(reports) / "claims" / f"{run.notebook}.json"
        counts = verdict_counts(claims) if claims.is_file() else "no claims file"
        return f"{run.notebook}: done in {_minutes(run.duration_s)}, {counts}"
    where = failures_dir(run.profile, Path(reports)) / "failed"
    error = (run.error.splitlines() or [""])[0][:300]  # the whole error is in status.json and the index
    return f"{run.notebook}: failed after {_minutes(run.duration_s)}: {error} (partial output in {where})"


def _status_text(reports: Path) -> str | None:
    path = Path(reports) / "status.json"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _rebuild_indexes(runs: Iterable[NotebookRun | None], profile: str, reports: Path, notebook_dir: Path | str,
                     status_before: str | None) -> None:
    """Rebuild the index of ``reports``, except the published one when nothing was published into it (its
    status.json is as it was: a failed or interrupted run leaves the published index byte for byte), and
    the index of `failures_dir` when a failure was recorded there."""
    if not is_published(reports) or _status_text(reports) != status_before:
        build_index(reports, notebook_dir)
    record = failures_dir(profile, reports)
    if record != reports and any(r is not None and r.status != "ok" for r in runs):
        build_index(record, notebook_dir)


_PAPERMILL_NOISE = ("papermill.translators", "Unable to parse line")
"""papermill's own reading of a parameters cell warns about a comment holding '='; the runner reads the cells
itself (`notebook_parameters`), so the warning says nothing about the run."""


class _DropPrefix(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _quiet_papermill() -> None:
    """Drop `_PAPERMILL_NOISE` from papermill's log (once per process)."""
    logger = logging.getLogger(_PAPERMILL_NOISE[0])
    if not any(isinstance(f, _DropPrefix) for f in logger.filters):
        logger.addFilter(_DropPrefix(_PAPERMILL_NOISE[1]))


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"stopped by signal {signum}")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt (as Ctrl-C does) while the block runs, so the same clean-up runs."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_STOP = None  # a worker's view of the parallel run's stop event (`_worker_init`)


def _worker_init(stop) -> None:
    global _STOP
    _STOP = stop
    signal.signal(signal.SIGTERM, _raise_interrupt)


def _worker_run(name: str, profile: str, parameters: Mapping[str, Any], options: RunOptions) -> NotebookRun | None:
    """`run_notebook` in a worker, or None without running once the run has been stopped."""
    if _STOP is not None and _STOP.is_set():
        return None
    print(started_line(name, profile), flush=True)
    return run_notebook(name, profile, parameters, options)


def _reproduce_parallel(names: list[str], jobs: int, profile: str, per_notebook: Mapping[str, Any],
                        options: RunOptions) -> list[NotebookRun]:
    """`reproduce` with ``jobs`` worker processes (spawned: each sets its own environment for its kernel;
    ``options`` holds the checked folders, and the workers draw no progress bars).
    On Ctrl-C or SIGTERM: the stop event keeps queued notebooks from starting, the workers are sent
    SIGTERM (a KeyboardInterrupt there: the running notebooks clean up), and the interrupt propagates."""
    reports, notebook_dir = Path(options.reports_dir), options.notebook_dir
    worker_options = replace(options, progress=False)
    reports.mkdir(parents=True, exist_ok=True)
    before = _status_text(reports)
    order = _longest_first(list(names), reports)
    runs: dict[str, NotebookRun] = {}
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init,
                                                  initargs=(stop,))
    try:
        with _sigterm_interrupts():
            futures = [pool.submit(_worker_run, name, profile, per_notebook[name], worker_options) for name in order]
            for future in concurrent.futures.as_completed(futures):
                run = future.result()
                runs[run.notebook] = run
                print(finished_line(run, reports), flush=True)
    except BaseException:  # Ctrl-C, SIGTERM, or a broken pool: stop every worker, then let it propagate
        stop.set()  # notebooks already handed to a worker's queue return at once (`_worker_run`)
        for worker in multiprocessing.active_children():
            worker.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        _rebuild_indexes(runs.values(), profile, reports, notebook_dir, before)
        raise
    pool.shutdown(wait=True)
    _rebuild_indexes(runs.values(), profile, reports, notebook_dir, before)
    return [runs[name] for name in names]


__all__ = ["PROFILES", "PROFILE_JOBS", "EXECUTION_PARAMETERS", "design_parameters", "threads_per_notebook",
           "CUSTOM", "check_run", "check_run_parameters", "check_timeout", "failures_dir", "is_published",
           "started_line", "finished_line", "verdict_counts",
           "NOTEBOOK_DIR", "PUBLISHED_REPORTS_DIR", "PUBLISHED_RESULTS_DIR", "KERNEL_ENV", "NotebookRun",
           "default_reports_dir", "default_results_dir", "destinations", "list_notebooks", "resolve_notebooks",
           "notebook_parameters", "check_parameters", "NOT_A_LITERAL", "render_html", "RunOptions", "run_notebook",
           "reproduce",
           "load_status", "index_rows", "build_index", "strip_stderr", "split_ci", "summary_paragraph",
           "claims_summary_html", "add_claims_summary", "previous_claims", "claim_changes", "index_changes",
           "machine_description"]
