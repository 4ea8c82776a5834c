"""Run the notebooks with papermill, render them to HTML, and build ``reports/index.html``.

Layout of a reports folder (``reports/`` for the ``default`` and ``full`` profiles, ``reports/smoke/`` for
``smoke`` so a quick check never replaces the real reports):

```
index.html              run metadata, verdict counts per paper, verdicts changed since the previous run,
                        one row per notebook and one row per claim (filterable by verdict)
<notebook>.html         the last good executed notebook, opening with its claims table and a summary
claims/<notebook>.json  its claim records (`specdec_lib.results.save_claims`)
status.json             per notebook: ok / failed, profile, start time, duration, git revision, machine, error
logs/<notebook>.stderr.txt  anything the notebook still wrote to stderr (moved out of the report; counted)
.previous/claims/       the claim files replaced by the latest runs (baseline of "changed since" when the
                        reports folder is not tracked by git; otherwise git HEAD's claim files are the baseline)
failed/<notebook>.ipynb the partial executed notebook of the last failed run (and .html), for inspection
```

Reports are meant to read cleanly: the kernel runs with `KERNEL_ENV` (inline figures, progress bars and
model-loading bars off; see `specdec_lib.progress`), and any stderr output left is moved to ``logs/``.

A run stages everything (executed notebook, HTML, claims, result data) in a temporary folder and moves it
into place only when the notebook succeeded, so a failing notebook never overwrites the last good report;
its rows in the index are marked ``failed`` and link to the failed output. The staging folder is removed
however the run ends (an error, Ctrl-C).

Published results: ``reports/`` and ``data/results/`` hold the reports of the notebooks' own settings.
A run with overridden parameters (``parameters=`` / ``-p``) writes to ``reports/custom/`` and
``data/results/custom/`` instead (``reports/smoke/custom/`` ... for smoke), and neither such a run nor a
smoke run may write into the published folders, even when they are named explicitly, unless
``publish=True`` (``--publish``). Parameters are checked against each notebook's ``parameters`` cell
before anything runs: ``profile`` is not a parameter (it picks the models and the folders; pass
``profile=``), and a name no selected notebook declares is a ValueError.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as _dt
import functools
import html
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .results import REPO_ROOT, VERDICTS, atomic_write_text, git_revision, load_claims

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
PROFILES = ("smoke", "default", "full")
KERNEL = "python3"

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


PREVIOUS_CLAIMS = Path(".previous") / "claims"
"""Where the runner keeps the claim files it replaced (relative to the reports folder)."""


PUBLISHED_REPORTS_DIR = REPO_ROOT / "reports"
PUBLISHED_RESULTS_DIR = REPO_ROOT / "data" / "results"
CUSTOM = "custom"


def default_reports_dir(profile: str, custom: bool = False) -> Path:
    """``reports/`` for real runs, ``reports/smoke/`` for the smoke profile; with ``custom`` (a run with
    overridden parameters) their ``custom/`` subfolder."""
    _check_profile(profile)
    base = PUBLISHED_REPORTS_DIR / ("smoke" if profile == "smoke" else "")
    return base / CUSTOM if custom else base


def default_results_dir(profile: str, custom: bool = False) -> Path:
    """``data/results/`` for real runs, ``data/results/smoke/`` for the smoke profile; with ``custom``
    their ``custom/`` subfolder."""
    _check_profile(profile)
    base = PUBLISHED_RESULTS_DIR / ("smoke" if profile == "smoke" else "")
    return base / CUSTOM if custom else base


def _same_dir(a: Path, b: Path) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def destinations(profile: str, parameters: Mapping[str, Any] | None = None,
                 reports_dir: Path | str | None = None, results_dir: Path | str | None = None,
                 publish: bool = False) -> tuple[Path, Path]:
    """(reports folder, results folder) of a run.

    Defaults: `default_reports_dir` / `default_results_dir`, in their ``custom/`` subfolder when
    ``parameters`` override anything (unless ``publish``). A run with parameters or on the smoke profile
    may not write into the published ``reports/`` or ``data/results/`` (ValueError naming the folder)
    unless ``publish=True``: a smaller or toy run never replaces the published reports and data.
    """
    _check_profile(profile)
    custom = bool(parameters) and not publish
    reports = Path(reports_dir) if reports_dir is not None else default_reports_dir(profile, custom)
    results = Path(results_dir) if results_dir is not None else default_results_dir(profile, custom)
    if not publish and (parameters or profile == "smoke"):
        why = f"parameters {sorted(parameters)}" if parameters else "the smoke profile"
        for arg, folder, published, default in (
                ("reports_dir", reports, PUBLISHED_REPORTS_DIR, default_reports_dir(profile, True)),
                ("results_dir", results, PUBLISHED_RESULTS_DIR, default_results_dir(profile, True))):
            if _same_dir(folder, published):
                raise ValueError(f"{arg}: a run with {why} would replace the published {published}; write "
                                 f"it elsewhere (by default {default}) or pass publish=True (--publish)")
    return reports, results


def _check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")


def list_notebooks(notebook_dir: Path | str = NOTEBOOK_DIR) -> list[str]:
    """Names (without ``.ipynb``) of the workbook's notebooks, in run order; ValueError naming
    ``notebook_dir`` when it is not a directory."""
    folder = Path(notebook_dir)
    if not folder.is_dir():
        raise ValueError(f"notebook_dir {str(folder)!r} is not a directory")
    return sorted(p.stem for p in folder.glob("*.ipynb") if not p.name.startswith("."))


def resolve_notebooks(names: Iterable[str] | None, notebook_dir: Path | str = NOTEBOOK_DIR) -> list[str]:
    """Match requested names (``04_block``, ``04``, ``block`` or ``04_block.ipynb``) against the notebooks.
    ValueError for an unknown name, a missing ``notebook_dir`` or one without notebooks."""
    known = list_notebooks(notebook_dir)
    if not known:
        raise ValueError(f"notebook_dir {str(notebook_dir)!r} holds no notebooks (*.ipynb)")
    if not names:
        return known
    out = []
    for name in names:
        stem = Path(name).stem
        hits = [k for k in known if k == stem] or [k for k in known if k.split("_", 1)[0] == stem
                                                   or k.split("_", 1)[-1] == stem]
        if len(hits) != 1:
            raise ValueError(f"unknown notebook {name!r}; known: {', '.join(known)}")
        out.extend(h for h in hits if h not in out)
    return out


class _NotALiteral:
    def __repr__(self) -> str:
        return "<not a literal>"


NOT_A_LITERAL = _NotALiteral()


def notebook_parameters(name: str, notebook_dir: Path | str = NOTEBOOK_DIR) -> dict[str, Any]:
    """The names assigned in notebook ``name``'s cell tagged ``parameters`` with their default values
    (`NOT_A_LITERAL` for a default that is an expression). ValueError when there is no such cell."""
    import nbformat

    path = Path(notebook_dir) / f"{name}.ipynb"
    if not path.is_file():
        raise ValueError(f"no notebook {path}")
    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if not cells:
        raise ValueError(f"notebook {name} has no cell tagged 'parameters': it takes no parameters")
    out: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    out[target.id] = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError):
                    out[target.id] = NOT_A_LITERAL
    return out


def check_parameters(notebooks: Iterable[str], parameters: Mapping[str, Any] | None,
                     notebook_dir: Path | str = NOTEBOOK_DIR) -> dict[str, dict[str, Any]]:
    """Per notebook, the ``parameters`` it declares (in its ``parameters`` cell).

    ValueError, before anything runs, for ``profile`` (it is chosen with ``profile=`` / ``--profile``,
    which also picks the models and the reports folder) and for a name that none of ``notebooks``
    declares (the message lists the names they do declare)."""
    parameters = dict(parameters or {})
    names = list(notebooks)
    if "profile" in parameters:
        raise ValueError("parameters: 'profile' is not a notebook parameter to override; choose the profile "
                         "with profile= (the --profile option), which also picks the reports folder")
    declared = {n: notebook_parameters(n, notebook_dir) if parameters else {} for n in names}
    known = sorted(set().union(*declared.values()) - {"profile"}) if declared else []
    unknown = sorted(k for k in parameters if not any(k in d for d in declared.values()))
    if unknown:
        raise ValueError(f"parameters: unknown name(s) {', '.join(map(repr, unknown))} for notebook(s) "
                         f"{', '.join(names)}; known: {', '.join(known) or 'none'}")
    return {n: {k: v for k, v in parameters.items() if k in declared[n]} for n in names}


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


@functools.lru_cache(maxsize=1)
def machine_description() -> str:
    """This machine in a few words: host, CPU count, processor, GPU if torch sees one."""
    text = f"{platform.node() or 'unknown host'}: {os.cpu_count()} CPUs ({platform.machine()}, {platform.system()})"
    try:
        import torch

        if torch.cuda.is_available():
            text += f", {torch.cuda.get_device_name(0)}"
    except ImportError:  # torch is a dependency; the description works without it
        pass
    return text


def strip_stderr(nb) -> list[str]:
    """Remove every stderr stream output from an executed notebook (in place); returns the non-blank texts,
    each prefixed by its cell's position. The runner writes them to ``logs/<notebook>.stderr.txt``."""
    texts = []
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code" or not cell.get("outputs"):
            continue
        kept = []
        for out in cell.outputs:
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = out.get("text", "")
                text = "".join(text) if isinstance(text, list) else str(text)
                if text.strip():  # blank stderr writes (e.g. a bar's closing newline) are dropped, not logged
                    texts.append(f"--- cell {i} ({cell.get('id', '')}):\n{text}")
            else:
                kept.append(out)
        cell.outputs = kept
    return texts


