"""Checks that apply a rule to a stored per-step frame: paired sums per prompt, the clustered bootstrap
over prompts, `GainCheck` / `EveryCheck` / `TrendCheck` / `IdentityCheck` / `ModelGapCheck` / `SpeedupCheck` /
`VectorStatisticCheck` / `VectorLevelCheck`, the decisions they give (claims are recorded by `recording`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .intervals import percentile_interval
from ..theory.traversal_identity import martingale_z
from .decisions import Decision, decide_directional, decide_equivalence, decide_every, decide_exact, decide_trend
from .rules import MIN_EFFECT

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


def _ci(values: np.ndarray, n_clusters: int) -> tuple[float, float]:
    """95% CI of a bootstrap over ``n_clusters`` prompts: the expanded percentile interval (`intervals`)."""
    return percentile_interval(values, n_clusters)


def _cluster_sums(frame, columns: Sequence[str], clusters: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt cluster of ``clusters`` (in that order): the sums of ``columns`` [C, len(columns)] and the row
    counts [C] of ``frame`` (0 for a cluster without rows)."""
    grouped = frame[list(columns)].groupby(frame["prompt_id"].map(cluster_of))
    return (grouped.sum().reindex(clusters, fill_value=0.0).to_numpy(),
            grouped.size().reindex(clusters, fill_value=0).to_numpy())


def _resampled(statistic: Callable[[np.ndarray], float], n_clusters: int, n_boot: int, seed: int
               ) -> tuple[float, float, float, int]:
    """``statistic`` of every cluster and its 95% CI over resampled clusters (`bootstrap_indices`, `_ci`);
    resamples where it is NaN are left out. Returns (estimate, low, high, resamples used)."""
    estimate = statistic(np.arange(n_clusters))
    boot = np.array([statistic(rows) for rows in bootstrap_indices(n_clusters, n_boot, seed)])
    boot = boot[~np.isnan(boot)]
    if n_clusters < 2 or not len(boot):
        return estimate, float("nan"), float("nan"), len(boot)
    return estimate, *_ci(boot, n_clusters), len(boot)


def _decide_statistic(est: float, lo: float, hi: float, direction: str, margin: float | None,
                      min_effect: float, paper_effect: float | None = None, kind: str = "superiority") -> Decision:
    """The rule for a statistic that is 0 under the null (a relative gap or gain): '=' the equivalence rule with
    ``margin``; '>' / '<' the noninferiority rule when a ``margin`` is given, else the directional rule ``kind``
    (superiority or threshold) with ``min_effect``."""
    if direction == "=":
        return decide_equivalence(est, lo, hi, margin)
    if margin is not None:
        sign = 1.0 if direction == ">" else -1.0
        return decide_directional(est, lo, hi, direction, -sign * margin, 0.0, "noninferiority",
                                  paper_effect=paper_effect)
    return decide_directional(est, lo, hi, direction, 0.0, min_effect, kind, paper_effect=paper_effect)


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
            lo, hi = _ci(_stat(a, b, n, bootstrap_indices(len(a), n_boot, seed), self.relative), len(a))
        else:
            lo = hi = float("nan")
        return self.decide(est, lo, hi)

    def decide(self, est: float, lo: float, hi: float) -> Decision:
        if self.kind == "equivalence":
            return _decide_statistic(est, lo, hi, "=", self.margin or MIN_EFFECT["equivalence"], 0.0)
        margin = None
        if self.kind == "noninferiority":
            margin = self.margin if self.margin is not None else MIN_EFFECT["noninferiority"]
        return _decide_statistic(est, lo, hi, self.direction, margin, self.min_effect_for(), self.paper_effect,
                                 self.kind)


