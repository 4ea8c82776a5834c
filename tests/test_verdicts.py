"""specdec_lib.verdicts: the decision rules, the checks on per-step frames, the power statement, the
seed-stability check, the notebook-expression -> rule map and the ties table (with the ASpS = block
identity proven in exact rationals)."""

from __future__ import annotations

from dataclasses import dataclass, field
import json
import random
import re
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from specdec_lib import experiments as E
from specdec_lib import verdicts as V
from specdec_lib.verifiers import exact_law

ROOT = Path(__file__).resolve().parents[1]


# ----- decision rules ------------------------------------------------------------------------------

def test_directional_rule_and_the_one_meaning_of_partly():
    d = V.decide_directional
    assert d(0.03, 0.01, 0.05).verdict == "reproduced"
    assert d(0.03, -0.01, 0.05).verdict == "partly"                          # CI includes the null
    assert d(0.003, 0.001, 0.005, min_effect=0.005).verdict == "partly"      # below the minimum effect
    assert d(0.03, float("nan"), float("nan")).verdict == "partly"           # no CI: never established
    assert d(-0.01, -0.03, 0.02).verdict == "not reproduced"                 # wrong side, inconclusive
    assert d(-0.01, -0.03, 0.02).detail.startswith("inconclusive")
    assert d(-0.02, -0.03, -0.01).detail.startswith("contradicted")
    assert d(0.0, -0.01, 0.01).verdict == "not reproduced"                   # a tie is not the claimed side
    for rounding in (2e-16, -2e-16, 1e-10):                                  # an exact tie up to rounding:
        tie = d(rounding, -abs(rounding), abs(rounding))                      # one verdict whatever the sign
        assert (tie.verdict, tie.detail.startswith("a tie")) == ("not reproduced", True)
        assert d(1.0 + rounding, 1.0, 1.0, null=1.0, exact=True).verdict == "not reproduced"
    assert d(2 * V.TIE_TOLERANCE, -1e-9, 3e-9).verdict == "partly"        # beyond it: on the claimed side
    assert d(-0.03, -0.05, -0.01, direction="<").verdict == "reproduced"
    assert d(-0.03, -0.05, 0.01, direction="<").verdict == "partly"
    assert d(0.2, 0.1, 0.3, null=0.6).verdict == "not reproduced"            # threshold: acceptance >= 0.6
    assert d(1.05, 0, 0, null=1.0, exact=True).verdict == "reproduced"      # deterministic quantity
    with pytest.raises(ValueError):
        d(0.0, 0.1, -0.1)
    with pytest.raises(ValueError):
        d(0.0, 0.0, 0.0, direction=">=")


def test_equivalence_exact_every_and_trend_rules():
    assert V.decide_equivalence(0.001, -0.004, 0.006, 0.01).verdict == "reproduced"
    assert V.decide_equivalence(0.001, -0.02, 0.02, 0.01).verdict == "partly"
    assert V.decide_equivalence(0.02, 0.01, 0.03, 0.01).verdict == "not reproduced"
    assert "contradicted" in V.decide_equivalence(0.02, 0.01, 0.03, 0.01).detail
    wide = V.decide_equivalence(-0.18, -0.54, 0.19, 0.03)                  # no power: outside, but the CI holds 0
    assert wide.verdict == "not reproduced" and "inconclusive" in wide.detail
    assert V.decide_exact(3e-15).verdict == "reproduced"
    assert V.decide_exact(2e-6).verdict == "not reproduced"
    ok, part, bad = (V.decide_directional(*x) for x in [(0.03, 0.01, 0.05), (0.03, -0.01, 0.05), (-0.01, -0.02, 0.0)])
    assert V.decide_every([ok, ok]).verdict == "reproduced"
    assert V.decide_every([ok, part]).verdict == "partly"
    assert V.decide_every([ok, part, bad]).verdict == "not reproduced"
    assert V.decide_trend(0.02, 0.01, 0.03, 0).verdict == "reproduced"
    assert V.decide_trend(0.02, 0.01, 0.03, 1).verdict == "partly"
    assert V.decide_trend(0.02, -0.01, 0.03, 0).verdict == "partly"
    assert V.decide_trend(-0.02, -0.03, -0.01, 0).verdict == "not reproduced"
    assert V.decide_trend(-0.02, -0.03, -0.01, 0, direction="decreasing").verdict == "reproduced"


def test_power_statement():
    # half-width 0.01 -> SE 0.0051, minimum detectable effect (1.96 + 0.84) SE = 0.0143
    assert V.power_statement(0.0, 0.02, 0.02) == "decided"
    under = V.power_statement(0.0, 0.02, 0.01)
    assert under.startswith("underpowered") and "~2.0x" in under
    assert V.power_statement(0.0, 0.02, None) == ""
    assert V.power_statement(float("nan"), float("nan"), 0.02).startswith("underpowered")
    d = V.decide_directional(0.01, -0.01, 0.03, paper_effect=0.05)
    assert d.power == "decided" and d.verdict == "partly"   # a real tie-break: narrow enough, effect absent


