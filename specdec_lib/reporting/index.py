"""``<reports>/index.html``: one row per notebook and per claim, verdict counts per paper, and the
verdicts changed since the previous run, from a reports folder's ``claims/*.json`` and ``status.json``."""

from __future__ import annotations

import datetime as _dt
import html
import json
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from .destinations import check_existing_dir, check_writable_dir
from .contention import contention_note, overlapping_runs, run_span
from .html import _COLOURS, _cell, paper_value_cell, size_cell, split_ci
from .notebooks import NOTEBOOK_DIR, list_notebooks
from .results import VERDICTS, Claim, atomic_write_text, claims_of, load_claims
from .drafts import drafts_section
from .rule_history import rule_changes_section
from ..verdicts import SEED_DEPENDENT, STABLE_MARK
from ..verdicts.registry import load_registry

PREVIOUS_CLAIMS = Path(".previous") / "claims"
"""Where the runner keeps the claim files it replaced (relative to the reports folder)."""

SEED_CHECKS = Path("..") / "data" / "results" / "seed_checks"
"""Where runs of a notebook under another data seed are kept, relative to the reports folder (for ``reports/``
that is ``data/results/seed_checks``; `seed_checks.record_seed_check` writes them). Each JSON file holds the run's
``status`` and the ``claims`` it was run for (`results.claims_of`); the index sets them beside the published
verdicts."""


def data_seeds(parameters: Mapping[str, Any]) -> list[int] | None:
    """The data seeds a run was given: ``seeds`` (a list), or ``seed`` (a notebook with one seed, 07) as a list of
    one; None when neither is a list of integers."""
    seeds = parameters.get("seeds", [parameters["seed"]] if "seed" in parameters else None)
    if not isinstance(seeds, list) or not seeds or not all(type(s) is int for s in seeds):
        return None
    return seeds


def load_status(reports_dir: Path | str) -> dict[str, dict[str, Any]]:
    """The per-notebook run records of a reports folder (empty when none)."""
    path = Path(reports_dir) / "status.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


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
    return [asdict(Claim(**r)) for r in json.loads(payload_text)["claims"]]


def _git(reports: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=reports, capture_output=True, text=True, timeout=20)


def _committed_baseline(reports: Path, name: str) -> tuple[str, str] | None:
    """(claims text, source) of the previous committed run of ``name``: git HEAD's file while the reports folder
    holds a newer, uncommitted run; once that run is committed too, the file as it was before the commit that
    last changed it (so the index keeps showing what the latest run changed, whenever it is rebuilt). A new run
    whose claims are byte-identical to HEAD's is that committed run again, so it shows the same changes."""
    relative = f"./claims/{name}.json"
    head = _git(reports, "show", f"HEAD:{relative}")
    if head.returncode != 0:
        return None
    current = reports / "claims" / f"{name}.json"
    if not current.exists() or current.read_text(encoding="utf-8") != head.stdout:
        return head.stdout, "git HEAD"
    last = _git(reports, "log", "-n", "1", "--format=%H", "HEAD", "--", relative).stdout.strip()
    before = _git(reports, "show", f"{last}~1:{relative}") if last else None
    if before is None or before.returncode != 0:  # first committed run: nothing before it
        return None
    return before.stdout, f"git {last[:10]}~1"


