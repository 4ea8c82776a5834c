"""One notebook's report: the claims summary that opens it, stderr moved out of it, and the HTML.

`render_html` renders an executed notebook with nbconvert; with its claims, the report opens with
`claims_summary_html` (a `summary_paragraph` and the claims table, `split_ci` splitting a value from its
95% CI). `strip_stderr` removes stderr outputs (the runner writes them to ``logs/``).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any, Mapping

from .contention import contention_note
from .results import VERDICTS, atomic_write_text


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


def size_cell(claim: Mapping[str, Any]) -> str:
    """Our gain over the paper's as the claims tables show it: ``2.10 [1.40, 2.80] larger`` and, outside a
    factor of 2, the reason (the record's ``size_note``); "–" for a claim without a size (HTML-escaped)."""
    ratio = claim.get("size_ratio")
    if not ratio:
        return "–"
    est, low, high = (list(ratio) + [None, None])[:3]
    text = f"{est:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else "")
    text = f"{html.escape(text)} {html.escape(str(claim.get('size', '')))}"
    if claim.get("size_note"):
        text += f"<br><small style='color:#555'>{_cell(claim['size_note'])}</small>"
    return text


def paper_value_cell(claim: Mapping[str, Any]) -> str:
    """The paper's value as the claims tables show it, labelled when it is not the paper's: a value the
    workbook derived (the registry's ``paper_value_source``) reads "… (workbook derivation: the paper prints
    none)" (HTML-escaped)."""
    text = _cell(claim.get("paper_value"))
    if claim.get("paper_value_source") == "workbook derivation":
        text += " <small style='color:#555'>(workbook derivation: the paper prints none)</small>"
    return text


def claims_summary_html(name: str, claims: list[Mapping[str, Any]], run: Mapping[str, Any] | None = None) -> str:
    """The block that opens a report: the summary paragraph and the claims table (claim, paper's value, ours,
    95% CI, ours / paper (`size_cell`), verdict). One HTML block without blank lines (a markdown cell keeps it whole)."""
    papers = list(dict.fromkeys(c["paper"] for c in claims))
    head = ("<tr>" + ("<th>paper</th>" if len(papers) > 1 else "") + "<th>claim</th><th>paper's value</th>"
            "<th>ours</th><th>95% CI</th><th>ours / paper</th><th>verdict</th></tr>")
    rows = []
    for c in claims:
        ours, ci = (c["ours"], c["ci"]) if c.get("ci") else split_ci(c["ours"])
        notes = f"<br><small style='color:#555'>{_cell(c['notes'])}</small>" if c.get("notes") else ""
        if contention_note(c):
            notes += f"<br><small style='color:#a05a00'>{_cell(contention_note(c))}</small>"
        rows.append(f"<tr data-verdict='{html.escape(c['verdict'])}'>"
                    + (f"<td>{_cell(c['paper'])}</td>" if len(papers) > 1 else "")
                    + f"<td>{_cell(c['claim'])}{notes}</td><td>{paper_value_cell(c)}</td><td>{_cell(ours)}</td>"
                    f"<td style='white-space:nowrap'>{_cell(ci or '–')}</td><td>{size_cell(c)}</td>"
                    f"<td style='background:{_COLOURS.get(c['verdict'], '#fff')}'>{_cell(c['verdict'])}</td></tr>")
    return ("<div id='claims-summary' class='specdec-claims-summary'>"
            f"<h2>Claims at a glance</h2><p>{html.escape(summary_paragraph(name, claims, run))}</p>"
            "<table class='specdec-claims'>" + head + "".join(rows) + "</table>"
            "<p><small>Computed at the end of this notebook (its <em>Claims</em> section); CIs are 95% bootstrap "
            "intervals over prompts where the claim has one.</small></p></div>")


_SUMMARY_START = re.compile(r"<div[^>]*\bid=[\"']claims-summary[\"'][^>]*>")
_SUMMARY_END = "Computed at the end of this notebook"


def refresh_claims_summary(html_path: Path | str, name: str, claims: list[Mapping[str, Any]],
                           run: Mapping[str, Any] | None = None) -> Path:
    """Rewrite the claims block at the top of a rendered report (`claims_summary_html`) from ``claims``, the rest
    of the page unchanged: for registry fields (quotes, sizes, labels) that changed after the run. The claims'
    values and verdicts must be the run's own (its claims file). ValueError when the page has no claims block."""
    path = Path(html_path)
    page = path.read_text(encoding="utf-8")
    start = _SUMMARY_START.search(page)
    end = page.find("</div>", page.find(_SUMMARY_END, start.end())) if start else -1
    if start is None or end == -1 or page.find(_SUMMARY_END, start.end()) == -1:
        raise ValueError(f"{path} has no claims block to refresh (a report rendered with its claims)")
    return atomic_write_text(path, page[:start.start()] + claims_summary_html(name, claims, run)
                             + page[end + len("</div>"):])


def add_claims_summary(nb, name: str, claims: list[Mapping[str, Any]], run: Mapping[str, Any] | None = None):
    """Insert the claims summary (`claims_summary_html`) as a markdown cell right after the notebook's title
    cell (its first markdown cell; at the top when it does not start with one). Returns the notebook."""
    # lazy: notebook tooling is only needed when reports are built
    import nbformat

    cell = nbformat.v4.new_markdown_cell(claims_summary_html(name, claims, run))
    cell.metadata["tags"] = ["claims-summary"]
    cell["id"] = "claims-summary"
    at = 1 if nb.cells and nb.cells[0].get("cell_type") == "markdown" else 0
    nb.cells.insert(at, cell)
    return nb


def render_html(notebook_path: Path | str, html_path: Path | str, claims: list[Mapping[str, Any]] | None = None,
                run: Mapping[str, Any] | None = None) -> Path:
    """Render an executed notebook to standalone HTML with nbconvert (written atomically). With ``claims``
    the report opens with its claims table and summary (`add_claims_summary`; ``run``: the run record)."""
    # lazy: notebook tooling is only needed when reports are built
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook_path), as_version=4)
    if claims:
        add_claims_summary(nb, Path(notebook_path).stem, claims, run)
    body, _ = HTMLExporter().from_notebook_node(nb)
    if not any(o.get("name") == "stderr" for c in nb.cells for o in c.get("outputs", [])):
        body = _STDERR_CSS.sub("", body)  # a report without stderr needs no stderr style either
    return atomic_write_text(html_path, body)


_COLOURS = {"reproduced": "#d4f4dd", "partly": "#fff3c4", "not reproduced": "#f9d6d5",
            "not applicable offline": "#e8e8e8", "failed": "#f4b6b6", "ok": "#d4f4dd", "not run": "#e8e8e8"}


def _cell(text: Any, link: str = "") -> str:
    body = html.escape("" if text is None else str(text))
    return f'<a href="{html.escape(link)}">{body}</a>' if link else body