def test_rules_are_written_for_every_kind():
    for kind in ("superiority", "noninferiority", "equivalence", "exact", "trend", "every", "threshold",
                 "not_applicable"):
        rule = V.RULES[kind]
        assert rule.kind == kind and rule.text().startswith(f"[{kind}]")
        for name in ("quantity", "design", "exact", "unit", "min_effect"):
            assert getattr(rule, name)
    for kind in ("superiority", "noninferiority", "equivalence", "trend", "threshold"):
        assert V.RULES[kind].partly == V.PARTLY


# ----- checks on per-step frames -------------------------------------------------------------------

def _frame(effects, steps=12, seed=0, noise=0.05, base=1.5, by=None):
    """A per-step frame like paired_expected_tokens': prompts p0..pN (effect per prompt), two verifiers
    on the same trees; ``by``: extra column values (one cell per value, effect scaled by the value)."""
    rng = np.random.default_rng(seed)
    rows = []
    for cell in (by or [None]):
        for i, eff in enumerate(effects):
            for s in range(steps):
                b = base + noise * rng.standard_normal()
                a = b * (1 + eff * (cell if cell is not None else 1))
                extra = {"x": cell} if cell is not None else {}
                rows.append({"prompt_id": f"p{i}/s0", "step": s, "view": "tree", "verifier": "new",
                             "expected_tokens": a, **extra})
                rows.append({"prompt_id": f"p{i}/s0", "step": s, "view": "tree", "verifier": "old",
                             "expected_tokens": b, **extra})
    return pd.DataFrame(rows)


def test_gain_check_matches_paired_gain_and_rules():
    frame = _frame([0.02, 0.03, 0.025, 0.018, 0.04, 0.022])
    d = V.GainCheck("c", "new", "old").evaluate(frame, seed=0)
    ref = E.paired_gain(frame.assign(prompt_id=frame["prompt_id"].map(V.cluster_of)), "new", "old").iloc[0]
    assert d.estimate == pytest.approx(ref["gain"], rel=1e-12)
    assert d.verdict == "reproduced"
    mixed = _frame([0.03, -0.03, 0.02, -0.02, 0.004, 0.0])
    assert V.GainCheck("c", "new", "old").evaluate(mixed).verdict in ("partly", "not reproduced")
    assert V.GainCheck("c", "new", "old", kind="noninferiority").evaluate(_frame([0.0] * 6)).verdict == "reproduced"
    eq = V.GainCheck("c", "new", "old", kind="equivalence", margin=0.01).evaluate(_frame([0.001, -0.001] * 3))
    assert eq.verdict == "reproduced"
    # half the paper's effect when the paper's effect is small
    assert V.GainCheck("c", "new", "old", paper_effect=0.002).min_effect_for() == pytest.approx(0.001)
    # seeds of one prompt are one resampling unit
    assert V.cluster_of("writing-03/s12") == "writing-03" and V.cluster_of("toy-1") == "toy-1"


def test_trend_every_and_identity_checks():
    up = _frame([0.01, 0.012, 0.011, 0.009, 0.013, 0.01], by=[1, 2, 3])
    t = V.TrendCheck("t", "x", "new", "old").evaluate(up)
    assert t.verdict == "reproduced" and "1: +" in t.detail
    assert V.TrendCheck("t", "x", "new", "old", direction="decreasing").evaluate(up).verdict == "not reproduced"
    # an expected contrast (the paper's or a theory's, named) gives the trend its power statement
    assert t.power == "" and V.TrendCheck("t", "x", "new", "old", paper_effect=1.0).evaluate(up).power == "decided"
    weak = V.TrendCheck("t", "x", "new", "old", paper_effect=1e-4, effect_source="0th-order theory").evaluate(up)
    assert weak.power.startswith("underpowered (minimum detectable") and "> 0th-order theory 0.0001" in weak.power
    level_check = V.TrendCheck("t", "x", "new", "old", gain_of="level")
    level = level_check.evaluate(up)
    assert level.verdict in ("reproduced", "partly")
    # a level's contrast is recorded in the value's own units, not as a percentage
    assert level.unit == "(expected_tokens, x last minus first)" and "%" not in level.text()
    ours = V.checked_claim(level_check, up, "p", "-").ours
    assert "%" not in ours and ours.endswith("(expected_tokens, x last minus first)") and f"{level.estimate:+.2f}" in ours
    every = V.EveryCheck("e", ["x"], V.GainCheck("cell", "new", "old")).evaluate(up)
    assert every.verdict == "reproduced" and every.detail.startswith("3/3")
    same = up.copy()
    same.loc[same["verifier"] == "new", "expected_tokens"] = same.loc[same["verifier"] == "old", "expected_tokens"].to_numpy()
    assert V.IdentityCheck("i", "new", "old").evaluate(same).verdict == "reproduced"
    assert V.IdentityCheck("i", "new", "old").evaluate(up).verdict == "not reproduced"


def test_evaluate_and_to_claim():
    frame = _frame([0.02, 0.03, 0.025, 0.018, 0.04, 0.022])
    table = V.evaluate([V.GainCheck("gain", "new", "old", paper_effect=0.03)], frame)
    assert list(table["verdict"]) == ["reproduced"]
    assert table["power"].iloc[0] == "decided" or table["power"].iloc[0].startswith("underpowered")
    d = V.GainCheck("gain", "new", "old").evaluate(frame)
    record = V.to_claim(d, "traversal", "new > old", "+2%")
    assert record.verdict == "reproduced" and record.ours == d.text() and record.notes.startswith("rule superiority")


