"""Do the verifiers' gains grow from the real draft's acceptance to the papers' (0.6-0.8)? Notebook 07's
cross claim as a written rule (`GrowthCheck`).

Per comparison of `regime.comparisons` (block vs token, traversal vs token, ...), the **growth** is the
mean of the synthetic regimes' paired gains minus the real draft's gain, in the claimed direction:

    growth = sign * (mean over synthetic regimes r of gain_r  -  gain_real),
    gain_r = sum over prompts of method / sum over prompts of baseline - 1   (`experiments.paired_gain`)

All regimes are drafted at the same target-sampled contexts of the same prompts, so one bootstrap over
prompts resamples every regime together (`verdicts.bootstrap_indices`): the CI holds the noise of both
sides of the difference and their correlation. Each comparison is decided by the trend rule (the contrast
"real draft -> papers' acceptance" beyond 0 and at least 0.5 points of gain, `verdicts.decide_trend`); the
claim "gains exceed the real draft's" by the every rule over the comparisons (`verdicts.decide_every`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .intervals import percentile_interval
from ..experiments.regime import Comparison
from . import MIN_EFFECT, Decision, bootstrap_indices, decide_every, decide_trend, paired_sums

__all__ = ["REAL_REGIME", "GrowthCheck"]

REAL_REGIME = "real draft"
"""The regime label of the pair's own draft in `regime.run_sweep`'s frames."""


@dataclass
class GrowthCheck:
    """The every rule over ``comparisons``: each one's growth (module docstring) beyond 0 by at least
    ``min_effect`` (absolute, in gain units: 0.005 = half a percentage point). ``frame``: `regime.run_sweep`'s
    ``frames`` (columns experiment, view, verifier, regime, synthetic, prompt_id, step, expected_tokens)."""

    claim: str
    comparisons: Sequence[Comparison]
    real: str = REAL_REGIME
    min_effect: float = MIN_EFFECT["trend"]

    def __post_init__(self):
        if not self.comparisons:
            raise ValueError("comparisons must not be empty")

    def cells(self, frame, seed: int = 0, n_boot: int = 2000) -> list[tuple[Comparison, Decision]]:
        """Each comparison with its trend decision on the growth (the same resampled prompts for every
        regime of a comparison)."""
        needed = ["experiment", "view", "regime", "synthetic", "prompt_id", "expected_tokens",
                  *{c.column for c in self.comparisons}, *(["verifier"] if any(c.verifier for c in self.comparisons) else [])]
        missing = [c for c in dict.fromkeys(needed) if c not in frame.columns]
        if missing:
            raise ValueError(f"frame lacks the columns {missing}")
        return [(c, self._decide(c, frame, seed, n_boot)) for c in self.comparisons]

    def evaluate(self, frame, seed: int = 0, n_boot: int = 2000) -> Decision:
        decisions = [d for _, d in self.cells(frame, seed, n_boot)]
        return decide_every(decisions, [1] * len(decisions))  # every growth is claimed above 0

    def _decide(self, c: Comparison, frame, seed: int, n_boot: int) -> Decision:
        sub = frame[(frame["experiment"] == c.experiment) & (frame["view"] == c.view)]
        if c.verifier is not None:
            sub = sub[sub["verifier"] == c.verifier]
        synthetic = sorted(sub.loc[sub["synthetic"].astype(bool), "regime"].unique())
        if not synthetic or not (sub["regime"] == self.real).any():
            raise ValueError(f"{c.key}: needs rows of the regime {self.real!r} and of at least one synthetic regime")
        sums = {r: paired_sums(sub[sub["regime"] == r], c.method, c.baseline, (), c.column, "expected_tokens",
                               c.pair_on).set_index("_cluster") for r in [self.real, *synthetic]}
        clusters = sorted(set().union(*(s.index for s in sums.values())))
        arrays = {r: s.reindex(clusters, fill_value=0.0)[["_a", "_b"]].to_numpy().T for r, s in sums.items()}

        def growth(rows: np.ndarray) -> np.ndarray:
            gains = {r: a[rows].sum(-1) / b[rows].sum(-1) - 1.0 for r, (a, b) in arrays.items()}
            return c.sign * (np.mean([gains[r] for r in synthetic], axis=0) - gains[self.real])

        n = len(clusters)
        estimate = float(growth(np.arange(n)))
        with np.errstate(divide="ignore", invalid="ignore"):  # a resample without a regime's rows: left out
            boots = growth(bootstrap_indices(n, n_boot, seed))
        boots = boots[np.isfinite(boots)]
        lo, hi = percentile_interval(boots, n) if n >= 2 and len(boots) else (float("nan"), float("nan"))
        return decide_trend(estimate, lo, hi, 0, "increasing", self.min_effect)
