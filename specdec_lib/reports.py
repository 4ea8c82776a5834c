"""Run the notebooks with papermill, render them to HTML, and build ``reports/index.html``.

Layout of a reports folder (``reports/`` for the ``default`` and ``full`` profiles, ``reports/smoke/`` for
``smoke`` so a quick check never replaces the real reports):

```
index.html              one row per claim (paper, claim, paper's value, ours, verdict) + one row per notebook
<notebook>.html         the last good executed notebook
claims/<notebook>.json  its claim records (`specdec_lib.results.save_claims`)
status.json             per notebook: ok / failed, profile, start time, duration, error
failed/<notebook>.ipynb the partial executed notebook of the last failed run (and .html), for inspection
```

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
import html
import json
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .results import REPO_ROOT, VERDICTS, atomic_write_text, load_claims

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
PROFILES = ("smoke", "default", "full")
KERNEL = "python3"


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


def render_html(notebook_path: Path | str, html_path: Path | str) -> Path:
    """Render an executed notebook to standalone HTML with nbconvert (written atomically)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook_path), as_version=4)
    body, _ = HTMLExporter().from_notebook_node(nb)
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
    try:  # the stage goes whatever happens, KeyboardInterrupt included
        executed = stage / f"{name}.ipynb"
        error = ""
        try:
            with _environ({"SPECDEC_CLAIMS_DIR": str(stage / "claims"),
                           "SPECDEC_RESULTS_DIR": str(stage / "results"),
                           "SPECDEC_PROFILE": profile,
                           "MPLBACKEND": "Agg"}):
                pm.execute_notebook(str(source), str(executed), parameters=params, kernel_name=KERNEL,
                                    language="python", cwd=str(source.parent), progress_bar=progress_bar,
                                    log_output=log_output, execution_timeout=execution_timeout)
            claims_file = stage / "claims" / f"{name}.json"
            if not claims_file.exists():
                raise RuntimeError(f"notebook {name} ran but saved no claims (results.save_claims('{name}', ...))")
            load_claims(claims_file)  # validates every record
            render_html(executed, stage / f"{name}.html")
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
            run = NotebookRun(name, "failed", profile, started, duration, error, report, _jsonable(params))
        else:
            os.replace(stage / f"{name}.html", reports / f"{name}.html")
            (reports / "claims").mkdir(exist_ok=True)
            os.replace(stage / "claims" / f"{name}.json", reports / "claims" / f"{name}.json")
            for produced in sorted((stage / "results").glob("*")) if (stage / "results").exists() else []:
                if produced.is_dir():
                    _replace_dir(produced, results / produced.name)
            for stale in (reports / "failed" / f"{name}.ipynb", reports / "failed" / f"{name}.html"):
                stale.unlink(missing_ok=True)
            run = NotebookRun(name, "ok", profile, started, duration, "", f"{name}.html", _jsonable(params))
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
        nb_rows.append({"notebook": name, "status": st.get("status", "not run"), "profile": st.get("profile", ""),
                        "started": st.get("started", ""), "duration_s": st.get("duration_s"),
                        "error": st.get("error", ""), "report": link, "last_good_report": good_report})
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


_COLOURS = {"reproduced": "#d4f4dd", "partly": "#fff3c4", "not reproduced": "#f9d6d5",
            "not applicable offline": "#e8e8e8", "failed": "#f4b6b6", "ok": "#d4f4dd", "not run": "#e8e8e8"}


def _cell(text: Any, link: str = "") -> str:
    body = html.escape("" if text is None else str(text))
    return f'<a href="{html.escape(link)}">{body}</a>' if link else body


def build_index(reports_dir: Path | str, notebook_dir: Path | str | None = NOTEBOOK_DIR) -> Path:
    """Write ``<reports>/index.html`` from the claim files and run records; returns its path."""
    reports = Path(reports_dir)
    claim_rows, nb_rows = index_rows(reports, notebook_dir)
    counts = {v: sum(r["verdict"] == v for r in claim_rows) for v in VERDICTS}
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>specdec workbook: claims</title>",
           "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
           "width:100%;margin-bottom:2em}td,th{border:1px solid #bbb;padding:4px 8px;vertical-align:top;"
           "font-size:14px}th{background:#f0f0f0;text-align:left}.notes{color:#555;font-size:12px}</style>",
           "</head><body>", "<h1>Lossless speculative decoding: reproduction index</h1>",
           f"<p>Generated {html.escape(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds'))}. "
           "Verdicts: " + ", ".join(f"{html.escape(v)}: {n}" for v, n in counts.items()) + ".</p>",
           "<h2>Notebooks</h2>",
           "<table><tr><th>notebook</th><th>status</th><th>profile</th><th>started (UTC)</th>"
           "<th>duration</th><th>error</th></tr>"]
    for r in nb_rows:
        colour = _COLOURS.get(r["status"], "#fff")
        dur = f"{r['duration_s']:.0f} s" if isinstance(r["duration_s"], (int, float)) else ""
        extra = ""
        if r["status"] == "failed" and r["last_good_report"]:
            extra = f" (<a href='{html.escape(r['last_good_report'])}'>last good report</a>)"
        out.append(f"<tr><td>{_cell(r['notebook'], r['report'])}{extra}</td>"
                   f"<td style='background:{colour}'>{_cell(r['status'])}</td><td>{_cell(r['profile'])}</td>"
                   f"<td>{_cell(r['started'])}</td><td>{dur}</td><td class='notes'>{_cell(r['error'])}</td></tr>")
    out.append("</table><h2>Claims</h2><table><tr><th>notebook</th><th>paper</th><th>claim</th>"
               "<th>paper's value</th><th>ours</th><th>verdict</th></tr>")
    for r in claim_rows:
        colour = _COLOURS.get(r["verdict"], "#fff")
        notes = f"<div class='notes'>{_cell(r.get('notes'))}</div>" if r.get("notes") else ""
        out.append(f"<tr><td>{_cell(r['notebook'], r['report'])}</td><td>{_cell(r['paper'])}</td>"
                   f"<td>{_cell(r['claim'])}{notes}</td><td>{_cell(r['paper_value'])}</td>"
                   f"<td>{_cell(r['ours'])}</td><td style='background:{colour}'>{_cell(r['verdict'])}</td></tr>")
    out.append("</table></body></html>")
    return atomic_write_text(reports / "index.html", "\n".join(out))


__all__ = ["PROFILES", "NOTEBOOK_DIR", "PUBLISHED_REPORTS_DIR", "PUBLISHED_RESULTS_DIR", "NotebookRun",
           "default_reports_dir", "default_results_dir", "destinations", "list_notebooks", "resolve_notebooks",
           "notebook_parameters", "check_parameters", "NOT_A_LITERAL", "render_html", "run_notebook", "reproduce",
           "load_status", "index_rows", "build_index"]