# ----- seed stability --------------------------------------------------------------------------------

def test_seed_stability_flags_a_verdict_that_depends_on_the_bootstrap_seed():
    frame = _frame([0.02, -0.01, 0.03, 0.0, 0.015, -0.005, 0.01], noise=0.1, seed=3)
    check = V.GainCheck("diff", "new", "old", relative=False, min_effect=0.0)
    lo = [check.evaluate(frame, s, n_boot=200).ci_low for s in (0, 1)]
    assert lo[0] != lo[1]
    # shift the method's values so that the null lies between the two seeds' lower CI ends: the
    # difference statistic is shift-equivariant, so the CI ends move with the shift
    shifted = frame.copy()
    shifted.loc[shifted["verifier"] == "new", "expected_tokens"] -= (lo[0] + lo[1]) / 2
    stable = V.GainCheck("clear", "new", "old", relative=False)
    table = V.seed_stability([check, stable], shifted.assign(expected_tokens=shifted["expected_tokens"]), (0, 1),
                             n_boot=200, max_boot=200)
    flip = table.set_index("claim").loc["diff"]
    assert not flip["stable"] and {flip["verdict@0"], flip["verdict@1"]} == {"reproduced", "partly"}
    big = _frame([0.05] * 7, noise=0.01)
    assert V.seed_stability([V.GainCheck("clear", "new", "old")], big, (0, 1), n_boot=200)["stable"].all()


def test_checked_claim_marks_a_seed_dependent_verdict():
    frame = _frame([0.02, -0.01, 0.03, 0.0, 0.015, -0.005, 0.01], noise=0.1, seed=3)
    check = V.GainCheck("diff", "new", "old", relative=False, min_effect=0.0)
    lo = [check.evaluate(frame, s, n_boot=200).ci_low for s in (0, 1)]
    shifted = frame.copy()
    shifted.loc[shifted["verifier"] == "new", "expected_tokens"] -= (lo[0] + lo[1]) / 2
    flip = V.checked_claim(check, shifted, "traversal", "+1%", n_boot=200, max_boot=200)
    assert V.SEED_DEPENDENT in flip.notes and flip.notes.startswith("rule superiority")
    assert flip.verdict == "partly"  # reproduced under one seed, partly under the other: not established
    clear = V.checked_claim(V.GainCheck("clear", "new", "old"), _frame([0.05] * 7, noise=0.01), "traversal", "+5%",
                            n_boot=200, notes="paired")
    assert clear.verdict == "reproduced" and V.SEED_DEPENDENT not in clear.notes and "paired" in clear.notes
    same = V.checked_claim(V.IdentityCheck("i", "old", "old"), frame, "traversal", "identical")
    assert same.ours.startswith("max |difference|")
    with pytest.raises(ValueError, match="seeds"):
        V.checked_claim(check, frame, "traversal", "x", seeds=(0,))


@dataclass
class _ResampleDependentCheck:
    """A check whose verdict is 'reproduced' under bootstrap seed 0 until ``settles_at`` resamples, and
    'partly' under every other seed and from then on (None: never settles)."""
    claim: str = "flips"
    settles_at: int | None = 800
    calls: list = field(default_factory=list)

    def evaluate(self, frame, seed=0, n_boot=2000):
        self.calls.append((seed, n_boot))
        settled = self.settles_at is not None and n_boot >= self.settles_at
        verdict = "reproduced" if seed == 0 and not settled else "partly"
        return V.Decision(verdict, 0.01, -0.001 if verdict == "partly" else 0.001, 0.02, "superiority", f"n {n_boot}")


def test_checked_claim_doubles_the_resamples_until_the_bootstrap_seeds_agree():
    table = V.seed_stability([_ResampleDependentCheck()], None, n_boot=200).iloc[0]   # the same doubling
    assert table["stable"] and table["resamples"] == 800 and table["verdict@0"] == "partly"
    check = _ResampleDependentCheck()
    claim = V.checked_claim(check, None, "erss", "+1%", n_boot=200, ours=lambda d: d.detail)
    assert [n for _, n in check.calls] == [200, 200, 400, 400, 800, 800]
    assert claim.verdict == "partly" and claim.ours == "n 800" and V.SEED_DEPENDENT not in claim.notes
    assert f"{V.STABLE_MARK} 0, 1 with 800 resamples (200 disagreed)" in claim.notes
    never = _ResampleDependentCheck(settles_at=None)
    flip = V.checked_claim(never, None, "erss", "+1%", n_boot=200, max_boot=500)
    assert [n for _, n in never.calls][-2:] == [500, 500] and max(n for _, n in never.calls) == 500
    assert flip.verdict == "partly" and f"{V.SEED_DEPENDENT} with 500 resamples (200 disagreed)" in flip.notes
    agreed = V.checked_claim(_ResampleDependentCheck(settles_at=1), None, "erss", "+1%", n_boot=200)
    assert V.STABLE_MARK in agreed.notes and "resamples" not in agreed.notes
    for bad in (100, 2.5e4, None):
        with pytest.raises(ValueError, match="max_boot"):
            V.checked_claim(check, None, "erss", "+1%", n_boot=200, max_boot=bad)


