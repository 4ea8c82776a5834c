"""Every registered claim's rule can fail: fed small synthetic data with the claim's effect it gives
"reproduced", fed the same data with the effect removed (arms equal, the sign flipped, an exact input
perturbed) it gives "not reproduced". The decisions are the library's own (verdicts.checks / decisions,
results.claim for a notebook's hand-written bool, experiments.regime.range_verdict).

A claim marked ``can_fail = false`` in the registry is tested the other way round: its current rule does
NOT give "not reproduced" on data built the way its design builds them without the effect (the defect,
documented), and its ``proposed_rule`` does."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specdec_lib.reporting import results
from specdec_lib.verdicts import (AllOfCheck, ConcavityCheck, EveryCheck, GainCheck, IdentityCheck, ModelGapCheck, SpeedupCheck, TrendCheck,
                                  VectorLevelCheck, VectorStatisticCheck, cells_significantly_below, decide_directional, decide_every,
                                  decide_exact, decide_trend, registry)

ENTRIES = registry.load_registry()
REP, PART, NOT = "reproduced", "partly", "not reproduced"
BOOT = 400


# ----------------------------------------------------------------------------------------- synthetic data

def _pair_frame(gain_of_cell, cells=("c",), relative=True, noise=0.002, prompts=12, steps=4, seed=0, column="verifier"):
    """Rows (prompt, step, cell) with arms A and B: B ~ 2 + U(0, 1); A = B (1 + g) (or B + g), g per cell,
    plus Gaussian noise of relative size ``noise`` on A (0: A is exactly B (1 + g))."""
    rng = np.random.default_rng(seed)
    rows = []
    for cell in cells:
        g = gain_of_cell(cell)
        for p in range(prompts):
            for s in range(steps):
                b = 2.0 + rng.uniform()
                a = b * (1 + g) if relative else b + g
                if noise:
                    a += rng.normal(0, noise * b)
                rows += [{"prompt_id": f"p{p}", "step": s, "cell": cell, column: "A", "expected_tokens": b},
                         {"prompt_id": f"p{p}", "step": s, "cell": cell, column: "B", "expected_tokens": b}]
                rows[-2]["expected_tokens"] = a
    return pd.DataFrame(rows)


def _gain_check(p, o, kind=None):
    kind = kind or o.get("cell_rule", "superiority")
    direction = o.get("direction", ">")
    return GainCheck("synthetic", "A", "B", kind=kind, direction=">" if direction == "=" else direction,
                     min_effect=p.get("min_effect"), margin=p.get("margin"), paper_effect=p.get("paper_effect"),
                     relative=o.get("relative", True))


def _cell_gain(p, o, scenario, kind):
    """The gain of a cell under ``scenario`` for a cell rule ``kind`` and the claimed direction."""
    sign = -1.0 if o.get("direction") == "<" else 1.0
    effect = max(10 * p.get("min_effect", 0.005), 0.05)
    if kind == "noninferiority":
        return {"effect": 0.0, "null": -3 * p["margin"]}[scenario]
    if kind == "equivalence":
        return {"effect": 0.0, "null": 3 * p["margin"]}[scenario]
    return {"effect": sign * effect, "null": 0.0, "flipped": -sign * effect}[scenario]


def gain(p, o, scenario):
    kind = o.get("cell_rule", "superiority")
    g = _cell_gain(p, o, scenario, kind)
    noise = 0.0 if scenario == "null" and kind == "superiority" else 0.002
    return _gain_check(p, o).evaluate(_pair_frame(lambda c: g, relative=o.get("relative", True), noise=noise),
                                      n_boot=BOOT).verdict


def every_gain(p, o, scenario):
    kind = o.get("cell_rule", "superiority")
    cells = ("c1", "c2", "c3")
    g_ok, g_null = _cell_gain(p, o, "effect", kind), _cell_gain(p, o, "null" if scenario != "effect" else "effect", kind)
    noise = 0.0 if kind == "superiority" and scenario != "effect" else 0.002
    frame = _pair_frame(lambda c: g_null if c == "c2" else g_ok, cells, noise=noise)
    if kind == "superiority" and scenario != "effect":   # the null cell exactly equal, the others noisy
        frame = pd.concat([frame[frame["cell"] == "c2"], _pair_frame(lambda c: g_ok, ("c1", "c3"), seed=1)])
    return EveryCheck("synthetic", ["cell"], _gain_check(p, o)).evaluate(frame, n_boot=BOOT).verdict


def _model_frame(gap_of_cell, cells=("c1", "c2"), prompts=12, steps=4, seed=0):
    """Rows with a vector column p1 and a measured value = F(p1) (1 + gap) (+ noise), F = 1 + 2 p1."""
    rng = np.random.default_rng(seed)
    rows = []
    for cell in cells:
        for p in range(prompts):
            for s in range(steps):
                p1 = 0.5 + 0.2 * rng.uniform()
                rows.append({"prompt_id": f"p{p}", "step": s, "cell": cell, "p1": p1,
                             "expected_tokens": (1 + 2 * p1) * (1 + gap_of_cell(cell)) * (1 + rng.normal(0, 0.002))})
    return pd.DataFrame(rows)


def _predict(v):
    return 1 + 2 * v[0]


def every_model_gap(p, o, scenario):
    g = {"effect": 0.05, "flipped": -0.05}[scenario]
    frame = _model_frame(lambda c: g if c == "c2" else 0.05)
    check = EveryCheck("synthetic", ["cell"], ModelGapCheck("cell", _predict, ["p1"], min_effect=p["min_effect"]))
    return check.evaluate(frame, n_boot=BOOT).verdict


def allof_model_gap(p, o, scenario):
    g = {"effect": 0.0, "null": 3 * p["margin"]}[scenario]
    frame = _model_frame(lambda c: g if c == "c2" else 0.0)
    cells = [ModelGapCheck(c, _predict, ["p1"], {"cell": c}, direction="=", margin=p["margin"]) for c in ("c1", "c2")]
    return AllOfCheck("synthetic", cells).evaluate(frame, n_boot=BOOT).verdict


def _timing_frame(rate_of_arm, prompts=10, seed=0, noise=0.01):
    """Interleaved runs: per prompt and arm, tokens and seconds with tokens/s = rate (1 + noise)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(prompts):
        base = 1.0 + rng.uniform()
        for arm, rate in rate_of_arm.items():
            tokens = 100.0
            wobble = 1 + (rng.normal(0, noise) if noise else 0.0)
            rows.append({"prompt_id": f"p{p}", "arm": arm, "tokens": tokens, "seconds": tokens / (rate * base * wobble)})
    return pd.DataFrame(rows)


