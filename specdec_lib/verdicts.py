"""Verdict rules: one written rule per kind of claim, the checks that apply them to stored per-step
data, a power statement, a seed-stability check, and the table of ties (methods equal in expectation).

Every claim a notebook records is one of eight kinds (`RULES`). Each rule states

* the **quantity** (what number the verdict is about),
* the **paired design** (what is held fixed between the two arms: contexts, drafted trees, random
  numbers),
* what is computed **exactly** instead of sampled (Rao-Blackwellisation: given a drafted tree the
  expected tokens per step, P(tau >= 1) and the whole accepted-length law of every verifier are
  exact, `specdec_lib.verifiers.exact_law`; given matched target/draft rows the acceptance vectors
  and rejection rates are exact, `specdec_lib.theory`; traversal's level-l terms can be integrated
  over the levels below l, `specdec_lib.traversal_identity`),
* the **resampling unit** of the confidence interval (prompts: a clustered percentile bootstrap that
  resamples whole prompts, keeping every step, copy and drafting seed of a prompt together, because
  the contexts of one prompt are dependent), and
* the **minimum effect** that counts.

**"partly" has one meaning** (`PARTLY`): the point estimate is on the claimed side (beyond the null in
the claimed direction, or inside the equivalence margin) but the claim is not established: the 95% CI
reaches the null (or leaves the margin), or the estimate is below the minimum effect that counts, or
(trends only) two neighbouring cells are significantly reversed. A point estimate on the wrong side
is "not reproduced" whatever the CI (the `Decision.detail` then says "contradicted" when the CI
excludes the claimed side too, else "inconclusive, wrong side"). `power_statement` says whether the
CI was narrow enough to detect the paper's effect ("decided") or not ("underpowered"), so an
inconclusive verdict can be read correctly.

`seed_stability` re-applies the rules with two bootstrap seeds (and, optionally, per drafting seed)
on stored per-step frames and lists the claims whose verdict changes.

`NOTEBOOK_RULES` maps every verdict expression written by hand in notebooks/00-06 to its rule
(tests/test_verdicts.py checks that every claim in the notebooks is mapped). `TIES` lists the method
pairs that are equal (in law given every tree, or in expectation) with the theorem and the test that
proves it, so a "+0.00% [-0.00, +0.00]" row is read as an identity, not as a measured tie.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .results import VERDICTS, Claim, claim as make_claim

__all__ = ["Rule", "RULES", "PARTLY", "MIN_EFFECT", "Decision", "decide_directional", "decide_equivalence",
           "decide_exact", "decide_every", "decide_trend", "power_statement", "cluster_of", "paired_sums",
           "bootstrap_indices", "paired_difference", "GainCheck", "TrendCheck", "EveryCheck", "IdentityCheck", "first_level_decision",
           "evaluate", "seed_stability", "to_claim", "checked_claim", "SEED_DEPENDENT", "STABLE_MARK", "NOTEBOOK_RULES",
           "rule_entry", "rule_for", "TIES"]

REPRODUCED, PARTLY_V, NOT_REPRODUCED, NA = VERDICTS[0], VERDICTS[1], VERDICTS[2], VERDICTS[3]

PARTLY = ("partly = the point estimate is on the claimed side (beyond the null in the claimed direction, or "
          "inside the equivalence margin), but the claim is not established: the 95% CI reaches the null or "
          "leaves the margin, or the estimate is below the minimum effect that counts (trends: or two "
          "neighbouring cells are significantly reversed)")

MIN_EFFECT = {
    "superiority": 0.005,     # relative gain in tokens per step (or the quantity's own unit, see Rule)
    "noninferiority": 0.005,  # margin below the null that still counts as ">="
    "equivalence": 0.01,      # +- margin (relative) for "equal in expectation"
    "exact": 1e-9,            # absolute tolerance of an exact (float64) identity
    "trend": 0.005,           # contrast last - first of the compared gains (absolute, in gain units)
    "every": 0.005,           # per cell, as superiority / noninferiority
    "threshold": 0.0,         # beyond the paper's bound itself
}
"""Default minimum effects. A claim whose paper effect is smaller than twice the default uses half the
paper's effect (`GainCheck.min_effect_for`): a rule must never demand more than the paper claims."""


@dataclass(frozen=True)
class Rule:
    """One written rule (module docstring)."""

    kind: str
    quantity: str
    design: str
    exact: str
    unit: str
    min_effect: str
    reproduced: str
    partly: str
    not_reproduced: str

    def text(self) -> str:
        return (f"[{self.kind}] quantity: {self.quantity} | design: {self.design} | exact: {self.exact} | "
                f"CI unit: {self.unit} | minimum effect: {self.min_effect} | reproduced: {self.reproduced} | "
                f"partly: {self.partly} | not reproduced: {self.not_reproduced}")


_UNIT = ("prompts: percentile bootstrap (2000 resamples) over whole prompts; a prompt's steps, copies and "
         "drafting seeds stay together (`cluster_of` strips the '/s<seed>' suffix)")
_EXACT_TREE = ("per drafted tree the exact expectation of each verifier (exact_law), the copies drafted at one "
               "context averaged first; traversal's P(tau >= l) terms may be Rao-Blackwellised over the levels "
               "below l (traversal_identity.rao_blackwell_ccdf)")