def test_checked_claim_marks_a_verdict_that_depends_on_the_monte_carlo_seed():
    """A frame computed from Monte Carlo integrals, recomputed with another seed of those integrals: the same
    rule must give the same verdict on it, or the claim is marked seed-dependent."""
    check = V.GainCheck("clear", "new", "old")
    frame = _frame([0.05] * 7, noise=0.01)
    again = _frame([0.05] * 7, noise=0.01, seed=4)
    stable = V.checked_claim(check, frame, "erss", "+5%", n_boot=200, monte_carlo={1: again})
    assert stable.verdict == "reproduced" and V.SEED_DEPENDENT not in stable.notes
    assert "Monte Carlo seeds 1" in stable.notes
    flipped = _frame([-0.05] * 7, noise=0.01, seed=4)  # integrals that moved the effect across the null
    flip = V.checked_claim(check, frame, "erss", "+5%", n_boot=200, monte_carlo={1: flipped})
    assert flip.verdict == "reproduced" and V.SEED_DEPENDENT in flip.notes and "(Monte Carlo seed 1)" in flip.notes
    for bad in ({}, [again]):
        with pytest.raises(ValueError, match="monte_carlo"):
            V.checked_claim(check, frame, "erss", "+5%", n_boot=200, monte_carlo=bad)


def test_seed_stability_per_drafting_seed():
    a = _frame([0.05] * 6, noise=0.01).assign(seed=0)
    b = _frame([-0.05] * 6, noise=0.01, seed=1).assign(seed=1)
    table = V.seed_stability([V.GainCheck("g", "new", "old")], pd.concat([a, b]), (0, 1), n_boot=200, split_by="seed")
    row = table.iloc[0]
    assert row["verdict[seed=0]"] == "reproduced" and row["verdict[seed=1]"] == "not reproduced"
    assert row["stable_bootstrap"] and not row["stable_split"] and not row["stable"]
    with pytest.raises(ValueError):
        V.seed_stability([], a, (0,))


def test_first_level_decision_is_exact_and_reports_the_sampled_difference():
    from specdec_lib.theory import traversal_identity as TI
    from specdec_lib.models.synthetic import random_markov_pair
    from specdec_lib.tree import binary

    target, draft = random_markov_pair(3, 0.8, 2, eos=False)
    gen = torch.Generator().manual_seed(0)
    from specdec_lib.exact import sample_tree
    records = [E.TreeRecord(f"p{i % 4}", "c", i // 4, sample_tree(target, draft, (0,), binary(3), "iid", gen), 1)
               for i in range(40)]
    d = V.first_level_decision(TI.first_level_frame(records))
    assert d.verdict == "reproduced" and d.rule == "exact" and "sampled difference" in d.detail


# ----- notebook expressions -> rules -----------------------------------------------------------------

def _notebook_claims():
    """(notebook, kind, claim text literal) for every R.claim / R.not_applicable / V.checked_claim call in notebooks."""
    out = []
    for path in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            calls = [(m.group(1), m.group(2)) for m in
                     re.finditer(r"R\.(claim|not_applicable)\(\s*(?:\w+|\"[^\"]*\")\s*,\s*(f?\"[^\"]*\")", src)]
            # claims decided by a written rule: the claim text is the check's first argument
            calls += [("checked", m.group(1)) for m in
                      re.finditer(r"V\.checked_claim\(\s*V\.\w+Check\(\s*(f?\"[^\"]*\")", src)]
            for kind, literal in calls:
                text = literal[2:-1] if literal.startswith("f") else literal[1:-1]
                out.append((path.stem, kind, text))
    return out


def test_every_notebook_claim_maps_to_a_rule():
    claims = _notebook_claims()
    assert len(claims) > 60
    for notebook, call, text in claims:
        if call == "not_applicable":
            continue
        entry = V.rule_entry(text, notebook)
        assert entry[0] == notebook and entry[3] in V.RULES, (notebook, text, entry)
    assert V.rule_for("n = 5: ASpS > SpS in tokens per step (all categories pooled)") == "superiority"
    assert V.rule_for("P(τ ≥ 1) is the same for Tra.V and Tok.V (all the gain is at deeper levels)") == "exact"
    with pytest.raises(KeyError):
        V.rule_for("something no notebook claims")


# ----- ties -------------------------------------------------------------------------------------------

def test_every_tie_names_an_existing_test():
    for (a, b, where), (theorem, tests) in V.TIES.items():
        assert theorem and a != b
        for ref in re.findall(r"tests/[\w/]+\.py::\w+", tests):
            file, name = ref.split("::")
            source = (ROOT / file).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), ref