_STDERR_CSS = re.compile(r"\.jp-RenderedText\[data-mime-type=['\"]application/vnd\.jupyter\.stderr['\"]\]\s*\{[^}]*\}\s*")
"""nbconvert's CSS rules for stderr outputs (dropped from reports that have none)."""

_CI = re.compile(r"\s*\[\s*[-+−]?\d[\d.]*%?\s*,\s*[-+−]?\d[\d.]*%?\s*\]")


def split_ci(ours: str) -> tuple[str, str]:
    """Split our value into (value, CI) when it carries exactly one interval ``[low, high]`` (as written by
    `experiments.fmt_gain`: ``+2.39% [+0.90, +3.93]``); otherwise (ours, "")."""
    found = _CI.findall(ours or "")
    if len(found) != 1:
        return ours, ""
    return re.sub(r"\s{2,}", " ", _CI.sub("", ours, count=1)).strip(" ;,"), found[0].strip()


def _quote(text: str, limit: int = 90) -> str:
    text = " ".join(str(text).split())
    return "“" + (text if len(text) <= limit else text[: limit - 1] + "…") + "”"


def summary_paragraph(name: str, claims: list[Mapping[str, Any]], run: Mapping[str, Any] | None = None) -> str:
    """One paragraph (plain text) on a notebook's claims: counts by verdict, which claims fell short, and
    how the run was made (profile, date, duration, git revision, machine)."""
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    papers = list(dict.fromkeys(c["paper"] for c in claims))
    whose = f"of {papers[0]}" if len(papers) == 1 else f"from {len(papers)} sources ({'; '.join(papers)})"
    run = dict(run or {})
    text = (f"{name} checks {len(claims)} claim{'s' if len(claims) != 1 else ''} {whose}"
            + (f" on the {run['profile']} profile" if run.get("profile") else "") + ": "
            + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + ".")
    for verdict in ("not reproduced", "partly"):
        short = [c["claim"] for c in claims if c["verdict"] == verdict]
        if short:
            shown = ", ".join(_quote(c) for c in short[:4]) + (f" and {len(short) - 4} more" if len(short) > 4 else "")
            text += f" {verdict.capitalize()}: {shown}."
    if counts["reproduced"] and counts["reproduced"] == len(claims):
        text += " Every claim checked was reproduced."
    how = []
    if run.get("started"):
        how.append(f"run {str(run['started']).replace('T', ' ').replace('+00:00', ' UTC')}")
    if isinstance(run.get("duration_s"), (int, float)):
        how.append(f"{run['duration_s'] / 60:.1f} min")
    if run.get("git_revision"):
        how.append(f"git {str(run['git_revision'])[:12]}{'-dirty' if str(run['git_revision']).endswith('-dirty') else ''}")
    if run.get("machine"):
        how.append(f"on {run['machine']}")
    if how:
        how_text = ", ".join(how)
        text += " " + how_text[0].upper() + how_text[1:] + "."
    return text