def allof_speedup(p, o, scenario):
    m = p["margin"]
    if o["direction"] == "=":   # measured speedup against a fixed prediction of 1.2
        rate = {"effect": 1.2, "null": 1.2 * (1 + 3 * m)}[scenario]
        frame = _timing_frame({"M1": 1.2, "M2": rate, "base": 1.0})
        cells = [SpeedupCheck(c, c, "base", predicted=1.2, direction="=", margin=m) for c in ("M1", "M2")]
    else:                       # the chosen arm not slower than each other arm by more than the margin
        rate = {"effect": 1.0, "null": 1 - 3 * m}[scenario]
        frame = _timing_frame({"choice": rate, "o1": 1.0, "o2": 1.0})
        cells = [SpeedupCheck(c, "choice", c, margin=m) for c in ("o1", "o2")]
    return AllOfCheck("synthetic", cells).evaluate(frame, n_boot=BOOT).verdict


def speedup(p, o, scenario):
    rate = {"effect": 1.1, "null": 1.0}[scenario]
    frame = _timing_frame({"M": rate, "base": 1.0}, noise=0.01 if scenario == "effect" else 0.0)
    return SpeedupCheck("synthetic", "M", "base", min_effect=p["min_effect"]).evaluate(frame, n_boot=BOOT).verdict


def trend(p, o, scenario):
    xs = (1, 2, 3)
    level = o.get("gain_of") == "level"
    up = 1.0 if o.get("direction", "increasing") == "increasing" else -1.0
    slope = {"effect": up, "flat": 0.0, "flipped": -up}[scenario] * max(10 * p["min_effect"], 0.05)
    frame = _pair_frame(lambda x: (0.0 if level else 0.1) + slope * x, xs)   # level: arm A's mean grows with x
    frame = frame.rename(columns={"cell": "x"})
    check = TrendCheck("synthetic", "x", "A", "B", direction=o.get("direction", "increasing"), min_effect=p["min_effect"],
                       gain_of=o.get("gain_of", "relative"))
    return check.evaluate(frame, n_boot=BOOT).verdict