def claimed_sign(check) -> int:
    """The side of 0 a cell check claims its statistic is on: +1 (direction '>' or 'increasing'), -1 ('<',
    'decreasing'), 0 ('=' or the equivalence kind: close to 0). Checks without a ``direction`` claim '>'."""
    if getattr(check, "kind", None) == "equivalence":
        return 0
    return {">": 1, "increasing": 1, "<": -1, "decreasing": -1, "=": 0}[getattr(check, "direction", ">")]


@dataclass
class EveryCheck:
    """A cell check (`GainCheck` or `ModelGapCheck`) in every cell of ``by`` (the 'every' rule)."""

    claim: str
    by: Sequence[str]
    cell: Any

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        frame = _filter(frame, self.cell.where)
        decisions = []
        for _, part in frame.groupby(list(self.by), dropna=False, sort=True):
            decisions.append(replace(self.cell, where={}).evaluate(part, seed, n_boot))
        return decide_every(decisions, [claimed_sign(self.cell)] * len(decisions))


@dataclass
class ModelGapCheck:
    """A measured mean against a model's prediction computed from measured vectors, both from the same
    contexts and the same resampled prompts (the superiority rule on the relative gap measured / predicted - 1).

    ``frame`` holds one row per context with the measured ``value`` (e.g. the exact expected tokens of the
    sequence drafted there) and the per-context vectors in ``vector_columns`` (e.g. p1..pK of
    `experiments.index_law_at_rows` at the same context). ``predict`` maps the mean vector to the model's
    value (e.g. the 0th-order G of the sequence). The bootstrap resamples prompts and recomputes both the
    mean and the prediction, so the model's own estimation error is inside the CI. ``direction`` ">" / "<"
    applies the superiority rule to the gap; "=" the equivalence rule with ``margin`` (a claim that the
    model is close to the measurement: reproduced when the gap's CI lies inside +-margin)."""

    claim: str
    predict: Callable[[np.ndarray], float]
    vector_columns: Sequence[str]
    where: Mapping[str, Any] = field(default_factory=dict)
    value: str = "expected_tokens"
    direction: str = ">"
    min_effect: float = MIN_EFFECT["superiority"]
    margin: float | None = None

    def __post_init__(self):
        if self.direction not in (">", "<", "="):
            raise ValueError(f"direction must be '>', '<' or '=', got {self.direction!r}")
        if (self.direction == "=") != (self.margin is not None) or (self.margin is not None and not self.margin > 0):
            raise ValueError(f"margin must be a number > 0 exactly when direction is '=', got {self.margin!r}")

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        frame = _filter(frame, self.where)
        cols = [self.value, *self.vector_columns]
        missing = [c for c in cols + ["prompt_id"] if c not in frame.columns]
        if missing:
            raise ValueError(f"frame lacks the columns {missing}")
        if frame.empty or frame[cols].isna().any().any():
            raise ValueError("frame must hold complete rows (a value and every vector column) for at least one context")
        sums, n = _cluster_sums(frame, cols, sorted(frame["prompt_id"].map(cluster_of).unique()))

        def gap(rows):
            total, count = sums[rows].sum(0), n[rows].sum()
            return (total[0] / count) / float(self.predict(total[1:] / count)) - 1.0

        est, lo, hi, _ = _resampled(gap, len(n), n_boot, seed)
        d = _decide_statistic(est, lo, hi, self.direction, self.margin, self.min_effect)
        measured = sums[:, 0].sum() / n.sum()
        return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, d.rule,
                        f"{d.detail}; measured {measured:.4f} vs model {measured / (1 + est):.4f}", d.power)