def claims_summary_html(name: str, claims: list[Mapping[str, Any]], run: Mapping[str, Any] | None = None) -> str:
    """The block that opens a report: the summary paragraph and the claims table (claim, paper's value, ours,
    95% CI, verdict). One HTML block without blank lines (a markdown cell keeps it whole)."""
    papers = list(dict.fromkeys(c["paper"] for c in claims))
    head = ("<tr>" + ("<th>paper</th>" if len(papers) > 1 else "") + "<th>claim</th><th>paper's value</th>"
            "<th>ours</th><th>95% CI</th><th>verdict</th></tr>")
    rows = []
    for c in claims:
        ours, ci = (c["ours"], c["ci"]) if c.get("ci") else split_ci(c["ours"])
        notes = f"<br><small style='color:#555'>{_cell(c['notes'])}</small>" if c.get("notes") else ""
        rows.append(f"<tr data-verdict='{html.escape(c['verdict'])}'>"
                    + (f"<td>{_cell(c['paper'])}</td>" if len(papers) > 1 else "")
                    + f"<td>{_cell(c['claim'])}{notes}</td><td>{_cell(c['paper_value'])}</td><td>{_cell(ours)}</td>"
                    f"<td style='white-space:nowrap'>{_cell(ci or '–')}</td>"
                    f"<td style='background:{_COLOURS.get(c['verdict'], '#fff')}'>{_cell(c['verdict'])}</td></tr>")
    return ("<div id='claims-summary' class='specdec-claims-summary'>"
            f"<h2>Claims at a glance</h2><p>{html.escape(summary_paragraph(name, claims, run))}</p>"
            "<table class='specdec-claims'>" + head + "".join(rows) + "</table>"
            "<p><small>Computed at the end of this notebook (its <em>Claims</em> section); CIs are 95% bootstrap "
            "intervals over prompts where the claim has one.</small></p></div>")