RULES: dict[str, Rule] = {
    "superiority": Rule(
        "superiority",
        "relative gain mean(A) / mean(B) - 1 of the pooled means over all steps (tokens per target call); "
        "for absolute quantities (rejection rates, r(1)) the difference of the means",
        "same contexts and the same drafted trees for both arms (pair_on='tree'); where the arms need "
        "different trees (two sampling schemes, two tree shapes) the same prompts and drafting seeds, "
        "paired by prompt (pair_on='prompt'); common random numbers in drafting",
        _EXACT_TREE, _UNIT,
        "0.5% relative (half the paper's effect when that is below 1%)",
        "CI entirely beyond the null in the claimed direction and point estimate >= minimum effect",
        PARTLY, "point estimate at or beyond the null on the wrong side"),
    "noninferiority": Rule(
        "noninferiority",
        "as superiority, for a '>=' claim (a theorem that A is never worse than B)",
        "as superiority", _EXACT_TREE, _UNIT,
        "margin 0.5% relative: A counts as '>=' B unless it is more than 0.5% below",
        "CI lower end above -margin", PARTLY, "point estimate below -margin"),
    "equivalence": Rule(
        "equivalence",
        "relative difference mean(A) / mean(B) - 1 (or a difference of exact per-context quantities)",
        "as superiority; for identities in expectation over drafting, Rao-Blackwellise first so the paired "
        "difference is exact per tree (then the 'exact' rule applies)",
        _EXACT_TREE, _UNIT, "margin +-1% relative unless the claim states its own (e.g. 'comparable': 5%)",
        "CI inside (-margin, +margin)", PARTLY, "point estimate outside the margin"),
    "exact": Rule(
        "exact",
        "max absolute difference between ours and the exact value (toy numbers, per-tree identities, "
        "deterministic model outputs such as DP trees, bounds, optimizer choices)",
        "the same tree / rows for both sides: no sampling at all",
        "everything (exact laws, fractions where the test uses them)",
        "none (no sampling noise)", "tolerance 1e-9 (float64 laws); the claim's own rounding for printed numbers",
        "max |difference| <= tolerance (for an exact inequality: every unit satisfies it up to the tolerance)",
        "never (an exact check has no 'partly')", "max |difference| > tolerance"),
    "trend": Rule(
        "trend",
        "contrast = gain at the last value of the parameter minus gain at the first (depth, gamma, n, "
        "temperature, size), with the monotone steps between neighbours",
        "for nested views (depths, chain lengths) the same trees in every cell; for separately drafted "
        "cells (temperatures, sizes) the same prompts and seeds, paired by prompt; the bootstrap resamples "
        "the same prompts for every cell", _EXACT_TREE + "; traversal depth trends use the Rao-Blackwellised "
        "expected tokens (traversal_identity.depth_trend_frame)", _UNIT,
        "contrast >= 0.5 percentage points of gain",
        "contrast CI beyond 0 in the claimed direction, contrast >= minimum effect and no neighbouring step "
        "significantly reversed", PARTLY, "contrast point estimate at or beyond 0 on the wrong side"),
    "every": Rule(
        "every",
        "the cell quantities of a 'holds in every cell' claim (every category, temperature, shape, k)",
        "each cell as its own rule (superiority / noninferiority / equivalence)", _EXACT_TREE, _UNIT,
        "the cell rule's", "every cell reproduced",
        PARTLY + " (here: every cell's point estimate is on the claimed side, some cell is not established)",
        "some cell's point estimate on the wrong side"),
    "threshold": Rule(
        "threshold",
        "an absolute quantity against the paper's bound (acceptance >= 0.6, speedup > 1, error < 10%)",
        "the quantity measured on this project's pair and prompts; wall-clock ratios paired per prompt "
        "(same prompts, same seeds, interleaved runs)",
        "tokens per step from the exact per-tree expectation where the quantity is a ratio to it",
        _UNIT + " (a single measured number without a CI is decided on its point estimate)",
        "0 beyond the bound (the paper's bound is the effect)",
        "CI entirely beyond the bound on the claimed side", PARTLY, "point estimate on the wrong side of the bound"),
    "not_applicable": Rule(
        "not_applicable", "-", "-", "-", "-", "-", "-", "-",
        "never: the claim needs hardware, models or data that are not available offline "
        "(verdict 'not applicable offline')"),
}


# ----------------------------------------------------------------------------------------- decisions

@dataclass(frozen=True)
class Decision:
    """The outcome of a rule: verdict, estimate with its 95% CI, the rule kind, a short reason and the
    power statement ("decided" / "underpowered" / "" when no paper effect was given)."""

    verdict: str
    estimate: float
    ci_low: float
    ci_high: float
    rule: str
    detail: str = ""
    power: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    def text(self, percent: bool = True) -> str:
        """``+3.20% [+1.10, +5.00]`` (or the plain numbers with ``percent=False``)."""
        if self.rule == "exact":
            return f"max |difference| {abs(self.estimate):.1e}"
        f = 100.0 if percent else 1.0
        unit = "%" if percent else ""
        if math.isnan(self.ci_low):
            return f"{f * self.estimate:+.2f}{unit}"
        return f"{f * self.estimate:+.2f}{unit} [{f * self.ci_low:+.2f}, {f * self.ci_high:+.2f}]"