@dataclass
class SpeedupCheck:
    """A wall-clock speedup from runs paired by prompt and interleaved in time (`experiments.interleaved_timing`):
    the pooled rate sum(tokens) / sum(seconds) of ``method`` over the pooled rate of ``baseline`` on the same
    resampled prompts, relative to ``predicted``: the statistic is speedup / predicted - 1.

    With ``predicted`` 1 it is the speedup itself: direction '>' is the superiority rule ("method is faster");
    with a ``margin`` the noninferiority rule ("method is not slower than baseline by more than margin").
    Direction '=' with a ``margin`` sets the speedup against a model's prediction by the equivalence rule
    (reproduced when the CI of measured / predicted - 1 lies inside +-margin).

    ``predicted`` a number is held fixed, so the noise of what it was computed from is not inside the CI.
    ``predicted`` a function is recomputed on every resample from the model's inputs measured per prompt:
    ``inputs`` names the frame's columns it reads (measured once per prompt's round, e.g.
    `hardware.round_profile` through `interleaved_timing`'s ``round_inputs``); it is called with a DataFrame of
    one row per resampled prompt (the ``baseline`` arm's values, repeated as the prompt is drawn) and returns
    the predicted speedup. The model's inputs then vary with the prompts as the timings do, and their noise is
    inside the CI.

    ``rate``: the (numerator, denominator) columns of the pooled rate, tokens per second by default;
    ``("seconds", "steps")`` compares the arms' seconds per step (a step's overhead) on the same runs."""

    claim: str
    method: str
    baseline: str
    predicted: float | Callable[[pd.DataFrame], float] = 1.0
    column: str = "arm"
    direction: str = ">"
    margin: float | None = None
    min_effect: float = MIN_EFFECT["superiority"]
    inputs: Sequence[str] = ()
    rate: tuple[str, str] = ("tokens", "seconds")

    def __post_init__(self):
        if (not isinstance(self.rate, (tuple, list)) or len(self.rate) != 2
                or not all(isinstance(c, str) and c for c in self.rate) or self.rate[0] == self.rate[1]):
            raise ValueError(f"rate must name two different columns (numerator, denominator), got {self.rate!r}")
        if self.direction not in (">", "<", "="):
            raise ValueError(f"direction must be '>', '<' or '=', got {self.direction!r}")
        if self.direction == "=" and self.margin is None:
            raise ValueError("margin: an equivalence ('=') needs a margin > 0")
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"margin must be > 0, got {self.margin!r}")
        if callable(self.predicted):
            if isinstance(self.inputs, str) or not self.inputs:
                raise ValueError("inputs: a predicted function needs the names of the columns it reads")
        else:
            if self.inputs:
                raise ValueError("inputs: only a predicted function reads inputs; a number is held fixed")
            _check_prediction(self.predicted)

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        missing = [c for c in (self.column, "prompt_id", *self.rate, *self.inputs) if c not in frame.columns]
        if missing:
            raise ValueError(f"frame lacks the columns {missing}")
        parts = {arm: frame[frame[self.column] == arm] for arm in (self.method, self.baseline)}
        clusters = sorted(set.intersection(*(set(p["prompt_id"].map(cluster_of)) for p in parts.values())))
        if not clusters:
            raise ValueError(f"no prompt was timed with both {self.method!r} and {self.baseline!r}")
        # prompts timed by one arm only fall outside ``clusters`` and so out of the sums
        sums = {arm: _cluster_sums(p, list(self.rate), clusters)[0] for arm, p in parts.items()}
        predict = self._prediction(parts[self.baseline], clusters)

        def speedup(rows):
            (tm, sm), (tb, sb) = sums[self.method][rows].sum(0), sums[self.baseline][rows].sum(0)
            return (tm / sm) / (tb / sb)

        est, lo, hi, _ = _resampled(lambda rows: speedup(rows) / predict(rows) - 1.0, len(clusters), n_boot, seed)
        d = _decide_statistic(est, lo, hi, self.direction, self.margin, self.min_effect)
        everything = np.arange(len(clusters))
        measured = f"{self.method}: {speedup(everything):.3f}x the rate of {self.baseline}"
        if callable(self.predicted) or self.predicted != 1.0:
            measured += f" (predicted {predict(everything):.3f}x" + (", recomputed per resample)"
                                                                   if callable(self.predicted) else ")")
        return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, d.rule,
                        f"{d.detail}; {measured}, {len(clusters)} prompts", d.power)

    def _prediction(self, baseline_rows, clusters) -> Callable[[np.ndarray], float]:
        """rows -> the prediction for those resampled clusters: the fixed number, or the function on the
        clusters' inputs (the baseline arm's mean per cluster)."""
        if not callable(self.predicted):
            return lambda rows: float(self.predicted)
        per_cluster = (baseline_rows[list(self.inputs)].groupby(baseline_rows["prompt_id"].map(cluster_of)).mean()
                       .reindex(clusters))
        if per_cluster.isna().any().any():
            raise ValueError(f"inputs {list(self.inputs)} are missing for some prompts of {self.baseline!r}")
        return lambda rows: _check_prediction(self.predicted(per_cluster.iloc[rows]))