def vector_statistic(p, o, scenario):
    rng = np.random.default_rng(0)
    shift = {"effect": 0.3, "flipped": -0.3}[scenario]
    rows = [{"prompt_id": f"p{i}", "T": T, "v0": 0.5 + (shift if T == "lo" else 0.0) + rng.normal(0, 0.01)}
            for i in range(12) for T in ("lo", "hi") for _ in range(3)]
    check = VectorStatisticCheck("synthetic", lambda v: 10 * v[0], ["v0"], "T", "lo", "hi", min_effect=p["min_effect"])
    return check.evaluate(pd.DataFrame(rows), n_boot=BOOT).verdict


def allof_model_bound(p, o, scenario):
    """05 Table 1: the measured value below each cell's bound; flipped: one cell 5% above its bound."""
    g = {"effect": -0.05, "flipped": 0.05}[scenario]
    frame = _model_frame(lambda c: g if c == "c2" else -0.05)
    cells = [ModelGapCheck(c, _predict, ["p1"], {"cell": c}, direction=o["direction"], min_effect=p["min_effect"])
             for c in ("c1", "c2")]
    return AllOfCheck("synthetic", cells).evaluate(frame, n_boot=BOOT).verdict


def allof_vector_level(p, o, scenario):
    """05 power law: per temperature, the exponent b above ``min_slope`` and the power law fitting better than a
    geometric decay. Null: a geometric rejection curve at one temperature; flat: a curve that does not fall."""
    from specdec_lib.theory import geometric_acceptance, power_law_acceptance, power_law_fit

    curve = {"effect": power_law_acceptance(0.3, 0.7, 16), "null": geometric_acceptance(0.3, 0.8, 16),
             "flat": np.concatenate([[0.7], np.full(15, 1e-4)])}[scenario]
    rng = np.random.default_rng(0)
    cols = [f"p{i}" for i in range(1, 17)]
    rows = []
    for T in ("lo", "hi"):
        base = power_law_acceptance(0.3, 0.7, 16) if T == "lo" else curve
        for i in range(12):
            v = base * (1 + rng.normal(0, 0.01, 16))
            rows.append({"prompt_id": f"p{i}", "T": T, **dict(zip(cols, v / max(1.0, v.sum())))})
    cells = [VectorLevelCheck(f"b {T}", lambda v: power_law_fit(v)["b"], cols, {"T": T}, min_effect=p["min_slope"])
             for T in ("lo", "hi")]
    cells += [VectorLevelCheck(f"fit {T}", lambda v: power_law_fit(v)["fit_gain"], cols, {"T": T},
                               min_effect=p["min_fit_gain"]) for T in ("lo", "hi")]
    return AllOfCheck("synthetic", cells).evaluate(pd.DataFrame(rows), n_boot=BOOT).verdict


def identity(p, o, scenario):
    frame = _pair_frame(lambda c: 0.0, noise=0.0)
    if scenario == "null":   # one tree perturbed beyond the tolerance
        i = frame.index[frame["verifier"] == "A"][3]
        frame.loc[i, "expected_tokens"] += 10 * p["tol"]
    return IdentityCheck("synthetic", "A", "B", tol=p["tol"]).evaluate(frame).verdict


def exact(p, o, scenario):
    return decide_exact({"effect": p["tol"] / 10, "null": 10 * p["tol"]}[scenario], p["tol"]).verdict


def threshold(p, o, scenario):
    sign = 1.0 if o.get("direction", ">") == ">" else -1.0
    delta = max(0.1 * abs(p["bound"]), 0.05)
    x = {"effect": p["bound"] + sign * delta, "null": p["bound"], "flipped": p["bound"] - sign * delta}[scenario]
    if o.get("with_ci"):
        return decide_directional(x, x - delta / 4, x + delta / 4, o.get("direction", ">"), p["bound"], 0.0,
                                  "threshold").verdict
    return decide_directional(x, x, x, o.get("direction", ">"), p["bound"], 0.0, "threshold", exact=True).verdict


def threshold_partly(p, o, scenario):
    """05 scalability: reproduced when Sequoia's growth exceeds k x L's, partly when Sequoia grows at all."""
    sq, kl = {"effect": (3.5, 2.3), "flipped": (-0.2, 0.5)}[scenario]
    return results.claim("x", "x", "", "", bool(sq - kl > p["bound"]), partly=bool(sq > 0)).verdict


