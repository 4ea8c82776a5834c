"""Decisions from an estimate and its CI under a rule: directional, equivalence, exact, every-cell and
trend decisions, and the power statement."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..reporting.results import VERDICTS
from .rules import MIN_EFFECT, TIE_TOLERANCE

REPRODUCED, PARTLY_V, NOT_REPRODUCED, NA = VERDICTS[0], VERDICTS[1], VERDICTS[2], VERDICTS[3]


# ----------------------------------------------------------------------------------------- decisions

@dataclass(frozen=True)
class Decision:
    """The outcome of a rule: verdict, estimate with its 95% CI, the rule kind, a short reason, the
    power statement ("decided" / "underpowered" / "" when no paper effect was given) and the estimate's
    ``unit``: "%" for a relative gain (shown times 100), else the words written after the plain numbers
    (e.g. a level's contrast in tokens per step)."""

    verdict: str
    estimate: float
    ci_low: float
    ci_high: float
    rule: str
    detail: str = ""
    power: str = ""
    unit: str = "%"

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    def text(self, percent: bool = True) -> str:
        """``+3.20% [+1.10, +5.00]``; the plain numbers with ``percent=False``; for a ``unit`` other than "%"
        the plain numbers followed by it (``+0.46 [+0.37, +0.59] (expected_tokens, gamma last minus first)``)."""
        if self.rule == "exact":
            return f"max |difference| {abs(self.estimate):.1e}"
        percent = percent and self.unit == "%"
        f = 100.0 if percent else 1.0
        unit, suffix = ("%", "") if percent else ("", "" if self.unit == "%" else f" {self.unit}")
        if math.isnan(self.ci_low):
            return f"{f * self.estimate:+.2f}{unit}{suffix}"
        return f"{f * self.estimate:+.2f}{unit} [{f * self.ci_low:+.2f}, {f * self.ci_high:+.2f}]{suffix}"


def _nan(x) -> bool:
    return x is None or (isinstance(x, (float, np.floating)) and math.isnan(x))


def decide_directional(estimate: float, ci_low: float, ci_high: float, direction: str = ">", null: float = 0.0,
                       min_effect: float = 0.0, kind: str = "superiority", exact: bool = False,
                       paper_effect: float | None = None, effect_source: str = "paper") -> Decision:
    """The superiority / noninferiority / threshold rule for "quantity > null" (or "<").

    ``exact=True``: the quantity has no sampling noise (the CI is the point). A missing CI (fewer than
    two prompts) can never establish a sampled claim: the best verdict is then "partly". An estimate within
    `TIE_TOLERANCE` of the null is a tie (two arms with one law, differing by float rounding) and is decided
    as no effect: "not reproduced", whatever the sign of the rounding."""
    if direction not in (">", "<"):
        raise ValueError("direction must be '>' or '<'")
    estimate = float(estimate)
    if exact:
        ci_low = ci_high = estimate
    lo, hi = float(ci_low), float(ci_high)
    if not _nan(lo) and lo > hi:
        raise ValueError(f"empty interval [{lo}, {hi}]")
    sign = 1.0 if direction == ">" else -1.0
    e = sign * (estimate - null)
    clo, chi = (sign * (lo - null), sign * (hi - null)) if sign > 0 else (sign * (hi - null), sign * (lo - null))
    power = power_statement(lo, hi, paper_effect, source=effect_source) if paper_effect is not None and not exact else ""
    if abs(e) <= TIE_TOLERANCE:
        return Decision(NOT_REPRODUCED, estimate, lo, hi, kind, f"a tie (|estimate - null| <= {TIE_TOLERANCE:g})", power)
    if e < 0.0:
        detail = "contradicted (CI on the wrong side)" if not _nan(chi) and chi < 0 else "inconclusive, wrong side"
        return Decision(NOT_REPRODUCED, estimate, lo, hi, kind, detail, power)
    if _nan(clo):
        return Decision(PARTLY_V, estimate, lo, hi, kind, "no CI (fewer than two prompts)", power)
    if clo <= 0.0:
        return Decision(PARTLY_V, estimate, lo, hi, kind, "CI includes the null", power)
    if e < min_effect:
        return Decision(PARTLY_V, estimate, lo, hi, kind, f"below the minimum effect {min_effect:g}", power)
    return Decision(REPRODUCED, estimate, lo, hi, kind, "established", power)


def decide_equivalence(estimate: float, ci_low: float, ci_high: float, margin: float,
                       kind: str = "equivalence") -> Decision:
    """The equivalence rule: reproduced when the CI lies inside (-margin, +margin); a point estimate outside
    the margin is "not reproduced", its detail saying "contradicted" when the whole CI is outside too, else
    "inconclusive" (as the directional rule's wrong side)."""
    if not margin > 0:
        raise ValueError("margin must be > 0")
    estimate, lo, hi = float(estimate), float(ci_low), float(ci_high)
    if abs(estimate) >= margin:
        outside = not _nan(lo) and (lo >= margin or hi <= -margin)
        detail = "contradicted (CI outside the margin)" if outside else "inconclusive (the CI reaches into the margin)"
        return Decision(NOT_REPRODUCED, estimate, lo, hi, kind, f"point estimate outside +-{margin:g}, {detail}")
    if _nan(lo) or lo <= -margin or hi >= margin:
        return Decision(PARTLY_V, estimate, lo, hi, kind, f"CI not inside +-{margin:g}")
    return Decision(REPRODUCED, estimate, lo, hi, kind, f"CI inside +-{margin:g}")


def decide_exact(error: float, tol: float = MIN_EFFECT["exact"]) -> Decision:
    """The exact rule: reproduced iff |error| <= tol (``error`` is a max abs difference, or for an exact
    inequality the largest violation)."""
    error = float(error)
    ok = abs(error) <= tol
    return Decision(REPRODUCED if ok else NOT_REPRODUCED, error, error, error, "exact",
                    f"max |difference| {abs(error):.1e} {'<=' if ok else '>'} {tol:g}")


def _nearest_to_null(d: Decision, sign: int) -> float:
    """How far a cell's CI stays on the claimed side of 0 (``sign`` +1: above, -1: below; its point estimate
    without a CI); for ``sign`` 0 (a closeness claim) minus its CI's largest distance from 0. Smaller is less
    favourable."""
    low, high = (d.estimate, d.estimate) if _nan(d.ci_low) or _nan(d.ci_high) else (d.ci_low, d.ci_high)
    if sign == 0:
        return -max(abs(low), abs(high))
    return low if sign > 0 else -high


def decide_every(decisions: Sequence[Decision], signs: Sequence[int] | None = None) -> Decision:
    """The every rule over cell decisions (module docstring). The claim shows its least favourable cell among
    those with the claim's verdict: the one whose CI comes nearest the null from the claimed side, ``signs``
    giving each cell's claimed side (+1 above 0, -1 below, 0 close to 0; `claimed_sign`). Without ``signs``, the
    first cell with the claim's verdict."""
    if not decisions:
        raise ValueError("no cells")
    if signs is not None and (len(signs) != len(decisions) or any(s not in (-1, 0, 1) for s in signs)):
        raise ValueError(f"signs must hold one of -1, 0, +1 per cell, got {list(signs)!r} for {len(decisions)} cells")
    verdicts = [d.verdict for d in decisions]
    n_ok = sum(v == REPRODUCED for v in verdicts)
    if NOT_REPRODUCED in verdicts:
        verdict = NOT_REPRODUCED
    elif n_ok == len(verdicts):
        verdict = REPRODUCED
    else:
        verdict = PARTLY_V
    cells = [(d, 1 if signs is None else signs[i]) for i, d in enumerate(decisions) if d.verdict == verdict]
    worst = cells[0][0] if signs is None else min(cells, key=lambda c: _nearest_to_null(*c))[0]
    return Decision(verdict, worst.estimate, worst.ci_low, worst.ci_high, "every",
                    f"{n_ok}/{len(decisions)} cells reproduced; least favourable: {worst.detail}")


def decide_trend(contrast: float, contrast_low: float, contrast_high: float, reversed_steps: int,
                 direction: str = "increasing", min_effect: float = MIN_EFFECT["trend"],
                 paper_effect: float | None = None, effect_source: str = "paper") -> Decision:
    """The trend rule (module docstring): the directional rule on the contrast, downgraded to partly
    when ``reversed_steps`` neighbouring steps are significantly reversed. ``paper_effect``: the contrast
    expected (from ``effect_source``), for the power statement."""
    d = decide_directional(contrast, contrast_low, contrast_high, ">" if direction == "increasing" else "<",
                           0.0, min_effect, kind="trend", paper_effect=paper_effect, effect_source=effect_source)
    if d.verdict == REPRODUCED and reversed_steps > 0:
        return Decision(PARTLY_V, d.estimate, d.ci_low, d.ci_high, "trend",
                        f"{reversed_steps} neighbouring step(s) significantly reversed", d.power)
    return d


def power_statement(ci_low: float, ci_high: float, paper_effect: float | None, alpha: float = 0.05,
                    power: float = 0.8, source: str = "paper") -> str:
    """"decided" when the CI is narrow enough to detect the paper's effect (two-sided ``alpha``, power
    ``power``), else "underpowered (needs ~Nx the prompts)". With half-width h of the 95% CI, SE = h/1.96
    and the minimum detectable effect is (z_{1-alpha/2} + z_power) * SE (= 1.43 h at 5% / 80%).
    ``source`` names where the expected effect comes from when it is not the paper (e.g. a theory)."""
    from scipy.stats import norm  # scipy.stats takes ~0.5 s to import; only power statements need it

    if paper_effect is None or _nan(ci_low) or _nan(ci_high):
        return "" if paper_effect is None else "underpowered (no CI)"
    h = (float(ci_high) - float(ci_low)) / 2.0
    se = h / norm.ppf(0.975)
    mde = (norm.ppf(1 - alpha / 2) + norm.ppf(power)) * se
    target = abs(float(paper_effect))
    if target == 0:
        raise ValueError("paper_effect must be non-zero")
    if mde <= target:
        return "decided"
    return f"underpowered (minimum detectable {mde:.3g} > {source} {target:.3g}; needs ~{(mde / target) ** 2:.1f}x the prompts)"


def cells_significantly_above(gaps: Sequence[float], ses: Sequence[float], alpha: float = 0.05,
                              tol: float = MIN_EFFECT["exact"]) -> np.ndarray:
    """Which cells of an "A <= B in every cell" claim show A significantly above B, family-wise.

    ``gaps[i]`` is the mean paired difference A - B of cell i (e.g. two schemes' rejection rates at the
    same contexts) and ``ses[i]`` its standard error. A cell is flagged when its one-sided test of
    "gap <= 0" is rejected by Holm's step-down procedure at family-wise level ``alpha``: with m cells and
    one-sided p-values sorted p_(1) <= ... <= p_(m), cells 1..j are flagged where j is the last index
    with p_(i) <= alpha / (m - i + 1) for every i <= j. A cell with zero SE (an exact tie, e.g. two
    schemes that coincide at k = 1) is flagged only when its gap exceeds ``tol``.

    Why family-wise: with 96 cells where A and B truly tie, a per-cell "more than 2 SE above" test
    flags at least one cell in about 9 runs of 10 (1 - 0.977^96), so the claim's verdict would flip
    between runs of the same code (tests/test_verdicts.py measures it)."""
    from scipy.stats import norm

    gaps, ses = np.asarray(gaps, dtype=float), np.asarray(ses, dtype=float)
    if gaps.ndim != 1 or gaps.shape != ses.shape or len(gaps) == 0:
        raise ValueError(f"gaps and ses must be matched non-empty 1-D arrays, got shapes {gaps.shape} and {ses.shape}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if np.isnan(gaps).any() or np.isnan(ses).any() or (ses < 0).any():
        raise ValueError("gaps and ses must be numbers, ses >= 0")
    exact = ses == 0
    flagged = exact & (gaps > tol)
    idx = np.flatnonzero(~exact)
    if len(idx):
        p = norm.sf(gaps[idx] / ses[idx])
        order = np.argsort(p, kind="stable")
        m = len(idx)
        for rank, i in enumerate(order):
            if p[i] > alpha / (m - rank):
                break
            flagged[idx[i]] = True
    return flagged


def cells_significantly_below(gaps: Sequence[float], ses: Sequence[float], alpha: float = 0.05) -> np.ndarray:
    """Which cells of an "A < B in every cell" claim show A significantly below B, family-wise: Holm's
    step-down on the one-sided tests of "gap >= 0" (`cells_significantly_above` on the negated gaps). A cell
    with zero SE counts as below only when its gap is below ``-MIN_EFFECT['exact']``: an exact tie is not
    "lowest"."""
    return cells_significantly_above(-np.asarray(gaps, dtype=float), ses, alpha)