def _block_law_rational(q, p, x):
    """Block Verification (Sun et al. Alg. 2; docs/methods/traversal.md §2.6(b, c)) in exact rationals:
    law[i][y] = P(tau = i, extra token y) on the chain x (q: L draft rows, p: L + 1 target rows)."""
    L, vocab = len(x), len(p[0])
    rho = [F(1)]
    for i in range(1, L + 1):
        rho.append(min(F(1), rho[i - 1] * p[i - 1][x[i - 1]] / q[i - 1][x[i - 1]]))
    h, resid = [F(1)] + [F(0)] * L, [None] * (L + 1)
    for i in range(L + 1):
        if i == L:
            h[i] = rho[L]
            resid[i] = list(p[L])
            continue
        r = [max(F(0), rho[i] * a - b) for a, b in zip(p[i], q[i])]
        s = sum(r)
        if i > 0:
            h[i] = s / (s + 1 - rho[i]) if s + 1 - rho[i] > 0 else F(0)
        resid[i] = [v / s for v in r] if s > 0 else [F(0)] * vocab
    law = []
    for i in range(L + 1):
        prob = h[i]
        for j in range(i + 1, L + 1):
            prob *= 1 - h[j]
        law.append([prob * v for v in resid[i]])
    return law


def _asps_law_rational(q, p, x):
    """ASpS (Hu & Huang Alg. 1) in exact rationals, from the spec's reference PN matrix
    (tests/test_asps_fixtures.py::reference_pn): the law [L + 1][V] of (accepted count, extra token)."""
    from test_asps_fixtures import reference_pn

    pn, d = reference_pn(q, p, x, "asps")
    L = len(x)
    law = [list(row) for row in pn]
    for k in range(L):
        law[k][x[k]] = F(0)   # the draft cell holds the acceptance mass, not an emission
    law.append([d * v for v in p[L]])
    return law


def test_tie_asps_equals_block_in_exact_rationals():
    """TIES[("block", "asps", "chains")]: on every drafted chain ASpS and block verification have the
    same law of (accepted prefix, extra token), EXACTLY (Fractions) on random rational toy chains
    (V = 2..5, gamma = 1..4, rows with and without zeros); also equal to both implementations."""
    from test_asps_fixtures import _random_rational_row, chain

    rng = random.Random(13)
    differs = 0
    for trial in range(60):
        vocab, L = rng.randint(2, 5), rng.randint(1, 4)
        q = [_random_rational_row(rng, vocab, zeros=trial % 2 == 1) for _ in range(L)]
        p = [_random_rational_row(rng, vocab, zeros=trial % 3 == 0) for _ in range(L + 1)]
        x = [rng.choice([t for t in range(vocab) if q[k][t] > 0]) for k in range(L)]
        asps, block = _asps_law_rational(q, p, x), _block_law_rational(q, p, x)
        assert asps == block, (trial, asps, block)
        assert sum(sum(r) for r in block) == 1
        tree = chain(x, q, p)
        want = torch.tensor([[float(v) for v in r] for r in block], dtype=torch.float64)
        for name in ("asps", "block", "traversal"):
            assert torch.allclose(exact_law(name, tree), want, atol=1e-12, rtol=0), (trial, name)
        differs += not torch.allclose(exact_law("token", tree), want, atol=1e-9, rtol=0)
    assert differs > 0  # control: token verification is a different law on some of these chains


def test_paired_difference():
    m, se = V.paired_difference([1.0, 2.0, 4.0], [0.0, 1.0, 1.0])
    assert m == pytest.approx(5 / 3) and se == pytest.approx(np.std([1, 1, 3], ddof=1) / np.sqrt(3))
    assert np.isnan(V.paired_difference([1.0], [0.5])[1])
    with pytest.raises(ValueError, match="matched"):
        V.paired_difference([1.0, 2.0], [1.0])


