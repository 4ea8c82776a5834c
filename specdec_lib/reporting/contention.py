"""Which wall-clock claims were timed while another notebook shared the CPU.

`make reproduce` runs two notebooks at a time on a 2-core CPU, and a notebook timed beside another one shares
the memory bus with it. The run records (status.json: each notebook's start and duration) say which runs
overlapped, and each record keeps the list as ``timed_beside``; a claim the registry marks ``wall_clock``
carries ``timed_beside`` (the notebooks that ran at the same time) so that the reports and the index label it.
A run made alone (``jobs=1``) has none.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable, Mapping


def run_span(record: Mapping[str, Any]) -> tuple[float, float] | None:
    """A run record's (start, end) in seconds since the epoch; None without a start or a duration."""
    if not record.get("started") or not isinstance(record.get("duration_s"), (int, float)):
        return None
    start = _dt.datetime.fromisoformat(str(record["started"])).timestamp()
    return start, start + float(record["duration_s"])


START_RESOLUTION_S = 1.0
"""A run record's start is written to the second (truncated), so two runs made back to back can appear to
overlap by up to this much; shorter overlaps are not counted."""


def overlapping_runs(status: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Notebook -> the other notebooks whose runs overlapped its own run in time by more than
    `START_RESOLUTION_S` (sorted): those its record already lists (``timed_beside``, kept by `record_overlaps`
    when a partner's record is replaced by a later run) and those overlapping among the successful records."""
    spans = {name: s for name, rec in status.items() if rec.get("status") == "ok" and (s := run_span(rec)) is not None}
    return {name: sorted(set(status[name].get("timed_beside") or [])
                         | {o for o, (b0, b1) in spans.items()
                            if o != name and min(a1, b1) - max(a0, b0) > START_RESOLUTION_S})
            for name, (a0, a1) in spans.items()}


def record_overlaps(status: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``status`` with each successful record's ``timed_beside`` set to `overlapping_runs`: written with every
    new run record, so a run keeps its partners after their records are replaced by later runs."""
    beside = overlapping_runs(status)
    return {name: {**rec, "timed_beside": beside[name]} if name in beside else dict(rec)
            for name, rec in status.items()}


def label_wall_clock(claims: Iterable[Mapping[str, Any]], notebook: str,
                     status: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``claims`` with ``timed_beside`` set on each wall-clock claim (registry ``wall_clock``) from the run
    records; the other claims unchanged."""
    beside = overlapping_runs(status).get(notebook, [])
    return [{**c, "timed_beside": beside} if c.get("wall_clock") else dict(c) for c in claims]


def contention_note(claim: Mapping[str, Any]) -> str:
    """The label of a wall-clock claim: '' when timed alone (or not a wall-clock claim)."""
    beside = claim.get("timed_beside") or []
    if not beside:
        return ""
    return ("timed while " + ", ".join(beside) + " ran on the same CPU (two notebooks at a time): the times "
            "are not those of the machine alone")


__all__ = ["run_span", "overlapping_runs", "label_wall_clock", "contention_note"]