def _nan(x) -> bool:
    return x is None or (isinstance(x, (float, np.floating)) and math.isnan(x))


def decide_directional(estimate: float, ci_low: float, ci_high: float, direction: str = ">", null: float = 0.0,
                       min_effect: float = 0.0, kind: str = "superiority", exact: bool = False,
                       paper_effect: float | None = None) -> Decision:
    """The superiority / noninferiority / threshold rule for "quantity > null" (or "<").

    ``exact=True``: the quantity has no sampling noise (the CI is the point). A missing CI (fewer than
    two prompts) can never establish a sampled claim: the best verdict is then "partly"."""
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
    power = power_statement(lo, hi, paper_effect) if paper_effect is not None and not exact else ""
    if e <= 0.0:
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
    """The equivalence rule: reproduced when the CI lies inside (-margin, +margin)."""
    if not margin > 0:
        raise ValueError("margin must be > 0")
    estimate, lo, hi = float(estimate), float(ci_low), float(ci_high)
    if abs(estimate) >= margin:
        return Decision(NOT_REPRODUCED, estimate, lo, hi, kind, f"point estimate outside +-{margin:g}")
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


def decide_every(decisions: Sequence[Decision]) -> Decision:
    """The every rule over cell decisions (module docstring)."""
    if not decisions:
        raise ValueError("no cells")
    verdicts = [d.verdict for d in decisions]
    n_ok = sum(v == REPRODUCED for v in verdicts)
    if NOT_REPRODUCED in verdicts:
        verdict = NOT_REPRODUCED
    elif n_ok == len(verdicts):
        verdict = REPRODUCED
    else:
        verdict = PARTLY_V
    worst = next(d for d in decisions if d.verdict == verdict)  # the first cell with the claim's verdict
    return Decision(verdict, worst.estimate, worst.ci_low, worst.ci_high, "every",
                    f"{n_ok}/{len(decisions)} cells reproduced; least favourable: {worst.detail}")


def decide_trend(contrast: float, contrast_low: float, contrast_high: float, reversed_steps: int,
                 direction: str = "increasing", min_effect: float = MIN_EFFECT["trend"]) -> Decision:
    """The trend rule (module docstring): the directional rule on the contrast, downgraded to partly
    when ``reversed_steps`` neighbouring steps are significantly reversed."""
    d = decide_directional(contrast, contrast_low, contrast_high, ">" if direction == "increasing" else "<",
                           0.0, min_effect, kind="trend")
    if d.verdict == REPRODUCED and reversed_steps > 0:
        return Decision(PARTLY_V, d.estimate, d.ci_low, d.ci_high, "trend",
                        f"{reversed_steps} neighbouring step(s) significantly reversed")
    return d


def power_statement(ci_low: float, ci_high: float, paper_effect: float | None, alpha: float = 0.05,
                    power: float = 0.8) -> str:
    """"decided" when the CI is narrow enough to detect the paper's effect (two-sided ``alpha``, power
    ``power``), else "underpowered (needs ~Nx the prompts)". With half-width h of the 95% CI, SE = h/1.96
    and the minimum detectable effect is (z_{1-alpha/2} + z_power) * SE (= 1.43 h at 5% / 80%)."""
    from scipy.stats import norm

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
    return f"underpowered (minimum detectable {mde:.3g} > paper {target:.3g}; needs ~{(mde / target) ** 2:.1f}x the prompts)"


# ----------------------------------------------------------------------------------------- bootstrap

_SEED_SUFFIX = re.compile(r"/s\d+$")


def cluster_of(prompt_id: str) -> str:
    """The resampling unit of a row: its prompt, without the notebooks' '/s<seed>' suffix."""
    return _SEED_SUFFIX.sub("", str(prompt_id))


def _filter(frame, where: Mapping[str, Any] | None):
    for key, value in (where or {}).items():
        if isinstance(value, (list, tuple, set)):
            frame = frame[frame[key].isin(list(value))]
        else:
            frame = frame[frame[key] == value]
    return frame