def add_claims_summary(nb, name: str, claims: list[Mapping[str, Any]], run: Mapping[str, Any] | None = None):
    """Insert the claims summary (`claims_summary_html`) as a markdown cell right after the notebook's title
    cell (its first markdown cell; at the top when it does not start with one). Returns the notebook."""
    import nbformat

    cell = nbformat.v4.new_markdown_cell(claims_summary_html(name, claims, run))
    cell.metadata["tags"] = ["claims-summary"]
    cell["id"] = "claims-summary"
    at = 1 if nb.cells and nb.cells[0].get("cell_type") == "markdown" else 0
    nb.cells.insert(at, cell)
    return nb


def _kernel_env() -> dict[str, str]:
    """`KERNEL_ENV`, keeping warning filters already set in ``$PYTHONWARNINGS`` (ours come last)."""
    env = dict(KERNEL_ENV)
    if os.environ.get("PYTHONWARNINGS"):
        env["PYTHONWARNINGS"] = os.environ["PYTHONWARNINGS"] + "," + KERNEL_ENV["PYTHONWARNINGS"]
    return env


def render_html(notebook_path: Path | str, html_path: Path | str, claims: list[Mapping[str, Any]] | None = None,
                run: Mapping[str, Any] | None = None) -> Path:
    """Render an executed notebook to standalone HTML with nbconvert (written atomically). With ``claims``
    the report opens with its claims table and summary (`add_claims_summary`; ``run``: the run record)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook_path), as_version=4)
    if claims:
        add_claims_summary(nb, Path(notebook_path).stem, claims, run)
    body, _ = HTMLExporter().from_notebook_node(nb)
    if not any(o.get("name") == "stderr" for c in nb.cells for o in c.get("outputs", [])):
        body = _STDERR_CSS.sub("", body)  # a report without stderr needs no stderr style either
    return atomic_write_text(html_path, body)


def _replace_dir(src: Path, dst: Path) -> None:
    """Move folder ``src`` to ``dst``, replacing ``dst`` (the old copy is removed only after the move,
    and put back if the move fails or is interrupted)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
    try:
        shutil.move(str(src), str(dst))
    except BaseException:
        if old is not None:
            shutil.rmtree(dst, ignore_errors=True)
            os.replace(old, dst)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def run_notebook(name: str, profile: str = "default", parameters: Mapping[str, Any] | None = None,
                 reports_dir: Path | str | None = None, results_dir: Path | str | None = None,
                 notebook_dir: Path | str = NOTEBOOK_DIR, progress_bar: bool = True, log_output: bool = False,
                 execution_timeout: int | None = None, publish: bool = False) -> NotebookRun:
    """Execute one notebook with papermill and publish its report, claims and results on success.

    The notebook gets ``profile`` and ``parameters`` injected after its ``parameters`` cell; every
    parameter must be declared there (`check_parameters`). Folders: `destinations` (with parameters,
    the ``custom/`` subfolders; the published folders only with ``publish=True``). Nothing of a failed
    or interrupted run replaces the last good report: the partial executed notebook of a failed run goes
    to ``<reports>/failed/<name>.ipynb`` (and ``.html``), and ``status.json`` records the error; the
    staging folder is removed in every case (Ctrl-C included).
    """
    import nbformat
    import papermill as pm

    _check_profile(profile)
    source = Path(notebook_dir) / f"{name}.ipynb"
    if not source.exists():
        raise ValueError(f"no notebook {source}")
    check_parameters([name], parameters, notebook_dir)
    reports, results = destinations(profile, parameters, reports_dir, results_dir, publish)
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
                pm.execute_notebook(str(source), str(executed), parameters=params, kernel_name=KERNEL,
                                    language="python", cwd=str(source.parent), progress_bar=progress_bar,
                                    log_output=log_output, execution_timeout=execution_timeout)
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
        if error:
            failed = reports / "failed"
            failed.mkdir(parents=True, exist_ok=True)
            if executed.exists():
                os.replace(executed, failed / f"{name}.ipynb")
                try:
                    render_html(failed / f"{name}.ipynb", failed / f"{name}.html")
                except Exception:  # noqa: BLE001 - the .ipynb is kept even if it cannot be rendered
                    pass
            report = f"failed/{name}.html" if (failed / f"{name}.html").exists() else ""
            run = NotebookRun(name, "failed", profile, started, duration, error, report, _jsonable(params), **info)
        else:
            os.replace(stage / f"{name}.html", reports / f"{name}.html")
            (reports / "claims").mkdir(exist_ok=True)
            if (reports / "claims" / f"{name}.json").exists():  # the baseline of "changed since" in the index
                (reports / PREVIOUS_CLAIMS).mkdir(parents=True, exist_ok=True)
                shutil.copy2(reports / "claims" / f"{name}.json", reports / PREVIOUS_CLAIMS / f"{name}.json")
            os.replace(stage / "claims" / f"{name}.json", reports / "claims" / f"{name}.json")
            log = reports / "logs" / f"{name}.stderr.txt"
            if stray:
                log.parent.mkdir(exist_ok=True)
                os.replace(stage / "logs" / f"{name}.stderr.txt", log)
            else:
                log.unlink(missing_ok=True)
            for produced in sorted((stage / "results").glob("*")) if (stage / "results").exists() else []:
                if produced.is_dir():
                    _replace_dir(produced, results / produced.name)
            for stale in (reports / "failed" / f"{name}.ipynb", reports / "failed" / f"{name}.html"):
                stale.unlink(missing_ok=True)
            run = NotebookRun(name, "ok", profile, started, duration, "", f"{name}.html", _jsonable(params), **info,
                              stderr_outputs=len(stray))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _record_status(reports, run)
    return run


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