def previous_claims(reports_dir: Path | str, name: str) -> tuple[list[dict[str, Any]] | None, str]:
    """The baseline a notebook's claims are compared with, and where it came from: the previous committed run
    when the reports folder is tracked (`_committed_baseline`), else the file the runner replaced last
    (``.previous/claims/<name>.json``); (None, "") when there is neither."""
    reports = Path(reports_dir)
    if reports.is_dir():
        try:
            committed = _committed_baseline(reports, name)
            if committed is not None:
                return _records(committed[0]), committed[1]
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
    counts per paper, the verdicts per draft (`drafts`), the verdicts changed since the previous run
    (`previous_claims`), the registry's rule
    changes (`rule_history`), the notebooks and
    every claim, with a verdict filter (a small inline script; without it every row shows). ValueError naming
    ``reports_dir`` when it is not an existing folder (it is never created here) or cannot be written."""
    check_existing_dir("reports_dir", reports_dir)
    check_writable_dir("reports_dir", reports_dir)
    reports = Path(reports_dir)
    claim_rows, nb_rows = index_rows(reports, notebook_dir)
    beside = overlapping_runs(load_status(reports))
    claim_rows = [{**r, "timed_beside": beside.get(r["notebook"], [])} if r.get("wall_clock") else r for r in claim_rows]
    changes, baselines = index_changes(reports, [r["notebook"] for r in nb_rows])
    changed_keys = {(c["notebook"], c["paper"], c["claim"]) for c in changes if c["change"] != "removed"}
    counts = {v: sum(r["verdict"] == v for r in claim_rows) for v in VERDICTS}
    checks = data_seed_rows(reports / SEED_CHECKS, claim_rows, nb_rows)
    out = (_run_section(nb_rows, counts) + _paper_counts_section(claim_rows)
           + drafts_section(load_registry(), claim_rows) + _changes_section(changes, baselines)
           + rule_changes_section(load_registry(), claim_rows) + _seed_section(claim_rows) + _data_seed_section(checks)
           + _notebooks_section(nb_rows)
           + _claims_section(claim_rows, counts, changed_keys))
    out.append(_FILTER_JS)
    out.append("</body></html>")
    return atomic_write_text(reports / "index.html", "\n".join(out))


def wall_minutes(nb_rows: Iterable[Mapping[str, Any]]) -> float | None:
    """Minutes from the first notebook's start to the last one's end (notebooks run side by side overlap,
    so this is the run's wall clock, less than the sum of their durations); None without timed rows."""
    spans = [s for r in nb_rows if r.get("status") != "not run" and (s := run_span(r)) is not None]
    if not spans:
        return None
    return (max(end for _, end in spans) - min(start for start, _ in spans)) / 60


def _run_section(nb_rows: list[dict[str, Any]], counts: Mapping[str, int]) -> list[str]:
    """The page's head and its "Run" section: when, which revision, machine and profile, verdict counts."""
    ran = [r for r in nb_rows if r["status"] != "not run"]
    revisions = list(dict.fromkeys(_short_rev(r["git_revision"]) for r in ran if r["git_revision"]))
    machines = list(dict.fromkeys(r["machine"] for r in ran if r["machine"]))
    profiles = list(dict.fromkeys(r["profile"] for r in ran if r["profile"]))
    starts = sorted(r["started"] for r in ran if r["started"])
    minutes = sum(r["duration_s"] for r in ran if isinstance(r["duration_s"], (int, float))) / 60
    wall = wall_minutes(ran)
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
           f"({len(ran)} notebooks, {minutes:.1f} min in all"
           + (f"; {wall:.1f} min of wall clock from the first start to the last end" if wall is not None else "")
           + ")</dd>",
           f"<dt>profile</dt><dd>{_cell(', '.join(profiles) or '-')}</dd>",
           f"<dt>git revision</dt><dd>{_cell(', '.join(revisions) or 'not recorded')}</dd>",
           f"<dt>machine</dt><dd>{_cell('; '.join(machines) or 'not recorded')}</dd>",
           "<dt>verdicts</dt><dd>" + ", ".join(f"{html.escape(v)}: {n}" for v, n in counts.items()) + "</dd></dl>"]
    return out


