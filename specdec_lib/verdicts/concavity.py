"""Saturation of a curve: its slope over the last stretch of x below its slope over the first stretch.

A curve y(x) measured at three points x0 < x1 < x2 saturates when the slope drop
``(y1 - y0) / (x1 - x0) - (y2 - y1) / (x2 - x1)`` is above a minimum effect: a straight line (no
saturation, however low it lies) gives 0 and fails the rule. y at each x is the mean of ``value`` over
one arm's rows at that x; the CI resamples whole prompts (`checks.bootstrap_indices`, `intervals`), and
the verdict is the directional rule ('>' 0 with ``min_effect``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .checks import _ci, _cluster_sums, _filter, bootstrap_indices, cluster_of
from .decisions import Decision, decide_directional


def slope_drop(means: Sequence[float], xs: Sequence[float]) -> float:
    """The first stretch's slope minus the last stretch's, of three points (> 0: the curve bends down)."""
    (y0, y1, y2), (x0, x1, x2) = means, xs
    return (y1 - y0) / (x1 - x0) - (y2 - y1) / (x2 - x1)


@dataclass
class ConcavityCheck:
    """``arm``'s mean ``value`` at the three ``points`` of column ``x`` saturates (module docstring)."""

    claim: str
    x: str
    arm: str
    points: Sequence[float]
    min_effect: float
    where: Mapping[str, Any] = field(default_factory=dict)
    column: str = "verifier"
    value: str = "expected_tokens"

    def __post_init__(self):
        if len(self.points) != 3 or not all(a < b for a, b in zip(self.points, self.points[1:])):
            raise ValueError(f"points must be three increasing x values, got {list(self.points)!r}")
        if not self.min_effect >= 0:
            raise ValueError(f"min_effect must be >= 0, got {self.min_effect!r}")

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        rows = _filter(frame, self.where)
        rows = rows[rows[self.column] == self.arm]
        clusters = sorted(set(rows["prompt_id"].map(cluster_of)))
        if len(clusters) == 0:
            raise ValueError(f"no rows of {self.arm!r} in the frame")
        per_point = []
        for x in self.points:
            at = rows[rows[self.x] == x]
            if at.empty:
                raise ValueError(f"no rows of {self.arm!r} at {self.x} = {x}")
            sums, counts = _cluster_sums(at, [self.value], clusters)
            per_point.append((sums[:, 0], counts))

        def statistic(idx):
            means = [s[idx].sum(-1) / c[idx].sum(-1) for s, c in per_point]
            return slope_drop(means, self.points)

        est = float(statistic(np.arange(len(clusters))))
        if len(clusters) >= 2:
            boot = statistic(bootstrap_indices(len(clusters), n_boot, seed))
            lo, hi = _ci(boot[~np.isnan(boot)], len(clusters))
        else:
            lo = hi = float("nan")
        d = decide_directional(est, lo, hi, ">", 0.0, self.min_effect, "trend")
        return Decision(d.verdict, d.estimate, d.ci_low, d.ci_high, d.rule,
                        f"{d.detail}; slope drop {est:.3f} per unit {self.x}, {len(clusters)} prompts", d.power)


__all__ = ["ConcavityCheck", "slope_drop"]
