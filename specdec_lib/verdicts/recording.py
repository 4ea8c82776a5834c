"""Recording claims from the checks (`checks`): every check applied to a frame (`evaluate`), the seed-stability
table (`seed_stability`) and the claim row of one check under two bootstrap seeds (`checked_claim`)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from ..reporting.results import Claim, claim as make_claim
from .decisions import PARTLY_V, REPRODUCED, Decision


def evaluate(checks: Iterable[Any], frame, seed: int = 0, n_boot: int = 2000):
    """Apply every check to ``frame``; returns a DataFrame claim, rule, verdict, estimate, CI, detail."""
    rows = []
    for check in checks:
        d = check.evaluate(frame, seed, n_boot)
        rows.append({"claim": check.claim, "rule": d.rule, "verdict": d.verdict, "estimate": d.estimate,
                     "ci_low": d.ci_low, "ci_high": d.ci_high, "detail": d.detail, "power": d.power})
    return pd.DataFrame(rows)


def seed_stability(checks: Sequence[Any], frame, seeds: Sequence[int] = (0, 1), n_boot: int = 2000,
                   split_by: str | None = None, max_boot: int = 32000):
    """Apply the rules under each bootstrap seed (and, with ``split_by``, e.g. the drafting-seed column,
    on each part of the data separately) and report whether a claim's verdict depends on the seed.

    The bootstrap seeds are compared as `checked_claim` compares them: the resamples are doubled from ``n_boot``
    up to ``max_boot`` while they disagree (a flip is a CI end within Monte-Carlo error of the null or the margin).

    Returns a DataFrame: claim, rule, one ``verdict@<seed>`` column per bootstrap seed (and one
    ``verdict[<split>=<v>]`` per part), the CI ends per seed, the ``resamples`` used and ``stable``."""
    if len(seeds) < 2:
        raise ValueError("need at least two seeds")
    rows = []
    for check in checks:
        row: dict[str, Any] = {"claim": check.claim}
        decisions, row["resamples"] = _bootstrap_decisions(check, frame, seeds, n_boot, max_boot)
        row["rule"] = decisions[0].rule
        for s, d in zip(seeds, decisions):
            row[f"verdict@{s}"] = d.verdict
            row[f"ci@{s}"] = (round(d.ci_low, 6), round(d.ci_high, 6))
        verdicts = [d.verdict for d in decisions]
        parts = []
        if split_by is not None and split_by in frame.columns:
            for value, part in frame.groupby(split_by, sort=True):
                try:
                    v = check.evaluate(part, int(seeds[0]), n_boot).verdict
                except ValueError:
                    continue
                row[f"verdict[{split_by}={value}]"] = v
                parts.append(v)
        row["stable_bootstrap"] = len(set(verdicts)) == 1
        row["stable_split"] = len(set(parts)) <= 1
        row["stable"] = row["stable_bootstrap"] and row["stable_split"]
        rows.append(row)
    return pd.DataFrame(rows)


def to_claim(decision: Decision, paper: str, claim_text: str, paper_value: Any, ours: str | None = None,
             notes: str = "") -> Claim:
    """A `results.Claim` record from a decision (``ours`` defaults to the estimate with its CI)."""
    extra = "; ".join(x for x in (decision.detail, decision.power, notes) if x)
    return make_claim(paper, claim_text, paper_value, ours if ours is not None else decision.text(), decision.verdict,
                      notes=f"rule {decision.rule}: {extra}")


SEED_DEPENDENT = "seed-dependent verdict"
STABLE_MARK = "same verdict under bootstrap seeds"
"""Markers in a claim's notes (`checked_claim`) that the reports' index counts and lists."""


def _bootstrap_decisions(check: Any, frame, seeds: Sequence[int], n_boot: int, max_boot: int
                         ) -> tuple[list[Decision], int]:
    """``check``'s decision under each bootstrap seed, doubling the resamples while the seeds disagree (a
    percentile CI end within Monte-Carlo error of the null or the margin) up to ``max_boot``. Returns the
    decisions and the resamples they used."""
    n = n_boot
    while True:
        decisions = [check.evaluate(frame, int(s), n) for s in seeds]
        if len({d.verdict for d in decisions}) == 1 or n >= max_boot:
            return decisions, n
        n = min(2 * n, max_boot)


def _recorded(decisions: Sequence[Decision]) -> Decision:
    """The decision a claim records: the first, unless the verdicts are 'reproduced' under some seeds and
    'partly' under others, when the claim is not established and the first 'partly' decision is recorded."""
    if {d.verdict for d in decisions} == {REPRODUCED, PARTLY_V}:
        return next(d for d in decisions if d.verdict == PARTLY_V)
    return decisions[0]


def checked_claim(check: Any, frame, paper: str, paper_value: Any, seeds: Sequence[int] = (0, 1),
                  n_boot: int = 2000, ours: str | Callable[[Decision], str] | None = None, notes: str = "",
                  monte_carlo: Mapping[int, Any] | None = None, max_boot: int = 32000) -> Claim:
    """Apply ``check`` (a GainCheck, TrendCheck, EveryCheck, AllOfCheck, IdentityCheck, ModelGapCheck or
    VectorStatisticCheck, VectorLevelCheck, SpeedupCheck) under each bootstrap seed and record the first seed's decision as a claim
    (``ours``: its text, or a function of the recorded decision giving it). Its notes name the rule and say whether
    every seed gives the same verdict.

    While the bootstrap seeds disagree, the resamples are doubled (from ``n_boot`` up to ``max_boot``): a flip
    between seeds is a CI end within the percentile's Monte-Carlo error of the null or the margin, and more
    resamples shrink that error. A verdict that still depends on the seed is marked `SEED_DEPENDENT` (a defect:
    the index lists it), and a claim that is 'reproduced' under one seed and 'partly' under another is recorded as
    'partly' (it is not established).

    ``monte_carlo``: for a frame computed from Monte Carlo integrals (e.g. `experiments.index_law_at_rows`),
    Monte Carlo seed -> the same frame recomputed with that seed. The rule is applied to each (first bootstrap
    seed) too, and a verdict that changes with the integrals' own seed is marked `SEED_DEPENDENT` as well."""
    if len(seeds) < 2:
        raise ValueError("seeds: need at least two bootstrap seeds")
    if monte_carlo is not None and (not isinstance(monte_carlo, Mapping) or not monte_carlo):
        raise ValueError(f"monte_carlo must map Monte Carlo seeds to recomputed frames, got {monte_carlo!r:.80}")
    if not (isinstance(max_boot, int) and max_boot >= n_boot):
        raise ValueError(f"max_boot must be an int >= n_boot ({n_boot}), got {max_boot!r}")
    decisions, used = _bootstrap_decisions(check, frame, seeds, n_boot, max_boot)
    labels = [f"seed {s}" for s in seeds]
    for mc_seed, mc_frame in (monte_carlo or {}).items():
        decisions.append(check.evaluate(mc_frame, int(seeds[0]), used))
        labels.append(f"Monte Carlo seed {mc_seed}")
    resamples = "" if used == n_boot else f" with {used} resamples ({n_boot} disagreed)"
    verdicts = [d.verdict for d in decisions]
    if len(set(verdicts)) == 1:
        stability = f"{STABLE_MARK} {', '.join(map(str, seeds))}{resamples}"
        if monte_carlo:
            stability += " and Monte Carlo seeds " + ", ".join(
                f"{s} (estimate {d.estimate:+.4g})" for s, d in zip(monte_carlo, decisions[len(seeds):]))
    else:
        stability = (f"{SEED_DEPENDENT}{resamples or f' with {used} resamples'}: "
                     + ", ".join(f"{v} ({label})" for label, v in zip(labels, verdicts)))
    extra = "; ".join(x for x in (notes, stability) if x)
    recorded = _recorded(decisions)
    if callable(ours):
        ours = ours(recorded)
    return to_claim(recorded, paper, check.claim, paper_value, ours, extra)