def _paper_counts_section(claim_rows: list[dict[str, Any]]) -> list[str]:
    """The "Verdicts by paper" section: one row of verdict counts per paper, then all papers, over the papers'
    claims only (registry owner "paper", or none recorded); then the workbook's own claims (owner "workbook":
    its derivations, fixtures and measurements of its own machinery), counted and listed apart."""
    out = []
    own = [r for r in claim_rows if r.get("owner") == "workbook"]
    paper_rows = [r for r in claim_rows if r.get("owner") != "workbook"]
    papers = list(dict.fromkeys(r["paper"] for r in paper_rows))
    out.append("<h2>Verdicts by paper</h2><table class='counts' id='paper-counts'><tr><th>paper</th>"
               + "".join(f"<th>{html.escape(v)}</th>" for v in VERDICTS) + "<th>total</th></tr>")
    for paper in papers + ["all papers"]:
        rows = paper_rows if paper == "all papers" else [r for r in paper_rows if r["paper"] == paper]
        cells = "".join(f"<td>{sum(r['verdict'] == v for r in rows) or ''}</td>" for v in VERDICTS)
        tag = "th" if paper == "all papers" else "td"
        out.append(f"<tr><{tag} style='text-align:left'>{_cell(paper)}</{tag}>{cells}<td>{len(rows)}</td></tr>")
    out.append("</table>")
    if own:
        counts = ", ".join(f"{html.escape(v)}: {n}" for v in VERDICTS if (n := sum(r["verdict"] == v for r in own)))
        out.append(f"<h3>The workbook's own claims</h3><div id='workbook-claims'><p>{len(own)} claims are the "
                   f"workbook's, not a paper's (not counted above): {counts}.</p><table><tr><th>notebook</th>"
                   "<th>claim</th><th>ours</th><th>verdict</th></tr>")
        for r in own:
            out.append(f"<tr><td>{_cell(r['notebook'])}</td><td>{_cell(r['claim'])}</td><td>{_cell(r['ours'])}</td>"
                       f"{_verdict_cell(r['verdict'])}</tr>")
        out.append("</table></div>")
    return out


def _changes_section(changes: list[dict[str, Any]], baselines: Mapping[str, str]) -> list[str]:
    """The "Changed since the previous run" section: claims whose verdict changed, new and removed ones."""
    out = []
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
    return out


def _seed_section(claim_rows: list[dict[str, Any]]) -> list[str]:
    """The "Seed stability" section: how many claims were decided under two bootstrap seeds
    (`verdicts.checked_claim`) and every claim whose verdict depends on the seed (a defect to fix)."""
    checked = [r for r in claim_rows if STABLE_MARK in r.get("notes", "") or SEED_DEPENDENT in r.get("notes", "")]
    flips = [r for r in checked if SEED_DEPENDENT in r.get("notes", "")]
    out = ["<h2>Seed stability</h2><div id='seed-stability'>",
           f"<p>{len(checked)} of {len(claim_rows)} claims were decided by a written rule under two bootstrap seeds; "
           f"{len(flips)} of them change verdict with the seed.</p>"]
    if flips:
        out.append("<table><tr><th>notebook</th><th>claim</th><th>verdicts by seed</th></tr>")
        for r in flips:
            note = r["notes"][r["notes"].index(SEED_DEPENDENT):]
            out.append(f"<tr><td>{_cell(r['notebook'])}</td><td>{_cell(r['claim'])}</td><td>{_cell(note)}</td></tr>")
        out.append("</table>")
    out.append("</div>")
    return out