def _record_status(reports: Path, run: NotebookRun) -> None:
    path = reports / "status.json"
    status = load_status(reports)
    status[run.notebook] = asdict(run)
    atomic_write_text(path, json.dumps(status, indent=1, sort_keys=True))


def load_status(reports_dir: Path | str) -> dict[str, dict[str, Any]]:
    """The per-notebook run records of a reports folder (empty when none)."""
    path = Path(reports_dir) / "status.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def reproduce(notebooks: Iterable[str] | None = None, profile: str = "default",
              parameters: Mapping[str, Any] | None = None, reports_dir: Path | str | None = None,
              results_dir: Path | str | None = None, notebook_dir: Path | str = NOTEBOOK_DIR,
              progress: bool = True, log_output: bool = False, execution_timeout: int | None = None,
              publish: bool = False) -> list[NotebookRun]:
    """Run the notebooks (all by default) one after another, then write ``index.html``.

    Everything is checked before anything is written: the notebooks (``notebook_dir`` must hold them),
    the parameters (`check_parameters`; each notebook gets those its ``parameters`` cell declares) and
    the folders (`destinations`: a run with parameters goes to the ``custom/`` subfolders and never
    into the published ``reports/`` / ``data/results/`` unless ``publish=True``). A failing notebook is
    recorded and the next one runs.
    """
    _check_profile(profile)
    names = resolve_notebooks(notebooks, notebook_dir)
    per_notebook = check_parameters(names, parameters, notebook_dir)
    reports, results_dir = destinations(profile, parameters, reports_dir, results_dir, publish)
    runs = []
    try:
        from tqdm.auto import tqdm
        bar = tqdm(names, desc=f"notebooks ({profile})", unit="nb", disable=not progress)
    except ImportError:  # tqdm is a dependency; keep the runner usable without it anyway
        bar = names
    for name in bar:
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(name)
        run = run_notebook(name, profile, per_notebook[name], reports, results_dir, notebook_dir,
                           progress_bar=progress, log_output=log_output, execution_timeout=execution_timeout,
                           publish=publish)
        runs.append(run)
        print(f"[{run.status:>6}] {name} ({run.duration_s:.1f} s)" + (f": {run.error}" if run.error else ""),
              flush=True)
    build_index(reports, notebook_dir)
    return runs


# ----------------------------------------------------------------------------------------- index