def paired_sums(frame, method: str, baseline: str, by: Sequence[str] = (), column: str = "verifier",
                value: str = "expected_tokens", pair_on: str = "tree"):
    """Per (group, prompt cluster ``_cluster``): the summed ``value`` of ``method`` (``_a``) and ``baseline`` (``_b``) over the
    trees evaluated by both (pair_on='tree': matched on prompt, seed, step and view, copies averaged
    per step) or over each arm's own trees (pair_on='prompt': the baseline's sum rescaled to the
    method's number of steps, so a/b is the ratio of the two means), with the number of steps (``_n``).
    ``frame`` must hold one cell of the claim apart from the ``by`` columns (filter it first)."""
    import pandas as pd

    if pair_on not in ("tree", "prompt"):
        raise ValueError("pair_on must be 'tree' or 'prompt'")
    by = list(by)
    keys = by + ["prompt_id"] + (["step", "view", "shape"] if pair_on == "tree" else [])
    keys = [k for k in dict.fromkeys(keys) if k in frame.columns]
    a = frame[frame[column] == method].groupby(keys, dropna=False)[value].mean()
    b = frame[frame[column] == baseline].groupby(keys, dropna=False)[value].mean()
    if pair_on == "tree":
        both = pd.concat({"_a": a, "_b": b}, axis=1, join="inner").reset_index()
        both["_n"] = 1
    else:
        a = frame[frame[column] == method].groupby(keys, dropna=False)[value].agg(["sum", "count"])
        b = frame[frame[column] == baseline].groupby(keys, dropna=False)[value].agg(["sum", "count"])
        both = pd.concat({"_a": a["sum"], "_b": b["sum"] * a["count"] / b["count"], "_n": a["count"]},
                         axis=1, join="inner").reset_index()
    if both.empty:
        raise ValueError(f"no rows evaluated by both {method!r} and {baseline!r}")
    both["_cluster"] = both["prompt_id"].map(cluster_of)
    return both.groupby(by + ["_cluster"], dropna=False)[["_a", "_b", "_n"]].sum().reset_index()


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the per-unit differences a - b (exact per-context quantities measured at
    the same contexts, e.g. two schemes' rejection rates). SE is nan with fewer than two units."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"a and b must be matched non-empty 1-D arrays, got shapes {a.shape} and {b.shape}")
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")
    return float(d.mean()), se


def bootstrap_indices(n_clusters: int, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """[n_boot, n_clusters] resampled cluster indices (one draw shared by every cell of a claim)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_clusters, size=(n_boot, n_clusters))


def _ci(values: np.ndarray) -> tuple[float, float]:
    return float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975))


def _gain_table(sums, by: Sequence[str], clusters: Sequence[str], relative: bool):
    """Per group: the a/b arrays aligned on ``clusters`` (missing clusters contribute 0)."""
    out = {}
    groups = sums.groupby(list(by), dropna=False, sort=True) if by else [((), sums)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        g = g.set_index("_cluster").reindex(clusters).fillna(0.0)
        out[key] = (g["_a"].to_numpy(), g["_b"].to_numpy(), g["_n"].to_numpy())
    return out


def _stat(a, b, n, idx=None, relative=True):
    if idx is None:
        sa, sb, sn = a.sum(), b.sum(), n.sum()
    else:
        sa, sb, sn = a[idx].sum(axis=-1), b[idx].sum(axis=-1), n[idx].sum(axis=-1)
    return sa / sb - 1.0 if relative else (sa - sb) / sn


# ----------------------------------------------------------------------------------------- checks

@dataclass
class GainCheck:
    """A paired comparison of ``method`` and ``baseline`` in one cell of a stored per-step frame.

    ``kind``: superiority (``direction`` '>' or '<'), noninferiority, equivalence or threshold-like
    use via ``null``. ``relative``: gain mean(a)/mean(b) - 1 (True) or difference of means (False)."""

    claim: str
    method: str
    baseline: str
    where: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "superiority"
    direction: str = ">"
    min_effect: float | None = None
    margin: float | None = None
    value: str = "expected_tokens"
    column: str = "verifier"
    pair_on: str = "tree"
    relative: bool = True
    paper_effect: float | None = None

    def min_effect_for(self) -> float:
        if self.min_effect is not None:
            return float(self.min_effect)
        m = MIN_EFFECT["superiority"]
        if self.paper_effect is not None and abs(self.paper_effect) < 2 * m:
            return abs(float(self.paper_effect)) / 2
        return m

    def sums(self, frame):
        return paired_sums(_filter(frame, self.where), self.method, self.baseline, (), self.column, self.value,
                           self.pair_on)

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        sums = self.sums(frame)
        a, b, n = sums["_a"].to_numpy(), sums["_b"].to_numpy(), sums["_n"].to_numpy()
        est = float(_stat(a, b, n, relative=self.relative))
        if len(a) >= 2:
            lo, hi = _ci(_stat(a, b, n, bootstrap_indices(len(a), n_boot, seed), self.relative))
        else:
            lo = hi = float("nan")
        return self.decide(est, lo, hi)

    def decide(self, est: float, lo: float, hi: float) -> Decision:
        if self.kind == "equivalence":
            return decide_equivalence(est, lo, hi, self.margin or MIN_EFFECT["equivalence"])
        if self.kind == "noninferiority":
            margin = self.margin if self.margin is not None else MIN_EFFECT["noninferiority"]
            sign = 1.0 if self.direction == ">" else -1.0
            return decide_directional(est, lo, hi, self.direction, -sign * margin, 0.0, "noninferiority",
                                      paper_effect=self.paper_effect)
        return decide_directional(est, lo, hi, self.direction, 0.0, self.min_effect_for(), self.kind,
                                  paper_effect=self.paper_effect)


@dataclass
class EveryCheck:
    """``GainCheck`` in every cell of ``by`` (the 'every' rule)."""

    claim: str
    by: Sequence[str]
    cell: GainCheck

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        frame = _filter(frame, self.cell.where)
        decisions = []
        for _, part in frame.groupby(list(self.by), dropna=False, sort=True):
            cell = GainCheck(**{**self.cell.__dict__, "where": {}})
            decisions.append(cell.evaluate(part, seed, n_boot))
        return decide_every(decisions)


@dataclass
class TrendCheck:
    """The gain of ``method`` over ``baseline`` grows (or falls) with the column ``x`` (the trend rule).

    Every cell is bootstrapped with the same resampled prompts. ``gain_of``: 'relative' (mean(a)/mean(b)
    - 1), 'difference' (mean(a) - mean(b)) or 'level' (mean(a) alone: e.g. BE grows with gamma)."""

    claim: str
    x: str
    method: str
    baseline: str
    where: Mapping[str, Any] = field(default_factory=dict)
    direction: str = "increasing"
    min_effect: float = MIN_EFFECT["trend"]
    value: str = "expected_tokens"
    column: str = "verifier"
    pair_on: str = "tree"
    gain_of: str = "relative"

    def cells(self, frame, seed: int = 0, n_boot: int = 2000):
        sums = paired_sums(_filter(frame, self.where), self.method, self.baseline, [self.x], self.column,
                           self.value, self.pair_on)
        clusters = sorted(sums["_cluster"].unique())
        table = _gain_table(sums, [self.x], clusters, True)
        idx = bootstrap_indices(len(clusters), n_boot, seed) if len(clusters) >= 2 else None
        xs, points, boots = [], [], []
        for key, (a, b, n) in table.items():
            xs.append(key[0])
            if self.gain_of == "relative":
                f = lambda ii=None: _stat(a, b, n, ii, True)
            elif self.gain_of == "difference":
                f = lambda ii=None: _stat(a, b, n, ii, False)
            else:
                f = lambda ii=None: (a.sum() / n.sum()) if ii is None else a[ii].sum(-1) / n[ii].sum(-1)
            points.append(float(f()))
            boots.append(f(idx) if idx is not None else None)
        return xs, points, boots

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        xs, points, boots = self.cells(frame, seed, n_boot)
        if len(points) < 2:
            raise ValueError(f"a trend needs at least two values of {self.x!r}")
        contrast = points[-1] - points[0]
        sign = 1.0 if self.direction == "increasing" else -1.0
        if boots[0] is None:
            lo = hi = float("nan")
            reversed_steps = 0
        else:
            lo, hi = _ci(boots[-1] - boots[0])
            reversed_steps = 0
            for left, right in zip(boots, boots[1:]):
                s_lo, s_hi = _ci(sign * (right - left))
                reversed_steps += s_hi < 0
        d = decide_trend(contrast, lo, hi, reversed_steps, self.direction, self.min_effect)
        steps = ", ".join(f"{x}: {100 * p:+.2f}%" for x, p in zip(xs, points)) if self.gain_of != "level" else \
            ", ".join(f"{x}: {p:.3f}" for x, p in zip(xs, points))
        return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, "trend", f"{d.detail}; {steps}", d.power)


@dataclass
class IdentityCheck:
    """An exact identity per tree: max |value(method) - value(baseline)| over matched trees <= tol."""

    claim: str
    method: str
    baseline: str
    where: Mapping[str, Any] = field(default_factory=dict)
    value: str = "expected_tokens"
    column: str = "verifier"
    tol: float = MIN_EFFECT["exact"]

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        frame = _filter(frame, self.where)
        keys = [k for k in ("prompt_id", "step", "draw", "view", "shape", "temperature", "seed") if k in frame.columns]
        piv = frame[frame[self.column].isin([self.method, self.baseline])].pivot_table(
            index=keys, columns=self.column, values=self.value)
        if self.method not in piv or self.baseline not in piv:
            raise ValueError(f"no trees evaluated by both {self.method!r} and {self.baseline!r}")
        return decide_exact(float((piv[self.method] - piv[self.baseline]).abs().max()), self.tol)


def first_level_decision(first_level, margin: float = MIN_EFFECT["equivalence"], tol: float = 1e-9) -> Decision:
    """The P(tau >= 1) identity of Traversal Verification (traversal_identity module docstring).

    ``first_level``: `traversal_identity.first_level_frame` (per tree: token, traversal, traversal_rb).
    The claim is an identity in expectation over drafting, so it is checked EXACTLY on the
    Rao-Blackwellised traversal value (max |traversal_rb - token| over trees <= tol: the 'exact' rule);
    the sampled per-tree difference (mean 0 given each context, skewed) is reported beside it as
    mean +- 1.96 SE over contexts (`traversal_identity.martingale_z`), relative to token's mean."""
    from .traversal_identity import martingale_z

    rb = first_level.dropna(subset=["traversal_rb"])
    if rb.empty:
        raise ValueError("no tree with a Rao-Blackwellised traversal value (depth-2 i.i.d. trees needed)")
    d = decide_exact(float((rb["traversal_rb"] - rb["token"]).abs().max()), tol)
    z = martingale_z(first_level)
    base = float(first_level["token"].mean())
    rel, se = z["mean"] / base, z["se"] / base
    return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, "exact",
                    f"{d.detail} over {len(rb)} trees (Rao-Blackwellised); sampled difference "
                    f"{100 * rel:+.2f}% +- {196 * se:.2f}% ({z['trees']} trees, {z['contexts']} contexts, "
                    f"z = {z['z']:+.2f}; equivalence margin {100 * margin:g}%)")


def evaluate(checks: Iterable[Any], frame, seed: int = 0, n_boot: int = 2000):
    """Apply every check to ``frame``; returns a DataFrame claim, rule, verdict, estimate, CI, detail."""
    import pandas as pd

    rows = []
    for check in checks:
        d = check.evaluate(frame, seed, n_boot)
        rows.append({"claim": check.claim, "rule": d.rule, "verdict": d.verdict, "estimate": d.estimate,
                     "ci_low": d.ci_low, "ci_high": d.ci_high, "detail": d.detail, "power": d.power})
    return pd.DataFrame(rows)


def seed_stability(checks: Sequence[Any], frame, seeds: Sequence[int] = (0, 1), n_boot: int = 2000,
                   split_by: str | None = None):
    """Apply the rules under each bootstrap seed (and, with ``split_by``, e.g. the drafting-seed column,
    on each part of the data separately) and report whether a claim's verdict depends on the seed.

    Returns a DataFrame: claim, rule, one ``verdict@<seed>`` column per bootstrap seed (and one
    ``verdict[<split>=<v>]`` per part), ``stable`` and, for unstable claims, the CI ends per seed (a
    verdict that flips between bootstrap seeds has a CI end within Monte-Carlo error of the null or the
    margin: report it as 'partly' with that reason, or double ``n_boot``)."""
    import pandas as pd

    if len(seeds) < 2:
        raise ValueError("need at least two seeds")
    rows = []
    for check in checks:
        row: dict[str, Any] = {"claim": check.claim}
        verdicts = []
        for s in seeds:
            d = check.evaluate(frame, int(s), n_boot)
            row["rule"] = d.rule
            row[f"verdict@{s}"] = d.verdict
            row[f"ci@{s}"] = (round(d.ci_low, 6), round(d.ci_high, 6))
            verdicts.append(d.verdict)
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


def checked_claim(check: Any, frame, paper: str, paper_value: Any, seeds: Sequence[int] = (0, 1),
                  n_boot: int = 2000, ours: str | None = None, notes: str = "") -> Claim:
    """Apply ``check`` (a GainCheck, TrendCheck, EveryCheck or IdentityCheck) under each bootstrap seed
    and record the first seed's decision as a claim. Its notes name the rule and say whether every seed
    gives the same verdict; a verdict that depends on the seed is marked `SEED_DEPENDENT` (a defect:
    the CI end sits within Monte-Carlo error of the null or the margin)."""
    if len(seeds) < 2:
        raise ValueError("seeds: need at least two bootstrap seeds")
    decisions = [check.evaluate(frame, int(s), n_boot) for s in seeds]
    verdicts = [d.verdict for d in decisions]
    if len(set(verdicts)) == 1:
        stability = f"{STABLE_MARK} {', '.join(map(str, seeds))}"
    else:
        stability = f"{SEED_DEPENDENT}: " + ", ".join(f"{v} (seed {s})" for s, v in zip(seeds, verdicts))
    extra = "; ".join(x for x in (notes, stability) if x)
    return to_claim(decisions[0], paper, check.claim, paper_value, ours, extra)


# ----------------------------------------------------------------------------------------- mapping

NOTEBOOK_RULES: tuple[tuple[str, str, str, str], ...] = (
    # (notebook, claim text prefix, today's hand-written expression, rule)
    ("00_distill_draft", "held-out mean acceptance at T=1 >= 0.6", "mean_acceptance >= 0.6", "threshold"),
    ("00_distill_draft", "draft forward <= 1/4 of the target's", "ratio <= 0.25", "threshold"),
    ("00_distill_draft", "untrained truncations are poor drafts", "untrained_acceptance <= 0.18", "threshold"),
    ("00_distill_draft", "distillation improves on the untrained truncation", "mean > untrained", "superiority"),
    ("00_distill_draft", "feature draft (EAGLE family): held-out acceptance at T=1 >= 0.6", "mean_acceptance >= 0.6",
     "threshold"),
    ("00_distill_draft", "feature draft above the independent draft on the same held-out positions",
     "feature - independent > 0", "superiority"),
    ("07_regime", "[synthetic draft] The interpolated family reaches the goal acceptances", "hit and monotone",
     "threshold"),
    ("07_regime", "[synthetic draft] Gains at the papers' acceptance (0.6–0.8) exceed the real draft's",
     "synthetic gain > real gain", "superiority"),
    ("07_regime", "[synthetic draft, tokens/step] Block verification is optimal among chain verifiers",
     "asps - block <= 0", "noninferiority"),
    ("07_regime", "[synthetic draft, tokens/step] {title} at acceptance 0.6–0.8", "regime.range_verdict",
     "superiority"),
    ("01_asps", "Table 1: maximal coupling", "abs(t1 - 1.8) < 1e-12", "exact"),
    ("01_asps", "Exact fixture B", "err < 1e-9", "exact"),
    ("01_asps", "n = 1: ASpS = SpS", "diff1 < 1e-9 (max per tree)", "exact"),
    ("01_asps", "n = {n}: ASpS > SpS in tokens per step", "E.gain_verdict(g.loc[n])", "superiority"),
    ("01_asps", "n = {nmax}, {cat}: ASpS > SpS", "E.gain_verdict(row)", "superiority"),
    ("01_asps", "The gain generally grows with n", "g[nmax] > g[2] and Spearman > 0.5, partly g[nmax] > g[2]", "trend"),
    ("01_asps", "ATN saturates with n", "sps_atn[nmax] < 0.5 (nmax + 1)", "threshold"),
    ("01_asps", "PTT improves with ASpS, by less than ATN", "0 < ptt_paired_gain < atn_gain, partly > -0.01",
     "threshold"),
    ("02_traversal", "Tra.V > Tok.V in acceptance length", "checked_claim(GainCheck traversal_rb vs token)",
     "superiority"),
    ("02_traversal", "Gain grows with {shape} depth", "checked_claim(TrendCheck over depth, traversal_rb)", "trend"),
    ("02_traversal", "P(τ ≥ 1) is the same for Tra.V and Tok.V",
     "checked_claim(IdentityCheck traversal_rb vs token on p_accept_first)", "exact"),
    ("02_traversal", "On chains Tra.V equals Block Verification", "checked_claim(IdentityCheck)", "exact"),
    ("02_traversal", "Gain grows with temperature", "checked_claim(TrendCheck over temperature)", "trend"),
    ("02_traversal", "Throughput gain < acceptance gain", "overhead > -0.5", "threshold"),
    ("03_erss", "k = 1: GSS accepts the first draft at least as often as ERSS", "r_GSS(1) >= r_ERSS(1) - 1e-9",
     "exact"),
    ("03_erss", "C1 batch, k = 1: GSS > ERSS", "checked_claim(GainCheck, direction '<')", "superiority"),
    ("03_erss", "C1 batch, k ≥ 3: ERSS > GSS", "checked_claim(GainCheck)", "superiority"),
    ("03_erss", "C2 sequence: GSS > ERSS", "checked_claim(GainCheck, direction '<')", "superiority"),
    ("03_erss", "C3 empirical sequence curve plateaus above", "all(v > 0), partly any(v > 0)", "every"),
    ("03_erss", "C4 SpecInfer tree", "all(v > 0), partly any(v > 0)", "every"),
    ("03_erss", "C5 τ* is the best strategy", "all(a >= b)", "every"),
    ("03_erss", "τ* theory ≥ every other theoretical curve", "ts >= max - 1e-9 (deterministic)", "exact"),
    ("03_erss", "Lemma 4.3 bound ≥ τ* theory", "bound >= ts - 1e-9 (deterministic)", "exact"),
    ("03_erss", "C6 under τ*, GSS and ERSS converge", "gap[kt] <= gap[kt_small]", "trend"),
    ("04_block", "Figure 3: exact CCDF", "err < 6e-5 (printed to 4 decimals)", "exact"),
    ("04_block", "Toy γ = 10: E[τ] token vs block", "abs(e - paper) < 1e-5", "exact"),
    ("04_block", "BE(block) > BE(token)", "E.gain_verdict(row)", "superiority"),
    ("04_block", "Gain grows with γ", "all(diff > 0), partly last > first", "trend"),
    ("04_block", "BE grows with γ (token verification)", "all(diff(be_tok) > 0)", "trend"),
    ("04_block", "Gain grows with temperature", "all(diff > 0), partly last > first", "trend"),
    ("04_block", "Gain positive in every prompt category", "all(gain > 0)", "every"),
    ("04_block", "Wall-clock gain of block over token", "0 < ws_paired < be_gain, partly ws_paired > 0", "threshold"),
    ("04_block", "Table 4 ordering on the toy", "token < greedy < block (both inequalities)", "every"),
    ("04_block", "Table 4: greedy block (Alg. 6) beats token", "E.gain_verdict(g_greedy)", "superiority"),
    ("04_block", "Table 4: block beats greedy block", "E.gain_verdict(g_block)", "superiority"),
    ("05_sequoia", "Figure 3: Sequoia's rejection rate ≤ SpecInfer's and top-k's",
     "all(gap <= 2 SE), partly mean > 0.8", "every"),
    ("05_sequoia", "Figure 3: Sequoia's rejection rate ≤ SpecTr's", "all(gap <= 2 SE), partly mean > 0.8", "every"),
    ("05_sequoia", "k = 1: Sequoia = SpecInfer", "d1 < 1e-9 (max per context)", "exact"),
    ("05_sequoia", "SpecInfer degrades at low temperature", "ratio(T_lo) > ratio(T_hi)", "trend"),
    ("05_sequoia", "Top-k degrades at high temperature", "ratio(T_hi) > ratio(T_lo)", "trend"),
    ("05_sequoia", "Sequoia trees give more tokens per step than SpecInfer", "E.gain_verdict(row)", "superiority"),
    ("05_sequoia", "Sequoia trees beat full k-ary trees", "E.gain_verdict(rowk)", "superiority"),
    ("05_sequoia", "Scalability: Sequoia keeps growing", "growth(sq) > growth(kl), partly sq grows", "trend"),
    ("05_sequoia", "Measured tokens per step close to F(T)", "err < 10%, partly < 25%", "equivalence"),
    ("05_sequoia", "Optimal trees are deeper at low temperature", "depth[Tlo] > depth[Thi], partly ==", "trend"),
    ("05_sequoia", "Top-p = {tp}: Sequoia sampling beats SpecInfer", "ci_low >= 0 ... / gain >= 0", "superiority"),
    ("05_sequoia", "Hardware-aware optimizer: flatter t(n)", "plan_flat.size > plan.size (deterministic)", "exact"),
    ("05_sequoia", "The optimizer's predicted speedups match", "best_measured and worst < 20%, partly either",
     "equivalence"),
    ("05_sequoia", "End-to-end speedup of the optimizer's tree", "measured > 1, partly > 0.8", "threshold"),
    ("05_sequoia", "The optimal acceptance is at least as high without replacement", "decide_exact(min difference)",
     "exact"),
    ("05_sequoia", "Existing verifiers (RRS) fall short of the optimal acceptance",
     "decide_directional(least paired gap, +-1.96 SE over contexts)", "superiority"),
    ("06_leaderboard", "{m} ≥ {b} in tokens per step on every shape",
     "checked_claim(EveryCheck of noninferiority GainChecks)", "every"),
    ("06_leaderboard", "Traversal = block on chains", "checked_claim(IdentityCheck)", "exact"),
    ("06_leaderboard", "ERSS vs GSS on the same Sequoia tree shape",
     "checked_claim(EveryCheck of equivalence GainChecks, margin 5%)", "every"),
    ("06_leaderboard", "Among the shapes tested, a Sequoia DP tree", "best shape starts with 'sequoia'", "every"),
    ("06_leaderboard", "Tokens per second of speculative decoding", "any speedup > 1", "threshold"),
)
"""Every claim written in notebooks/00-06 (text prefix as in the notebook, f-string fields kept) ->
the hand-written verdict expression today -> the rule that replaces it. Claims recorded with
`results.not_applicable` map to the rule ``not_applicable``."""


def rule_entry(claim_text: str, notebook: str | None = None) -> tuple[str, str, str, str]:
    """The `NOTEBOOK_RULES` entry of a notebook claim, by its text (f-string fields match anything) and,
    when given, its notebook (some claim texts repeat across notebooks)."""
    for entry in NOTEBOOK_RULES:
        if notebook is not None and entry[0] != notebook:
            continue
        pattern = "".join("(?:.*?)" if part.startswith("{") else re.escape(part)
                          for part in re.split(r"(\{[^}]*\})", entry[1]))
        if re.match(pattern, claim_text):
            return entry
    raise KeyError(f"no rule for claim {claim_text!r}")


def rule_for(claim_text: str, notebook: str | None = None) -> str:
    """The rule kind of a notebook claim, by its text (and notebook)."""
    return rule_entry(claim_text, notebook)[3]


# ----------------------------------------------------------------------------------------- ties

TIES: dict[tuple[str, str, str], tuple[str, str]] = {
    ("traversal", "block", "chains"): (
        "Traversal Verification Thm 3.4 (and docs/methods/traversal.md §2.6): on a chain, traversal's rates rho_i and "
        "h_i = S_i / (S_i + 1 - rho_i) are Block Verification's, and its backward scan stops at the last "
        "success of the same coins, so the output law given EVERY chain is identical (stronger than the "
        "paper's equal E[N])",
        "tests/test_tree_verifiers_exact.py::test_traversal_equals_block_on_chains"),
    ("block", "asps", "chains"): (
        "Observed identity, not claimed by either paper: ASpS's per-prefix acceptance D_i equals Block's "
        "rho_i = min(1, rho_{i-1} p/q) (Block Lemma 3's upper bound P(tau >= i | x^i) = rho_i, attained by "
        "both), and their residual emissions agree, so the law given every chain is the same; exact in "
        "rationals on random toy chains",
        "tests/test_verdicts.py::test_tie_asps_equals_block_in_exact_rationals "
        "(float64: tests/test_chain_verifiers_exact.py::test_asps_and_block_have_the_same_law_on_every_chain)"),
    ("asps", "token", "one drafted token"): (
        "With gamma = 1 ASpS, block and traversal all reduce to the maximal coupling (accept min(1, p/q), "
        "residual norm([p - q]_+)): SpS; so n = 1 is equal per draft",
        "tests/test_chain_verifiers_exact.py::test_gamma_one_asps_and_block_equal_token"),
    ("traversal", "token", "stars (depth 1)"): (
        "On a star every child is a leaf: traversal's rho(child) = min(1, r(x)/D(x)) and root updates (rho(root) = 1) "
        "are token-level RRS's, so the law given every star is identical",
        "tests/test_traversal_identity.py::test_traversal_equals_token_on_stars"),
    ("traversal", "token", "P(tau >= 1), any tree"): (
        "Lemma A.2 + identical root updates: E[P_traversal(tau >= 1) | root children] = P_token(tau >= 1 | root "
        "children), averaged over the drafting below level 1 (not per tree); with i.i.d. root children both "
        "equal 1 - prod_j (1 - beta_j) given the root rows",
        "tests/test_traversal_identity.py::test_first_level_identity_given_root_children"),
    ("token (without replacement)", "token (iid)", "k = 1"): (
        "One child: both draw it from q and accept with min(1, p/q): P(accept) = 1 - TV (Sequoia = SpecInfer, "
        "optimal transport)",
        "tests/test_tree_fixtures.py::test_optimal_transport_at_k1"),
    ("token", "match", "top-k trees"): (
        "RRS against point masses accepts child j with probability R[x_j] and removes x_j: the law of drawing "
        "y ~ p once and following the child with token y (Sequoia's top-k baseline)",
        "tests/test_tree_verifiers_exact.py::test_token_on_topk_trees_is_match"),
    ("block", "token", "temperature 0"): (
        "One-hot rows: one possible draft, every verifier accepts the same prefix",
        "tests/test_chain_verifiers_exact.py::test_temperature_zero_block_equals_token"),
}
"""(method A, method B, where) -> (theorem / identity, the test that proves it exactly on toys)."""