def _model_gap_frame(gap, contexts=40, seed=0):
    """Per context: vectors (p1, p2) and a value = predict(vector) * (1 + gap), predict linear."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.1, 0.4, size=(contexts, 2))
    return pd.DataFrame({"prompt_id": [f"qa-{i // 4:02d}/s0" for i in range(contexts)], "method": "A",
                         "p1": p[:, 0], "p2": p[:, 1], "expected_tokens": (1 + p.sum(1)) * (1 + gap)})


def test_model_gap_check_resamples_the_model_with_the_measurement():
    predict = lambda v: 1 + v.sum()
    check = V.ModelGapCheck("measured above the model", predict, ["p1", "p2"])
    # value = prediction per context: a linear model recomputed on every resample cancels exactly (CI [0, 0])
    tied = check.evaluate(_model_gap_frame(0.0))
    assert abs(tied.estimate) < 1e-12 and abs(tied.ci_low) < 1e-12 and abs(tied.ci_high) < 1e-12
    assert tied.verdict == "not reproduced"
    above = check.evaluate(_model_gap_frame(0.03))
    assert above.verdict == "reproduced" and abs(above.estimate - 0.03) < 1e-12 and "vs model" in above.detail
    below = V.ModelGapCheck("below", predict, ["p1", "p2"], direction="<").evaluate(_model_gap_frame(0.03))
    assert below.verdict == "not reproduced"
    # every rule over cells of ModelGapCheck
    two = pd.concat([_model_gap_frame(0.03), _model_gap_frame(0.001).assign(method="B")], ignore_index=True)
    every = V.EveryCheck("both methods", ["method"], check).evaluate(two)
    assert every.verdict == "partly" and every.rule == "every"  # B's gap is below the minimum effect
    with pytest.raises(ValueError, match="lacks the columns"):
        check.evaluate(_model_gap_frame(0.0).drop(columns="p2"))
    with pytest.raises(ValueError, match="complete rows"):
        check.evaluate(_model_gap_frame(0.0).assign(p1=np.nan))


def test_a_model_close_to_the_measurement_is_an_equivalence_on_the_resampled_gap():
    predict = lambda v: 1 + v.sum()
    close = V.ModelGapCheck("close", predict, ["p1", "p2"], direction="=", margin=0.10)
    inside = close.evaluate(_model_gap_frame(0.04))
    assert inside.verdict == "reproduced" and inside.rule == "equivalence" and abs(inside.estimate - 0.04) < 1e-12
    assert close.evaluate(_model_gap_frame(-0.12)).verdict == "not reproduced"  # 12% below: outside the margin
    # noisy values around a 9% gap: the point is inside the margin, the CI leaves it
    noisy = _model_gap_frame(0.09)
    noisy["expected_tokens"] *= 1 + np.random.default_rng(1).normal(0, 0.08, size=len(noisy))
    assert close.evaluate(noisy).verdict == "partly"
    # several cells, each with its own prediction: the every rule over them
    two = pd.concat([_model_gap_frame(0.04), _model_gap_frame(0.02).assign(method="B",
                     expected_tokens=lambda f: (2 + f["p1"]) * 1.02)], ignore_index=True)
    cells = [V.ModelGapCheck("A", predict, ["p1", "p2"], {"method": "A"}, direction="=", margin=0.1),
             V.ModelGapCheck("B", lambda v: 2 + v[0], ["p1", "p2"], {"method": "B"}, direction="=", margin=0.1)]
    both = V.AllOfCheck("both close", cells).evaluate(two)
    assert both.verdict == "reproduced" and both.rule == "every" and "2/2 cells" in both.detail
    cells[1] = V.ModelGapCheck("B", lambda v: 2.5 + v[0], ["p1", "p2"], {"method": "B"}, direction="=", margin=0.1)
    assert V.AllOfCheck("one far", cells).evaluate(two).verdict == "not reproduced"
    with pytest.raises(ValueError, match="margin"):
        V.ModelGapCheck("no margin", predict, ["p1"], direction="=")
    with pytest.raises(ValueError, match="margin"):
        V.ModelGapCheck("margin without '='", predict, ["p1"], margin=0.1)
    with pytest.raises(ValueError, match="direction"):
        V.ModelGapCheck("bad", predict, ["p1"], direction=">=")
    with pytest.raises(ValueError, match="cells"):
        V.AllOfCheck("none", []).evaluate(two)


def _timing_frame(speedup: float, noise: float = 0.0, prompts: int = 10, seed: int = 0):
    """Interleaved timing rows: per prompt, arm 'base' takes ~2 s and arm 'fast' ~2/speedup s for 32 tokens
    (30 for one prompt, as after an EOS); ``noise`` multiplies each run's seconds by 1 + N(0, noise)."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(prompts):
        tokens = 30 if k == 0 else 32
        base = 2.0 * (1 + 0.3 * rng.random())  # prompts differ in speed; the arms of a prompt share it
        for arm, seconds in [("base", base), ("fast", base / speedup)]:
            rows.append({"prompt_id": f"p{k}", "arm": arm, "tokens": tokens,
                         "seconds": seconds * (1 + rng.normal(0, noise))})
    return pd.DataFrame(rows)


def test_a_wall_clock_speedup_is_pooled_tokens_over_pooled_seconds_paired_by_prompt():
    frame = _timing_frame(1.5, noise=0.02)
    faster = V.SpeedupCheck("faster", "fast", "base")
    d = faster.evaluate(frame)
    rate = frame.groupby("arm")["tokens"].sum() / frame.groupby("arm")["seconds"].sum()
    assert d.estimate == pytest.approx(rate["fast"] / rate["base"] - 1, abs=1e-12)  # pooled, not a mean of ratios
    assert d.verdict == "reproduced" and d.rule == "superiority" and d.ci_low > 0.4
    assert V.SpeedupCheck("slower", "base", "fast").evaluate(frame).verdict == "not reproduced"
    # against a model's prediction: the equivalence rule on measured / predicted - 1
    assert V.SpeedupCheck("model", "fast", "base", predicted=1.45, direction="=", margin=0.2).evaluate(frame).verdict \
        == "reproduced"
    far = V.SpeedupCheck("model", "fast", "base", predicted=2.0, direction="=", margin=0.2).evaluate(frame)
    assert far.verdict == "not reproduced" and far.estimate == pytest.approx((1 + d.estimate) / 2.0 - 1, abs=1e-12)
    # noninferiority: 2% slower is "not slower by more than 5%", never "faster"
    close = _timing_frame(0.98, noise=0.005)
    assert V.SpeedupCheck("ni", "fast", "base", margin=0.05).evaluate(close).verdict == "reproduced"
    assert V.SpeedupCheck("sup", "fast", "base").evaluate(close).verdict == "not reproduced"
    # noisy runs around a 10% gain: the point is on the claimed side, the CI reaches the null
    noisy = _timing_frame(1.1, noise=0.25, prompts=6, seed=3)
    assert V.SpeedupCheck("noisy", "fast", "base").evaluate(noisy).verdict == "partly"
    with pytest.raises(ValueError, match="direction"):
        V.SpeedupCheck("bad", "fast", "base", direction=">=")
    with pytest.raises(ValueError, match="margin"):
        V.SpeedupCheck("bad", "fast", "base", direction="=")
    with pytest.raises(ValueError, match="predicted"):
        V.SpeedupCheck("bad", "fast", "base", predicted=0.0)
    with pytest.raises(ValueError, match="columns"):
        faster.evaluate(frame.drop(columns="seconds"))
    with pytest.raises(ValueError, match="no prompt was timed"):
        V.SpeedupCheck("none", "fast", "other").evaluate(frame)