def _check_prediction(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not (math.isfinite(float(value)) and value > 0):
        raise ValueError(f"predicted must be a finite speedup > 0, got {value!r}")
    return float(value)


@dataclass
class AllOfCheck:
    """Several cell checks, each with its own ``where`` (and e.g. its own prediction), decided together by
    the 'every' rule: `EveryCheck` for cells that differ in more than the rows they select."""

    claim: str
    cells: Sequence[Any]

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        if not self.cells:
            raise ValueError("cells must hold at least one check")
        return decide_every([cell.evaluate(frame, seed, n_boot) for cell in self.cells],
                            [claimed_sign(cell) for cell in self.cells])


@dataclass
class VectorStatisticCheck:
    """A contrast of a deterministic function of measured vectors between two cells (e.g. the depth of
    Sequoia's DP tree built from the positional vector at a low and at a high temperature): the trend rule
    on ``statistic(mean vector of cell first) - statistic(mean vector of cell last)``.

    ``frame`` holds one row per context: ``prompt_id``, the ``cell`` column and the ``vector_columns``. The
    bootstrap resamples prompts (the same prompts in both cells) and recomputes both mean vectors and the
    statistic, so the vectors' sampling error is inside the CI; a resample in which a cell has no row is
    left out."""

    claim: str
    statistic: Callable[[np.ndarray], float]
    vector_columns: Sequence[str]
    cell: str
    first: Any
    last: Any
    min_effect: float = MIN_EFFECT["trend"]

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        missing = [c for c in [*self.vector_columns, self.cell, "prompt_id"] if c not in frame.columns]
        if missing:
            raise ValueError(f"frame lacks the columns {missing}")
        names = sorted(frame["prompt_id"].map(cluster_of).unique())
        sums, counts = {}, {}
        for value in (self.first, self.last):
            part = frame[frame[self.cell] == value]
            if part.empty:
                raise ValueError(f"no rows with {self.cell} == {value!r}")
            sums[value], counts[value] = _cluster_sums(part, self.vector_columns, names)

        def contrast(rows):
            if any(counts[v][rows].sum() == 0 for v in (self.first, self.last)):
                return float("nan")
            mean = {v: sums[v][rows].sum(0) / counts[v][rows].sum() for v in (self.first, self.last)}
            return float(self.statistic(mean[self.first])) - float(self.statistic(mean[self.last]))

        est, lo, hi, used = _resampled(contrast, len(names), n_boot, seed)
        d = decide_trend(est, lo, hi, 0, "increasing", self.min_effect)
        return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, d.rule,
                        f"{d.detail}; {self.cell} {self.first!r} minus {self.last!r}, {used} resamples", d.power)


