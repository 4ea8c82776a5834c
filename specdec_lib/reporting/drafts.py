"""The index's "Verdicts per draft" section: every claim the notebooks repeat with a second drafter (a registry
entry with ``repeats``), beside the same claim under the main draft, on the same prompts and seeds.

The main draft of the default profile is the target requantized to 4 bits: its errors are rounding noise at every
position, not a small model's misses. The second drafter is the learned feature draft. A verdict that holds with
one of them only is marked so here."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..verdicts.registry import Entry
from .html import _cell


def _verdict_text(row: Mapping[str, Any] | None) -> str:
    return f"{row['verdict']}: {row['ours']}" if row else "not in the reports"


def _agreement(main: Mapping[str, Any] | None, second: Mapping[str, Any] | None) -> str:
    if main is None or second is None:
        return "incomplete"
    if main["verdict"] == second["verdict"]:
        return "same verdict"
    held = [name for name, row in (("main draft", main), ("second drafter", second)) if row["verdict"] == "reproduced"]
    return f"holds with the {held[0]} only" if len(held) == 1 else "verdicts differ"


def draft_rows(entries: Iterable[Entry], claim_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per entry with ``repeats``: the id, the main draft's claim (the first published row of the same
    notebook whose text starts with ``repeats``) and the second drafter's (the row with the entry's id), each as
    "verdict: ours", and ``agreement`` ("same verdict", "holds with the ... only", "verdicts differ" or
    "incomplete" when a row is missing)."""
    claim_rows = list(claim_rows)
    rows = []
    for e in entries:
        if not e.repeats:
            continue
        main = next((r for r in claim_rows if r.get("notebook") == e.notebook
                     and str(r.get("claim", "")).startswith(e.repeats)), None)
        second = next((r for r in claim_rows if r.get("id") == e.id), None)
        rows.append({"id": e.id, "notebook": e.notebook, "claim": e.repeats,
                     "main": _verdict_text(main), "second": _verdict_text(second),
                     "agreement": _agreement(main, second)})
    return rows


def drafts_section(entries: Iterable[Entry], claim_rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The section's HTML lines (module docstring)."""
    rows = draft_rows(entries, claim_rows)
    one_draft = sum(r["agreement"].startswith("holds with") for r in rows)
    out = ["<h2>Verdicts per draft</h2><div id='verdicts-per-draft'>",
           f"<p>{len(rows)} claim(s) run with both drafts on the same prompts and seeds: the 4-bit self-draft (its "
           "errors are rounding noise) and the learned feature draft smollm2-135m-eagle (acceptance 0.52, a small "
           f"model's misses, as the papers' drafts make). {one_draft} verdict(s) hold with one draft only.</p>"]
    if rows:
        out.append("<table><tr><th>claim</th><th>main draft</th><th>second drafter</th><th>agreement</th></tr>")
        for r in rows:
            out.append(f"<tr><td>{_cell(r['claim'])}<div class='notes'>{_cell(r['notebook'])}, {_cell(r['id'])}</div>"
                       f"</td><td>{_cell(r['main'])}</td><td>{_cell(r['second'])}</td><td>{_cell(r['agreement'])}</td></tr>")
        out.append("</table>")
    out.append("</div>")
    return out


__all__ = ["draft_rows", "drafts_section"]