def test_checked_claim_takes_its_text_from_the_decision_it_records():
    frame = _timing_frame(1.5, noise=0.02)
    claim = V.checked_claim(V.SpeedupCheck("faster", "fast", "base"), frame, "sequoia", "faster",
                            ours=lambda d: f"measured {1 + d.estimate:.2f}x")
    rate = frame.groupby("arm")["tokens"].sum() / frame.groupby("arm")["seconds"].sum()
    assert claim.ours == f"measured {rate['fast'] / rate['base']:.2f}x" and claim.verdict == "reproduced"


def test_cells_significantly_above_holds_the_family_wise_rate_where_a_per_cell_rule_flips():
    """96 cells where A and B truly tie: Holm's family-wise test flags some cell in about 5% of runs,
    the per-cell "more than 2 SE above" rule in most runs (the flip 05's Figure 3 claim showed)."""
    rng = np.random.default_rng(0)
    ses = np.full(96, 0.005)
    runs = [rng.normal(0.0, 0.005, size=96) for _ in range(400)]
    holm = np.mean([V.cells_significantly_above(g, ses).any() for g in runs])
    per_cell = np.mean([(g > 2 * ses).any() for g in runs])
    assert holm <= 0.08 and per_cell >= 0.8


def test_cells_significantly_above_flags_a_real_excess_and_exact_cells():
    gaps = np.zeros(20)
    ses = np.full(20, 0.01)
    gaps[3] = 0.06  # 6 SE above: p = 1e-9, below 0.05 / 20
    gaps[5] = -0.05
    assert np.flatnonzero(V.cells_significantly_above(gaps, ses)).tolist() == [3]
    exact = V.cells_significantly_above([0.0, 1e-3, -1e-3], [0.0, 0.0, 0.0])
    assert exact.tolist() == [False, True, False]
    for bad in [([0.1], [0.1, 0.1]), ([], []), ([float("nan")], [0.1]), ([0.1], [-0.1])]:
        with pytest.raises(ValueError):
            V.cells_significantly_above(*bad)
    with pytest.raises(ValueError, match="alpha"):
        V.cells_significantly_above([0.1], [0.1], alpha=1.5)


def test_a_statistic_of_resampled_vectors_is_contrasted_between_two_cells():
    rng = np.random.default_rng(0)
    rows = []
    for prompt in range(12):
        for cell, centre in (("cold", 0.6), ("hot", 0.4)):
            for step in range(4):
                p1 = centre + rng.normal(0, 0.05)
                rows.append({"prompt_id": f"qa-{prompt:02d}", "temperature": cell, "p1": p1, "p2": 0.1})
    frame = pd.DataFrame(rows)
    first = lambda v: v[0]
    check = V.VectorStatisticCheck("colder accepts more", first, ["p1", "p2"], "temperature", "cold", "hot",
                                   min_effect=0.05)
    d = check.evaluate(frame)
    means = frame.groupby("temperature")["p1"].mean()
    assert d.verdict == "reproduced" and d.rule == "trend"
    assert abs(d.estimate - (means["cold"] - means["hot"])) < 1e-12 and d.ci_low > 0.1
    flipped = V.VectorStatisticCheck("hotter accepts more", first, ["p1", "p2"], "temperature", "hot", "cold")
    assert flipped.evaluate(frame).verdict == "not reproduced"
    # an integer statistic (a DP depth, say) that does not move is not a trend
    flat = V.VectorStatisticCheck("same depth", lambda v: 3, ["p1", "p2"], "temperature", "cold", "hot", min_effect=1.0)
    assert flat.evaluate(frame).verdict == "not reproduced"
    with pytest.raises(ValueError, match="lacks the columns"):
        check.evaluate(frame.drop(columns="p2"))
    with pytest.raises(ValueError, match="no rows"):
        V.VectorStatisticCheck("x", first, ["p1"], "temperature", "cold", "warm").evaluate(frame)