@dataclass
class VectorLevelCheck:
    """A deterministic function of the mean measured vector of one cell against a null (e.g. the power-law
    slope of Sequoia's rejection curve at one temperature): the superiority rule on ``statistic(mean vector
    of the rows in where)`` > ``null`` (or "<") by at least ``min_effect``. The bootstrap resamples prompts
    and recomputes the mean vector and the statistic; a resample whose statistic is NaN is left out."""

    claim: str
    statistic: Callable[[np.ndarray], float]
    vector_columns: Sequence[str]
    where: Mapping[str, Any] = field(default_factory=dict)
    direction: str = ">"
    null: float = 0.0
    min_effect: float = MIN_EFFECT["superiority"]

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        frame = _filter(frame, self.where)
        missing = [c for c in [*self.vector_columns, "prompt_id"] if c not in frame.columns]
        if missing:
            raise ValueError(f"frame lacks the columns {missing}")
        if frame.empty:
            raise ValueError(f"no rows with {dict(self.where)!r}")
        sums, counts = _cluster_sums(frame, self.vector_columns, sorted(frame["prompt_id"].map(cluster_of).unique()))

        def level(rows):
            count = counts[rows].sum()
            return float(self.statistic(sums[rows].sum(0) / count)) if count else float("nan")

        est, lo, hi, used = _resampled(level, len(counts), n_boot, seed)
        d = decide_directional(est, lo, hi, self.direction, self.null, self.min_effect)
        return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, d.rule, f"{d.detail}; {used} resamples", d.power)


@dataclass
class TrendCheck:
    """The gain of ``method`` over ``baseline`` grows (or falls) with the column ``x`` (the trend rule).

    Every cell is bootstrapped with the same resampled prompts. ``gain_of``: 'relative' (mean(a)/mean(b)
    - 1), 'difference' (mean(a) - mean(b)) or 'level' (mean(a) alone: e.g. BE grows with gamma).
    ``paper_effect``: the contrast expected (the paper's, or ``effect_source``'s, e.g. a theory), for the
    power statement."""

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
    paper_effect: float | None = None
    effect_source: str = "paper"

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
        return xs, points, boots, len(clusters)

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        xs, points, boots, n_clusters = self.cells(frame, seed, n_boot)
        if len(points) < 2:
            raise ValueError(f"a trend needs at least two values of {self.x!r}")
        contrast = points[-1] - points[0]
        sign = 1.0 if self.direction == "increasing" else -1.0
        if boots[0] is None:
            lo = hi = float("nan")
            reversed_steps = 0
        else:
            lo, hi = _ci(boots[-1] - boots[0], n_clusters)
            reversed_steps = 0
            for left, right in zip(boots, boots[1:]):
                s_lo, s_hi = _ci(sign * (right - left), n_clusters)
                reversed_steps += s_hi < 0
        d = decide_trend(contrast, lo, hi, reversed_steps, self.direction, self.min_effect, self.paper_effect,
                         self.effect_source)
        steps = ", ".join(f"{x}: {100 * p:+.2f}%" for x, p in zip(xs, points)) if self.gain_of != "level" else \
            ", ".join(f"{x}: {p:.3f}" for x, p in zip(xs, points))
        unit = "%" if self.gain_of != "level" else f"({self.value}, {self.x} last minus first)"
        return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, "trend", f"{d.detail}; {steps}", d.power, unit)


def convergence_start(expected_gain: Mapping[Any, float], xs, smallest) -> Any:
    """Where a convergence trend's contrast starts: among ``xs`` at or above ``smallest`` (the largest x
    excluded: it ends the contrast), the x whose ``expected_gain`` (a theory's) is furthest from 0.

    Before that x the expected gap still opens, so a contrast that starts earlier mixes the opening with
    the closing and predicts a smaller effect than the claim is about (03's C6: the 0th-order theory of
    ERSS over GSS under tau* widens from k = 2 to k = 4, then closes)."""
    xs = sorted(xs)
    candidates = [x for x in xs[:-1] if x >= smallest]
    if not candidates:
        raise ValueError(f"xs {xs} needs two values at or above {smallest!r} for a convergence trend")
    missing = [x for x in candidates if x not in expected_gain]
    if missing:
        raise ValueError(f"expected_gain has no value at {missing}")
    return max(candidates, key=lambda x: abs(expected_gain[x]))


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