def interval(p, o, scenario):
    mean = {"effect": (p["low"] + p["high"]) / 2, "null": p["low"] - 0.05}[scenario]
    lo, hi = mean - 0.01, mean + 0.01
    return results.claim("x", "x", "", "", bool(p["low"] <= lo and hi <= p["high"]),
                         partly=p["low"] <= mean <= p["high"]).verdict


def ordering(p, o, scenario):
    token, greedy, block = {"effect": (2.9, 3.1, 4.0), "null": (2.9, 2.9, 2.9)}[scenario]
    return results.claim("x", "x", "", "", bool(token < greedy < block)).verdict


def dominance(p, o, scenario):
    d = {"effect": [256, 256, 128], "flipped": [-256, 0, 0]}[scenario]   # 7B size minus 13B size per T
    return results.claim("x", "x", "", "", bool(all(x >= 0 for x in d) and any(x > 0 for x in d)),
                         partly=bool(all(x >= 0 for x in d))).verdict


def range_(p, o, scenario):
    from specdec_lib.experiments.regime import range_verdict

    papers = [p[k] for k in ("paper_gain", "paper_gain_2") if k in p]
    g = {"effect": p["sign"] * (papers[0] if papers else 0.03), "null": 0.0}[scenario]
    w = abs(g) / 3 if g else 0.01
    points = [{"gain": g, "ci_low": g - w, "ci_high": g + w} for _ in range(3)]
    return range_verdict(points, papers, int(p["sign"]))


def growth(p, o, scenario):
    """07 GrowthCheck's decision: the trend rule per comparison, the every rule over them."""
    ests = [0.03, 0.02, {"effect": 0.025, "null": 0.0}[scenario]]
    return decide_every([decide_trend(e, e - 0.01, e + 0.01, 0, "increasing", p["min_effect"]) for e in ests],
                        [1, 1, 1]).verdict


def concavity(p, o, scenario):
    """01 ATN saturates: a saturating curve (1 - 0.7^(n+1)) / 0.3 against a straight line 1 + 0.4 n."""
    rng = np.random.default_rng(0)
    curve = (lambda n: (1 - 0.7 ** (n + 1)) / 0.3) if scenario == "effect" else (lambda n: 1 + 0.4 * n)
    rows = [{"prompt_id": f"p{i}", "n": n, "verifier": "token", "expected_tokens": curve(n) + rng.normal(0, 0.05)}
            for i in range(12) for n in (2, 5, 10) for _ in range(3)]
    return ConcavityCheck("x", "n", "token", (2, 5, 10), p["min_effect"]).evaluate(pd.DataFrame(rows), n_boot=BOOT).verdict