def index_rows(reports_dir: Path | str, notebook_dir: Path | str | None = NOTEBOOK_DIR
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(claim rows, notebook rows) of the index, from ``claims/*.json`` and ``status.json``.

    A notebook whose last run failed keeps its last good claims (values shown) with the verdict
    ``failed``; one that never succeeded gets a single ``failed`` row with its error.
    """
    reports = Path(reports_dir)
    status = load_status(reports)
    names = set(status)
    names.update(p.stem for p in (reports / "claims").glob("*.json"))
    if notebook_dir is not None:
        names.update(list_notebooks(notebook_dir))
    claim_rows, nb_rows = [], []
    for name in sorted(names):
        st = status.get(name, {})
        claims_file = reports / "claims" / f"{name}.json"
        failed = st.get("status") == "failed"
        good_report = f"{name}.html" if (reports / f"{name}.html").exists() else ""
        link = st.get("report", "") if failed else good_report
        log = f"logs/{name}.stderr.txt" if (reports / "logs" / f"{name}.stderr.txt").exists() else ""
        nb_rows.append({"notebook": name, "status": st.get("status", "not run"), "profile": st.get("profile", ""),
                        "started": st.get("started", ""), "duration_s": st.get("duration_s"),
                        "error": st.get("error", ""), "report": link, "last_good_report": good_report,
                        "git_revision": st.get("git_revision", ""), "machine": st.get("machine", ""),
                        "stderr_outputs": st.get("stderr_outputs"), "stderr_log": log})
        records: list[dict[str, Any]] = []
        if claims_file.exists():
            try:
                records = load_claims(claims_file)
            except (ValueError, KeyError, TypeError) as exc:
                failed, st = True, {**st, "error": f"unreadable claims file: {exc}"}
        for r in records:
            row = {**r, "notebook": name, "report": link}
            if failed:
                row["notes"] = (f"notebook failed in its last run ({st.get('error', '')}); values from the last "
                                f"good run. " + row.get("notes", "")).strip()
                row["verdict"] = "failed"
            claim_rows.append(row)
        if failed and not records:
            claim_rows.append({"paper": "-", "claim": f"all claims of {name}", "paper_value": "-", "ours": "-",
                               "verdict": "failed", "notes": st.get("error", ""), "notebook": name, "report": link})
    return claim_rows, nb_rows


def _records(payload_text: str) -> list[dict[str, Any]]:
    from .results import Claim

    return [asdict(Claim(**r)) for r in json.loads(payload_text)["claims"]]


def previous_claims(reports_dir: Path | str, name: str) -> tuple[list[dict[str, Any]] | None, str]:
    """The baseline a notebook's claims are compared with, and where it came from: the claims file in git
    HEAD when the reports folder is tracked (the previous committed run), else the file the runner replaced
    last (``.previous/claims/<name>.json``); (None, "") when there is neither."""
    reports = Path(reports_dir)
    if reports.is_dir():
        try:
            shown = subprocess.run(["git", "show", f"HEAD:./claims/{name}.json"], cwd=reports, capture_output=True,
                                   text=True, timeout=20)
            if shown.returncode == 0:
                return _records(shown.stdout), "git HEAD"
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
            pass
    kept = reports / PREVIOUS_CLAIMS / f"{name}.json"
    if kept.exists():
        try:
            return _records(kept.read_text(encoding="utf-8")), "previous run"
        except (ValueError, KeyError, TypeError):
            return None, ""
    return None, ""


def claim_changes(previous: Iterable[Mapping[str, Any]], current: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Claims whose verdict changed, new claims and removed ones, matched on (paper, claim)."""
    prev = {(r["paper"], r["claim"]): r for r in previous}
    cur = {(r["paper"], r["claim"]): r for r in current}
    out = []
    for key, r in cur.items():
        old = prev.get(key)
        if old is None:
            out.append({"change": "new", "paper": key[0], "claim": key[1], "before": "", "after": r["verdict"],
                        "ours_before": "", "ours_after": r["ours"]})
        elif old["verdict"] != r["verdict"]:
            out.append({"change": "verdict", "paper": key[0], "claim": key[1], "before": old["verdict"],
                        "after": r["verdict"], "ours_before": old["ours"], "ours_after": r["ours"]})
    for key, r in prev.items():
        if key not in cur:
            out.append({"change": "removed", "paper": key[0], "claim": key[1], "before": r["verdict"], "after": "",
                        "ours_before": r["ours"], "ours_after": ""})
    return out


def index_changes(reports_dir: Path | str, names: Iterable[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(changes of every notebook with a baseline, each with its ``notebook``; {notebook: baseline source})."""
    reports = Path(reports_dir)
    changes, sources = [], {}
    for name in names:
        path = reports / "claims" / f"{name}.json"
        if not path.exists():
            continue
        previous, source = previous_claims(reports, name)
        if previous is None:
            continue
        sources[name] = source
        try:
            current = load_claims(path)
        except (ValueError, KeyError, TypeError):
            continue
        changes += [{"notebook": name, **c} for c in claim_changes(previous, current)]
    return changes, sources


_COLOURS = {"reproduced": "#d4f4dd", "partly": "#fff3c4", "not reproduced": "#f9d6d5",
            "not applicable offline": "#e8e8e8", "failed": "#f4b6b6", "ok": "#d4f4dd", "not run": "#e8e8e8"}


def _cell(text: Any, link: str = "") -> str:
    body = html.escape("" if text is None else str(text))
    return f'<a href="{html.escape(link)}">{body}</a>' if link else body


def _verdict_cell(verdict: str) -> str:
    return f"<td style='background:{_COLOURS.get(verdict, '#fff')}'>{_cell(verdict)}</td>" if verdict else "<td></td>"


def _short_rev(rev: str) -> str:
    return rev[:10] + ("-dirty" if rev.endswith("-dirty") else "") if rev else ""


_FILTER_JS = """<script>
function filterClaims() {
  var v = document.getElementById('verdict-filter').value, n = 0;
  document.querySelectorAll('#claims tr[data-verdict]').forEach(function (r) {
    var show = v === 'all' || (v === 'changed' ? r.getAttribute('data-changed') === '1' : r.getAttribute('data-verdict') === v);
    r.style.display = show ? '' : 'none';
    if (show) { n++; }
  });
  document.getElementById('shown-count').textContent = n + ' shown';
}
</script>"""


def build_index(reports_dir: Path | str, notebook_dir: Path | str | None = NOTEBOOK_DIR) -> Path:
    """Write ``<reports>/index.html`` from the claim files and run records; returns its path.

    It shows the run metadata (date, git revision, machine, profile, minutes per notebook), the verdict
    counts per paper, the verdicts changed since the previous run (`previous_claims`), the notebooks and
    every claim, with a verdict filter (a small inline script; without it every row shows)."""
    reports = Path(reports_dir)
    claim_rows, nb_rows = index_rows(reports, notebook_dir)
    changes, baselines = index_changes(reports, [r["notebook"] for r in nb_rows])
    changed_keys = {(c["notebook"], c["paper"], c["claim"]) for c in changes if c["change"] != "removed"}
    counts = {v: sum(r["verdict"] == v for r in claim_rows) for v in VERDICTS}
    ran = [r for r in nb_rows if r["status"] != "not run"]
    revisions = list(dict.fromkeys(_short_rev(r["git_revision"]) for r in ran if r["git_revision"]))
    machines = list(dict.fromkeys(r["machine"] for r in ran if r["machine"]))
    profiles = list(dict.fromkeys(r["profile"] for r in ran if r["profile"]))
    starts = sorted(r["started"] for r in ran if r["started"])
    minutes = sum(r["duration_s"] for r in ran if isinstance(r["duration_s"], (int, float))) / 60
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>specdec workbook: claims</title>",
           "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
           "width:100%;margin-bottom:2em}td,th{border:1px solid #bbb;padding:4px 8px;vertical-align:top;"
           "font-size:14px}th{background:#f0f0f0;text-align:left}.notes{color:#555;font-size:12px}"
           "table.counts{width:auto}table.counts td{text-align:right}dl.meta{display:grid;"
           "grid-template-columns:max-content auto;gap:2px 1em}dl.meta dt{font-weight:bold}dl.meta dd{margin:0}"
           "</style>", "</head><body>", "<h1>Lossless speculative decoding: reproduction index</h1>",
           "<h2>Run</h2><dl class='meta' id='run-metadata'>",
           f"<dt>index generated</dt><dd>{_cell(now)}</dd>",
           f"<dt>notebooks run</dt><dd>{_cell(starts[0] if starts else '-')} … {_cell(starts[-1] if starts else '-')} "
           f"({len(ran)} notebooks, {minutes:.1f} min in all)</dd>",
           f"<dt>profile</dt><dd>{_cell(', '.join(profiles) or '-')}</dd>",
           f"<dt>git revision</dt><dd>{_cell(', '.join(revisions) or 'not recorded')}</dd>",
           f"<dt>machine</dt><dd>{_cell('; '.join(machines) or 'not recorded')}</dd>",
           "<dt>verdicts</dt><dd>" + ", ".join(f"{html.escape(v)}: {n}" for v, n in counts.items()) + "</dd></dl>"]

    papers = list(dict.fromkeys(r["paper"] for r in claim_rows))
    out.append("<h2>Verdicts by paper</h2><table class='counts' id='paper-counts'><tr><th>paper</th>"
               + "".join(f"<th>{html.escape(v)}</th>" for v in VERDICTS) + "<th>total</th></tr>")
    for paper in papers + ["all papers"]:
        rows = claim_rows if paper == "all papers" else [r for r in claim_rows if r["paper"] == paper]
        cells = "".join(f"<td>{sum(r['verdict'] == v for r in rows) or ''}</td>" for v in VERDICTS)
        tag = "th" if paper == "all papers" else "td"
        out.append(f"<tr><{tag} style='text-align:left'>{_cell(paper)}</{tag}>{cells}<td>{len(rows)}</td></tr>")
    out.append("</table>")

    sources = sorted(set(baselines.values()))
    out.append("<h2>Changed since the previous run</h2><div id='changes'>")
    if not baselines:
        out.append("<p>No previous run to compare with (no claims in git HEAD and none kept from a previous run).</p>")
    elif not changes:
        out.append(f"<p>No verdict changed since the previous run (baseline: {html.escape(', '.join(sources))}; "
                   f"{len(baselines)} notebooks compared).</p>")
    else:
        out.append(f"<p>{len(changes)} change(s) against the previous run (baseline: {html.escape(', '.join(sources))};"
                   " claims are matched on their paper and text).</p><table><tr><th>notebook</th><th>change</th>"
                   "<th>claim</th><th>before</th><th>after</th><th>ours before → after</th></tr>")
        for c in changes:
            out.append(f"<tr><td>{_cell(c['notebook'])}</td><td>{_cell(c['change'])}</td><td>{_cell(c['claim'])}"
                       f"<div class='notes'>{_cell(c['paper'])}</div></td>{_verdict_cell(c['before'])}"
                       f"{_verdict_cell(c['after'])}<td>{_cell(c['ours_before'])} → {_cell(c['ours_after'])}</td></tr>")
        out.append("</table>")
    out.append("</div>")

    out.append("<h2>Notebooks</h2><table id='notebooks'><tr><th>notebook</th><th>status</th><th>profile</th>"
               "<th>started (UTC)</th><th>minutes</th><th>git revision</th><th>stderr</th><th>error</th></tr>")
    for r in nb_rows:
        minutes_nb = f"{r['duration_s'] / 60:.1f}" if isinstance(r["duration_s"], (int, float)) else ""
        extra = ""
        if r["status"] == "failed" and r["last_good_report"]:
            extra = f" (<a href='{html.escape(r['last_good_report'])}'>last good report</a>)"
        stderr = _cell(f"{r['stderr_outputs']} outputs", r["stderr_log"]) if r["stderr_outputs"] else \
            ("0" if r["stderr_outputs"] == 0 and r["status"] == "ok" else "")
        out.append(f"<tr><td>{_cell(r['notebook'], r['report'])}{extra}</td>"
                   f"<td style='background:{_COLOURS.get(r['status'], '#fff')}'>{_cell(r['status'])}</td>"
                   f"<td>{_cell(r['profile'])}</td><td>{_cell(r['started'])}</td><td>{minutes_nb}</td>"
                   f"<td>{_cell(_short_rev(r['git_revision']))}</td><td>{stderr}</td>"
                   f"<td class='notes'>{_cell(r['error'])}</td></tr>")
    out.append("</table>")

    options = "".join(f"<option value='{html.escape(v)}'>{html.escape(v)} ({counts[v]})</option>" for v in VERDICTS)
    out.append("<h2>Claims</h2><p><label for='verdict-filter'>Show verdict: </label>"
               "<select id='verdict-filter' onchange='filterClaims()'>"
               f"<option value='all'>all ({len(claim_rows)})</option>{options}"
               f"<option value='changed'>changed since the previous run ({len(changed_keys)})</option></select> "
               f"<span id='shown-count'>{len(claim_rows)} shown</span></p>"
               "<table id='claims'><tr><th>notebook</th><th>paper</th><th>claim</th>"
               "<th>paper's value</th><th>ours</th><th>95% CI</th><th>verdict</th></tr>")
    for r in claim_rows:
        changed = (r["notebook"], r["paper"], r["claim"]) in changed_keys
        notes = f"<div class='notes'>{_cell(r.get('notes'))}</div>" if r.get("notes") else ""
        ours, ci = (r["ours"], r["ci"]) if r.get("ci") else split_ci(r["ours"])
        out.append(f"<tr data-verdict='{html.escape(r['verdict'])}' data-changed='{int(changed)}'>"
                   f"<td>{_cell(r['notebook'], r['report'])}</td><td>{_cell(r['paper'])}</td>"
                   f"<td>{_cell(r['claim'])}{' <b>(changed)</b>' if changed else ''}{notes}</td>"
                   f"<td>{_cell(r['paper_value'])}</td><td>{_cell(ours)}</td>"
                   f"<td style='white-space:nowrap'>{_cell(ci)}</td>{_verdict_cell(r['verdict'])}</tr>")
    out.append("</table>")
    out.append(_FILTER_JS)
    out.append("</body></html>")
    return atomic_write_text(reports / "index.html", "\n".join(out))


__all__ = ["PROFILES", "NOTEBOOK_DIR", "PUBLISHED_REPORTS_DIR", "PUBLISHED_RESULTS_DIR", "KERNEL_ENV", "NotebookRun",
           "default_reports_dir", "default_results_dir", "destinations", "list_notebooks", "resolve_notebooks",
           "notebook_parameters", "check_parameters", "NOT_A_LITERAL", "render_html", "run_notebook", "reproduce",
           "load_status", "index_rows", "build_index", "strip_stderr", "split_ci", "summary_paragraph",
           "claims_summary_html", "add_claims_summary", "previous_claims", "claim_changes", "index_changes",
           "machine_description"]
