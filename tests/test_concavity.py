"""verdicts.ConcavityCheck (a curve's saturation), SpeedupCheck's ``rate`` columns and
cells_significantly_below: each decides the claim on data with the effect and fails it without."""

import numpy as np
import pandas as pd
import pytest

from specdec_lib.verdicts import ConcavityCheck, SpeedupCheck, cells_significantly_below, slope_drop


def _curve_frame(curve, prompts=10, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"prompt_id": f"p{i}", "n": n, "verifier": "token",
                          "expected_tokens": curve(n) + rng.normal(0, noise)}
                         for i in range(prompts) for n in (2, 5, 10) for _ in range(2)])


def test_slope_drop_of_a_line_is_zero_and_of_a_saturating_curve_positive():
    assert slope_drop([1.8, 3.0, 5.0], [2, 5, 10]) == pytest.approx(0.0)
    assert slope_drop([2.0, 3.0, 3.2], [2, 5, 10]) == pytest.approx(1 / 3 - 0.04)


def test_concavity_reproduced_on_a_saturating_curve_and_not_on_a_line():
    check = ConcavityCheck("x", "n", "token", (2, 5, 10), min_effect=0.05)
    saturating = check.evaluate(_curve_frame(lambda n: (1 - 0.7 ** (n + 1)) / 0.3), n_boot=400)
    assert saturating.verdict == "reproduced" and saturating.ci_low > 0
    line = check.evaluate(_curve_frame(lambda n: 1 + 0.4 * n, noise=0.0), n_boot=400)
    assert line.verdict == "not reproduced"
    rising = check.evaluate(_curve_frame(lambda n: 1 + 0.02 * n * n), n_boot=400)   # convex: slope grows
    assert rising.verdict == "not reproduced"


def test_concavity_refuses_bad_points_and_missing_rows():
    with pytest.raises(ValueError, match="points"):
        ConcavityCheck("x", "n", "token", (2, 10, 5), 0.05)
    with pytest.raises(ValueError, match="min_effect"):
        ConcavityCheck("x", "n", "token", (2, 5, 10), -1)
    frame = _curve_frame(lambda n: n).query("n != 5")
    with pytest.raises(ValueError, match="n = 5"):
        ConcavityCheck("x", "n", "token", (2, 5, 10), 0.05).evaluate(frame)


def _runs(step_ratio, prompts=12, noise=0.005, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(prompts):
        seconds = 1 + rng.uniform()
        for arm, s in (("M", step_ratio), ("base", 1.0)):
            t = seconds * (1 + (rng.normal(0, noise) if noise else 0.0))
            rows.append({"prompt_id": f"p{i}", "arm": arm, "tokens": 100 * seconds, "seconds": t, "steps": 40 * seconds / s})
    return pd.DataFrame(rows)


def test_speedup_check_rate_compares_seconds_per_step():
    check = SpeedupCheck("x", "M", "base", rate=("seconds", "steps"))
    assert check.evaluate(_runs(1.05), n_boot=400).verdict == "reproduced"
    assert check.evaluate(_runs(1.0, noise=0.0), n_boot=400).verdict == "not reproduced"
    # the default rate is tokens per second: equal here whatever the steps
    assert SpeedupCheck("x", "M", "base").evaluate(_runs(1.05, noise=0.0), n_boot=400).verdict == "not reproduced"


@pytest.mark.parametrize("rate", [("tokens",), ("tokens", "tokens"), ("tokens", ""), "tokens"])
def test_speedup_check_refuses_a_bad_rate(rate):
    with pytest.raises(ValueError, match="rate"):
        SpeedupCheck("x", "M", "base", rate=rate)


def test_speedup_check_names_a_missing_rate_column():
    with pytest.raises(ValueError, match="verify_s"):
        SpeedupCheck("x", "M", "base", rate=("verify_s", "steps")).evaluate(_runs(1.0))


def test_cells_significantly_below_needs_every_cell_below_and_ties_are_not_below():
    below = cells_significantly_below([-0.05, -0.05, 0.0, 0.0, -0.05], [0.01, 0.01, 0.01, 0.0, 0.0])
    assert below.tolist() == [True, True, False, False, True]