def _step_frame(rate, step_ratio, prompts=12, seed=0, noise=0.005):
    """Interleaved runs of arms M and base per prompt: M's tokens/s is ``rate`` x base's and its seconds per
    step ``step_ratio`` x base's (times wobble by ``noise``; 0: the ratios hold exactly)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(prompts):
        seconds = 1.0 + rng.uniform()
        for arm, r, s in (("M", rate, step_ratio), ("base", 1.0, 1.0)):
            t = seconds * (1 + (rng.normal(0, noise) if noise else 0.0))
            rows.append({"prompt_id": f"p{i}", "arm": arm, "tokens": 100.0 * r * seconds, "seconds": t,
                         "steps": 40.0 * seconds / s, "verify_s": 0.1 * t})
    return pd.DataFrame(rows)


def speedup_and_overhead(p, o, scenario):
    """01 PTT: M faster in tokens/s and slower per step; null: no step overhead (PTT gain = ATN gain)."""
    rate, step = {"effect": (1.06, 1.02), "null": (1.06, 1.0), "flipped": (0.97, 1.02)}[scenario]
    frame = _step_frame(rate, step, noise=0.0 if scenario == "null" else 0.005)
    cells = [SpeedupCheck("t", "M", "base", min_effect=p["min_effect"]),
             SpeedupCheck("s", "M", "base", rate=("seconds", "steps"), min_effect=p["min_effect"])]
    return AllOfCheck("x", cells).evaluate(frame, n_boot=BOOT).verdict


def step_overhead(p, o, scenario):
    """02 throughput below acceptance: M's verification seconds per step above base's; null: equal."""
    frame = _step_frame(1.0, {"effect": 1.5, "null": 1.0}[scenario], noise=0.0 if scenario == "null" else 0.005)
    return SpeedupCheck("x", "M", "base", rate=("verify_s", "steps"), min_effect=p["min_effect"]).evaluate(
        frame, n_boot=BOOT).verdict


def holm_below(p, o, scenario):
    """05 Figure 3: every cell significantly below (Holm); null: the schemes tie in every cell."""
    gaps = np.full(12, {"effect": -0.05, "null": 0.0}[scenario])
    below = cells_significantly_below(gaps, np.full(12, 0.01), p["alpha"])
    return results.claim("x", "x", "", "", bool(below.all())).verdict


CURRENT = {"gain": gain, "every_gain": every_gain, "every_model_gap": every_model_gap, "allof_model_gap": allof_model_gap,
           "allof_speedup": allof_speedup, "speedup": speedup, "trend": trend, "vector_statistic": vector_statistic,
           "identity": identity, "exact": exact, "threshold": threshold, "threshold_partly": threshold_partly,
           "interval": interval, "ordering": ordering, "dominance": dominance,
           "range": range_, "growth": growth, "concavity": concavity, "speedup_and_overhead": speedup_and_overhead,
           "step_overhead": step_overhead, "holm_below": holm_below, "allof_model_bound": allof_model_bound,
           "allof_vector_level": allof_vector_level}
NULLS = {"gain": ("null",), "every_gain": ("null",), "every_model_gap": ("flipped",), "allof_model_gap": ("null",),
         "allof_speedup": ("null",), "speedup": ("null",), "trend": ("flipped",), "vector_statistic": ("flipped",),
         "identity": ("null",), "exact": ("null",), "threshold": ("null", "flipped"), "threshold_partly": ("flipped",),
         "interval": ("null",), "ordering": ("null",), "dominance": ("flipped",), "range": ("null",), "growth": ("null",),
         "concavity": ("null",), "speedup_and_overhead": ("null", "flipped"), "step_overhead": ("null",),
         "holm_below": ("null",), "allof_model_bound": ("flipped",), "allof_vector_level": ("null", "flat")}
"""Per check: the scenarios without the claim's effect (``null``: arms equal / effect removed; ``flipped``)."""


# ----------------------------------------------------------------------------------------- defects

DEFECTS: dict = {
    # id: (current rule on the design's data without the effect, proposed rule (scenario -> verdict)); each
    # defect found so far has its rule replaced (the registry's history keeps the defect and the old rule)
}


# ----------------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_rule_fails_without_effect(entry):
    if entry.check == "not_applicable":
        record = results.not_applicable("x", entry.claim, "-", "not available offline")
        assert record.verdict == "not applicable offline"
        return
    if not entry.can_fail:
        current, proposed = DEFECTS[entry.id]
        verdicts = current(entry)
        verdicts = verdicts if isinstance(verdicts, set) else {verdicts}
        assert NOT not in verdicts, (entry.id, verdicts)   # the defect: the current rule cannot fail
        assert proposed(entry, "effect") == REP, entry.id
        assert proposed(entry, "null") == NOT, entry.id
        assert CURRENT[entry.check](entry.parameters, entry.options, "effect") == REP, entry.id
        return
    rule = CURRENT[entry.check]
    assert rule(entry.parameters, entry.options, "effect") == REP, entry.id
    for scenario in NULLS[entry.check]:
        assert rule(entry.parameters, entry.options, scenario) == NOT, (entry.id, scenario)


def test_every_defect_is_registered_and_tested():
    assert {e.id for e in ENTRIES if not e.can_fail} == set(DEFECTS)
    for e in ENTRIES:
        if not e.can_fail:
            assert e.defect and e.proposed_rule.get("text") and e.proposed_rule.get("parameters") is not None


def test_flat_trends_are_not_reproduced():
    # a trend without any change in the gain is never 'reproduced' (its contrast is 0 up to rounding)
    for e in ENTRIES:
        if e.check == "trend":
            assert trend(e.parameters, e.options, "flat") != REP, e.id


def test_equal_arms_give_exactly_zero_gain():
    frame = _pair_frame(lambda c: 0.0, noise=0.0)
    d = GainCheck("x", "A", "B").evaluate(frame, n_boot=BOOT)
    assert d.estimate == 0.0 and d.verdict == NOT and math.isfinite(d.ci_low)
