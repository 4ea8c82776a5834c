"""The growth rule of notebook 07's cross claim (`regime_growth.GrowthCheck`): the estimate is the mean
synthetic gain minus the real draft's, the CI resamples prompts jointly across regimes, bad frames fail."""

import numpy as np
import pandas as pd
import pytest

from specdec_lib.experiments.regime import Comparison
from specdec_lib.verdicts.regime_growth import GrowthCheck

CHAIN = Comparison("block_vs_token", "block vs token", "block", "chain", "chain:4", "block", "token")


def _frame(gains: dict[str, float], prompts: int = 12, prompt_noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """Per regime and prompt, two steps; the baseline is 1 + a prompt effect shared by every regime, the
    method that times 1 + the regime's gain (so each regime's gain is exact)."""
    rng = np.random.default_rng(seed)
    shared = 1.0 + prompt_noise * rng.random(prompts)
    rows = []
    for regime, gain in gains.items():
        for p in range(prompts):
            for step in range(2):
                base = shared[p] * (1.0 + 0.1 * step)
                for verifier, value in (("token", base), ("block", base * (1.0 + gain))):
                    rows.append(dict(prompt_id=f"p{p:02d}", step=step, view="chain:4", experiment="chain",
                                     verifier=verifier, expected_tokens=value, regime=regime,
                                     synthetic=regime != "real draft"))
    return pd.DataFrame(rows)


def test_growth_is_the_mean_synthetic_gain_minus_the_real_draft_gain():
    frame = _frame({"real draft": 0.01, "synthetic 0.60": 0.04, "synthetic 0.80": 0.08}, prompt_noise=2.0)
    (comparison, d), = GrowthCheck("x", [CHAIN]).cells(frame)
    assert comparison is CHAIN
    assert d.estimate == pytest.approx((0.04 + 0.08) / 2 - 0.01, abs=1e-12)
    # every regime's gain is the same on every prompt, so every resample gives the same growth: the prompt
    # effect (a factor 3 between prompts) cancels because all regimes are resampled together
    assert d.ci_low == pytest.approx(d.estimate, abs=1e-12) and d.ci_high == pytest.approx(d.estimate, abs=1e-12)
    assert d.verdict == "reproduced" and d.rule == "trend"


def test_verdicts_follow_the_every_rule_over_comparisons():
    other = Comparison("other", "other", "block", "chain", "chain:4", "block", "token", sign=-1)
    frame = _frame({"real draft": 0.05, "synthetic 0.80": 0.02})
    check = GrowthCheck("x", [CHAIN])
    assert check.evaluate(frame).verdict == "not reproduced"       # the gain shrank
    assert GrowthCheck("x", [other]).evaluate(frame).verdict == "reproduced"  # claimed direction: smaller
    small = _frame({"real draft": 0.0, "synthetic 0.80": 0.003})
    assert check.evaluate(small).verdict == "partly"               # below the minimum effect of 0.5 points
    assert GrowthCheck("x", [CHAIN, other]).evaluate(frame).verdict == "not reproduced"


def test_noisy_gains_give_a_ci_that_holds_the_noise():
    rng = np.random.default_rng(3)
    frame = _frame({"real draft": 0.0, "synthetic 0.80": 0.02}, prompts=20)
    noisy = frame["verifier"] == "block"
    frame.loc[noisy, "expected_tokens"] *= 1.0 + 0.2 * rng.standard_normal(int(noisy.sum()))
    d0 = GrowthCheck("x", [CHAIN]).cells(frame, seed=0)[0][1]
    d1 = GrowthCheck("x", [CHAIN]).cells(frame, seed=1)[0][1]
    assert d0.ci_low < d0.estimate < d0.ci_high and d0.ci_high - d0.ci_low > 0.02
    assert d0.estimate == d1.estimate and (d0.ci_low, d0.ci_high) != (d1.ci_low, d1.ci_high)


def test_bad_frames_and_settings_are_refused():
    with pytest.raises(ValueError, match="comparisons"):
        GrowthCheck("x", [])
    only_real = _frame({"real draft": 0.01})
    with pytest.raises(ValueError, match="synthetic"):
        GrowthCheck("x", [CHAIN]).evaluate(only_real)
    for column in ("synthetic", "expected_tokens", "verifier"):
        with pytest.raises(ValueError, match="columns"):
            GrowthCheck("x", [CHAIN]).evaluate(only_real.drop(columns=[column]))