def test_every_rule_shows_its_least_favourable_cell():
    """Among the cells with the claim's verdict, the claim shows the one whose CI comes nearest the null from the
    claimed side (03's C3: the GSS cell at +2.8% [+0.0, +5.8], not the first, ERSS at +3.7% [+0.8, +7.0])."""
    first, weak = V.decide_directional(0.037, 0.008, 0.070), V.decide_directional(0.028, 0.0001, 0.058)
    assert V.decide_every([first, weak]).estimate == 0.037                      # without signs: the first cell
    assert V.decide_every([first, weak], [1, 1]).estimate == 0.028
    below = [V.decide_directional(-0.10, -0.12, -0.08, "<"), V.decide_directional(-0.05, -0.09, -0.01, "<")]
    assert V.decide_every(below, [-1, -1]).estimate == -0.05                    # claimed below 0: the highest CI end
    close = [V.decide_equivalence(0.0, -0.002, 0.002, 0.01), V.decide_equivalence(0.004, -0.001, 0.009, 0.01)]
    assert V.decide_every(close, [0, 0]).estimate == 0.004                      # closeness: the widest reach from 0
    partly = [V.decide_directional(0.03, -0.01, 0.05), V.decide_directional(0.02, -0.03, 0.06), first]
    assert V.decide_every(partly, [1, 1, 1]).estimate == 0.02                   # only cells with the claim's verdict
    with pytest.raises(ValueError, match="signs"):
        V.decide_every([first, weak], [1])
    with pytest.raises(ValueError, match="signs"):
        V.decide_every([first, weak], [1, 2])


def test_every_check_reads_each_cell_check_s_claimed_side():
    assert [V.claimed_sign(c) for c in (V.GainCheck("a", "m", "b"), V.GainCheck("a", "m", "b", direction="<"),
                                         V.TrendCheck("t", "k", "m", "b", direction="decreasing"))] == [1, -1, -1]
    assert V.claimed_sign(V.ModelGapCheck("g", lambda r: 1.0, ["p1"], direction="=", margin=0.1)) == 0


def test_convergence_start_is_where_the_expected_gap_is_widest():
    # C6's 0th-order theory (seed 0): the gap opens from k = 2 to k = 4, then closes
    theory_gain = {2: -0.042, 4: -0.071, 8: -0.065, 16: -0.043, 32: -0.023}
    assert V.convergence_start(theory_gain, [1, 2, 4, 8, 16, 32], smallest=2) == 4
    # the last x ends the contrast, so it never starts it (even where the gap is widest there)
    assert V.convergence_start({2: 0.01, 4: 0.02, 8: 0.5}, [2, 4, 8], smallest=2) == 4
    with pytest.raises(ValueError, match="xs"):
        V.convergence_start({2: 0.1, 4: 0.1}, [1, 2], smallest=2)
    with pytest.raises(ValueError, match="expected_gain"):
        V.convergence_start({2: 0.1}, [2, 4, 8], smallest=2)


def test_a_predicted_speedup_function_is_recomputed_on_each_resample_from_per_prompt_inputs():
    """A prediction computed from per-prompt measurements (a profile re-measured before every prompt's round):
    constant inputs give exactly the fixed-number check; noisy inputs widen the CI (their noise is inside it)."""
    frame = _timing_frame(1.5, noise=0.02)
    fixed = V.SpeedupCheck("model", "fast", "base", predicted=1.45, direction="=", margin=0.2).evaluate(frame)
    mean_x = lambda d: float(d["x"].mean())
    same = V.SpeedupCheck("model", "fast", "base", predicted=mean_x, inputs=["x"], direction="=",
                          margin=0.2).evaluate(frame.assign(x=1.45))
    assert (same.verdict, same.estimate, same.ci_low, same.ci_high) == pytest.approx(
        (fixed.verdict, fixed.estimate, fixed.ci_low, fixed.ci_high), abs=1e-12)
    assert "recomputed per resample" in same.detail
    # one input per prompt (the same on both arms of a prompt), noisy around 1.45
    x = {f"p{k}": 1.45 * (1 + 0.1 * z) for k, z in enumerate(np.random.default_rng(5).normal(size=10))}
    noisy = frame.assign(x=frame["prompt_id"].map(x))
    d = V.SpeedupCheck("model", "fast", "base", predicted=mean_x, inputs=["x"], direction="=",
                       margin=0.2).evaluate(noisy)
    measured = 1 + V.SpeedupCheck("s", "fast", "base").evaluate(frame).estimate
    assert d.estimate == pytest.approx(measured / np.mean(list(x.values())) - 1, abs=1e-12)
    assert d.ci_high - d.ci_low > 1.5 * (fixed.ci_high - fixed.ci_low)
    with pytest.raises(ValueError, match="inputs"):
        V.SpeedupCheck("bad", "fast", "base", predicted=mean_x, direction="=", margin=0.2)
    with pytest.raises(ValueError, match="inputs"):
        V.SpeedupCheck("bad", "fast", "base", predicted=1.4, inputs=["x"], direction="=", margin=0.2)
    with pytest.raises(ValueError, match="columns"):
        V.SpeedupCheck("bad", "fast", "base", predicted=mean_x, inputs=["x"], direction="=", margin=0.2).evaluate(frame)
    with pytest.raises(ValueError, match="predicted"):
        V.SpeedupCheck("bad", "fast", "base", predicted=lambda d: 0.0, inputs=["x"], direction="=",
                       margin=0.2).evaluate(noisy)
    with pytest.raises(ValueError, match="missing for some prompts"):
        V.SpeedupCheck("bad", "fast", "base", predicted=mean_x, inputs=["x"], direction="=",
                       margin=0.2).evaluate(noisy.assign(x=noisy["x"].where(noisy["prompt_id"] != "p3")))
