"""The index's "Rule changes" section: every rule the claims registry replaced after its claim had run, with
the old rule, the new one, the reason (the old rule's defect where it could not fail), the verdict under each,
and the verdict the published claim holds now; then any rule still marked as unable to fail."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..verdicts.registry import Entry
from .html import _cell


def rule_change_rows(entries: Iterable[Entry], claim_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per history item of every entry: its id, old and new rule, reason, defect, the verdicts the
    item records, and ``verdict_now`` (the published verdict of the claim with that id, "" when none; only for
    the entry's latest change)."""
    now = {r.get("id"): r.get("verdict", "") for r in claim_rows if r.get("id")}
    rows = []
    for e in entries:
        for i, item in enumerate(e.history):
            latest = i == len(e.history) - 1
            rows.append({"id": e.id, "claim": e.claim, "old_rule": item["old_rule"], "new_rule": item["new_rule"],
                         "reason": item["reason"], "defect": item.get("defect", ""),
                         "verdict_old": item["verdict_old"], "verdict_new": item["verdict_new"],
                         "revision": e.rule_revision if latest else "",
                         "verdict_now": now.get(e.id, "") if latest else ""})
    return rows


def rule_changes_section(entries: Iterable[Entry], claim_rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The section's HTML lines (module docstring)."""
    entries = tuple(entries)
    rows = rule_change_rows(entries, claim_rows)
    out = ["<h2>Rule changes</h2><div id='rule-changes'>",
           f"<p>{len(rows)} rule change(s) in the claims registry (specdec_lib/verdicts/claims/). A rule is fixed "
           "before its data; a rule found wrong is replaced, and both rules and their verdicts stay here.</p>"]
    if rows:
        out.append("<table><tr><th>claim</th><th>old rule</th><th>new rule</th><th>reason</th>"
                   "<th>verdict, old rule</th><th>verdict, new rule</th><th>published now</th></tr>")
        for r in rows:
            defect = f"<div class='notes'>defect of the old rule: {_cell(r['defect'])}</div>" if r["defect"] else ""
            rev = f" (set at {_cell(r['revision'])})" if r["revision"] else ""
            out.append(f"<tr><td>{_cell(r['id'])}<div class='notes'>{_cell(r['claim'])}</div></td>"
                       f"<td>{_cell(r['old_rule'])}</td><td>{_cell(r['new_rule'])}{rev}</td>"
                       f"<td>{_cell(r['reason'])}{defect}</td><td>{_cell(r['verdict_old'])}</td>"
                       f"<td>{_cell(r['verdict_new'])}</td><td>{_cell(r['verdict_now'])}</td></tr>")
        out.append("</table>")
    unable = [e for e in entries if not e.can_fail]
    out.append(f"<p>{len(unable)} rule(s) still marked as unable to fail"
               + (": " + ", ".join(_cell(e.id) for e in unable) if unable else "") + ".</p></div>")
    return out


__all__ = ["rule_change_rows", "rule_changes_section"]