def data_seed_rows(folder: Path | str, claim_rows: list[dict[str, Any]], nb_rows: list[dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    """One row per claim of each data-seed check in ``folder`` (`SEED_CHECKS`): the check's notebook, data seeds,
    revision, verdict and value, beside the published claim of the same notebook and text (its verdict, value and
    report revision; empty when the index has no such claim). ``agree``: the two verdicts are equal."""
    folder = Path(folder)
    published = {(r["notebook"], r["claim"]): r for r in claim_rows}
    report_revision = {r["notebook"]: r["git_revision"] for r in nb_rows}
    rows = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = json.loads(path.read_text(encoding="utf-8"))
        status = record.get("status", {})
        notebook = status.get("notebook", path.stem)
        for claim in claims_of(record):
            mine = published.get((notebook, claim["claim"]), {})
            rows.append({"file": path.name, "notebook": notebook, "claim": claim["claim"],
                         "seeds": data_seeds(status.get("parameters", {})) or "",
                         "check_revision": status.get("git_revision", ""),
                         "verdict": claim["verdict"], "ours": claim["ours"], "published_verdict": mine.get("verdict", ""),
                         "published_ours": mine.get("ours", ""), "report_revision": report_revision.get(notebook, ""),
                         "agree": bool(mine) and mine.get("verdict") == claim["verdict"]})
    return rows


def _data_seed_section(checks: list[dict[str, Any]]) -> list[str]:
    """The "Data-seed checks" part: each claim rerun under another data seed (other target-sampled contexts and
    drafts) beside its published verdict; a verdict that differs is a defect to fix, like a bootstrap-seed flip."""
    if not checks:
        return []
    differ = [c for c in checks if not c["agree"]]
    out = ["<h3>Data-seed checks</h3><div id='data-seed-checks'>",
           f"<p>{len(checks)} claim(s) rerun under another data seed (the whole notebook, or a reduced run that keeps "
           f"the design of the claims it lists; files in data/results/seed_checks/, written by `specdec seed-check`); "
           f"{len(differ)} with a verdict other than the published one.</p>",
           "<table><tr><th>notebook</th><th>claim</th><th>data seed</th><th>verdict there</th><th>ours there</th>"
           "<th>published verdict</th><th>published ours</th><th>revisions (check / report)</th></tr>"]
    for c in checks:
        out.append(f"<tr><td>{_cell(c['notebook'])}</td><td>{_cell(c['claim'])}<div class='notes'>{_cell(c['file'])}"
                   f"</div></td><td>{_cell(str(c['seeds']))}</td>{_verdict_cell(c['verdict'])}<td>{_cell(c['ours'])}</td>"
                   f"{_verdict_cell(c['published_verdict'] or 'no such claim published')}<td>{_cell(c['published_ours'])}</td>"
                   f"<td>{_cell(_short_rev(c['check_revision']))} / {_cell(_short_rev(c['report_revision']))}</td></tr>")
    out.append("</table></div>")
    return out


def _notebooks_section(nb_rows: list[dict[str, Any]]) -> list[str]:
    """The "Notebooks" section: status, profile, start, minutes, revision, stderr and error of each one."""
    out = []
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
    return out


def _claims_section(claim_rows: list[dict[str, Any]], counts: Mapping[str, int],
                    changed_keys: set[tuple[str, str, str]]) -> list[str]:
    """The "Claims" section: every claim with its values and verdict, and the verdict filter."""
    out = []
    options = "".join(f"<option value='{html.escape(v)}'>{html.escape(v)} ({counts[v]})</option>" for v in VERDICTS)
    out.append("<h2>Claims</h2><p><label for='verdict-filter'>Show verdict: </label>"
               "<select id='verdict-filter' onchange='filterClaims()'>"
               f"<option value='all'>all ({len(claim_rows)})</option>{options}"
               f"<option value='changed'>changed since the previous run ({len(changed_keys)})</option></select> "
               f"<span id='shown-count'>{len(claim_rows)} shown</span></p>"
               "<table id='claims'><tr><th>notebook</th><th>paper</th><th>claim</th>"
               "<th>paper's value</th><th>ours</th><th>95% CI</th><th>ours / paper</th><th>verdict</th></tr>")
    for r in claim_rows:
        changed = (r["notebook"], r["paper"], r["claim"]) in changed_keys
        notes = f"<div class='notes'>{_cell(r.get('notes'))}</div>" if r.get("notes") else ""
        if contention_note(r):
            notes += f"<div class='notes'><b>{_cell(contention_note(r))}</b></div>"
        ours, ci = (r["ours"], r["ci"]) if r.get("ci") else split_ci(r["ours"])
        out.append(f"<tr data-verdict='{html.escape(r['verdict'])}' data-changed='{int(changed)}'>"
                   f"<td>{_cell(r['notebook'], r['report'])}</td><td>{_cell(r['paper'])}</td>"
                   f"<td>{_cell(r['claim'])}{' <b>(changed)</b>' if changed else ''}{notes}</td>"
                   f"<td>{paper_value_cell(r)}</td><td>{_cell(ours)}</td>"
                   f"<td style='white-space:nowrap'>{_cell(ci)}</td><td>{size_cell(r)}</td>{_verdict_cell(r['verdict'])}</tr>")
    out.append("</table>")
    return out
