"""Tests of the decoder's per-step overhead (specdec_lib.hardware.overhead) and of how the optimizer and
the predicted speedups price it (specdec_lib.hardware.cost_model). No timing assertions: only structure, exact
formulas and errors."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from specdec_lib import hardware as H
from specdec_lib import theory as T
from specdec_lib.hardware import overhead as DO

TARGET = {1: 0.08, 2: 0.082, 4: 0.09, 8: 0.12}
DRAFT = 0.005
VECTOR = [0.7, 0.1, 0.05]


def test_a_constant_overhead_mapping_is_the_scalar_overhead():
    keys = {(n, d) for n in TARGET for d in range(1, n + 1)}
    scalar = H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8, step_overhead=0.01)
    mapped = H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8,
                             step_overhead={k: 0.01 for k in keys})
    assert (mapped.size, mapped.depth, mapped.speedup) == (scalar.size, scalar.depth, scalar.speedup)
    assert mapped.candidates == scalar.candidates


def test_the_optimizer_prices_each_tree_s_own_overhead():
    """Every candidate is scored G (t(1) + b) / (t(n) + d c + o(n, d)); an overhead on Eq. 1's choice moves it."""
    eq1 = H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8)
    overhead = {(n, d): (0.5 if (n, d) == (eq1.size, eq1.depth) else 0.002 * n) for n in TARGET
                for d in range(1, n + 1)}
    plan = H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8, step_overhead=overhead,
                           baseline_overhead=0.004)
    assert (plan.size, plan.depth) != (eq1.size, eq1.depth)
    for n, d, g, s in plan.candidates:
        assert s == pytest.approx(g * (TARGET[1] + 0.004) / (TARGET[n] + d * DRAFT + overhead[(n, d)]))
    assert plan.speedup == pytest.approx(max(c[3] for c in plan.candidates))


def test_a_baseline_overhead_scales_every_speedup_and_keeps_the_choice():
    plain = H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8)
    based = H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8, baseline_overhead=0.02)
    assert (based.size, based.depth) == (plain.size, plain.depth)
    assert based.speedup == pytest.approx(plain.speedup * (0.08 + 0.02) / 0.08)


def test_bad_overheads_are_value_errors_naming_them():
    with pytest.raises(ValueError, match=r"step_overhead has no entry for the tree \(size 1, depth 1\)"):
        H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8, step_overhead={(2, 1): 0.0})
    with pytest.raises(ValueError, match="step_overhead"):
        H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8, step_overhead=-0.1)
    with pytest.raises(ValueError, match="step_overhead"):
        H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=1, max_depth=1, step_overhead={(1, 1): float("nan")})
    with pytest.raises(ValueError, match="baseline_overhead"):
        H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8, baseline_overhead=-1.0)
    with pytest.raises(ValueError, match="baseline_overhead"):
        H.predicted_speedup(2.0, TARGET, DRAFT, 4, 2, baseline_overhead=float("inf"))
    with pytest.raises(ValueError, match="step_overhead"):
        H.predicted_step_seconds(TARGET, DRAFT, 4, 2, step_overhead=float("nan"))
    with pytest.raises(ValueError, match="step_overhead"):
        H.optimize_chain(0.8, TARGET, DRAFT, "token", max_length=4, step_overhead=-0.01)


def test_predicted_speedup_adds_both_overheads():
    assert H.predicted_speedup(2.0, TARGET, DRAFT, 4, 2, step_overhead=0.01, baseline_overhead=0.003) == \
        pytest.approx(2.0 * (0.08 + 0.003) / (0.09 + 2 * 0.005 + 0.01))
    plan = H.optimize_tree(VECTOR, TARGET, DRAFT, max_size=8, max_depth=8, step_overhead=0.01, baseline_overhead=0.003)
    assert H.predicted_speedup(plan.expected_tokens, TARGET, DRAFT, plan.size, plan.depth, 0.01, 0.003) == \
        pytest.approx(plan.speedup)


def test_speedup_from_round_profiles_reads_the_overhead_columns_by_their_medians():
    rounds = pd.DataFrame([{H.profile_column("target", 1): 0.04, H.profile_column("target", 4): 0.05,
                            H.profile_column("draft", 1): 0.004, H.overhead_column("tree"): o,
                            H.overhead_column("autoregressive"): b}
                           for o, b in [(0.010, 0.001), (0.030, 0.003), (0.020, 0.002)]])
    got = H.speedup_from_round_profiles(rounds, 1.8, 4, 2, step_overhead=H.overhead_column("tree"),
                                        baseline_overhead=H.overhead_column("autoregressive"))
    assert got == pytest.approx(1.8 * (0.04 + 0.002) / (0.05 + 2 * 0.004 + 0.020))
    assert H.speedup_from_round_profiles(rounds, 1.8, 4, 2) == pytest.approx(1.8 * 0.04 / (0.05 + 2 * 0.004))
    with pytest.raises(ValueError, match="no column 'decoder overhead: other'"):
        H.speedup_from_round_profiles(rounds, 1.8, 4, 2, step_overhead=H.overhead_column("other"))
    with pytest.raises(ValueError, match="arm"):
        H.overhead_column("")


def test_null_model_is_seeded_small_and_leaves_the_global_random_state_alone():
    state = torch.get_rng_state()
    a, b = H.null_model(64, "float32", seed=3), H.null_model(64, "float32", seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert a.vocab_size == 64 and a.model.config.hidden_size == H.NULL_WIDTH
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    with pytest.raises(ValueError, match="vocab_size"):
        H.null_model(1)
    with pytest.raises(ValueError, match="dtype"):
        H.null_model(64, "int8")
    assert a.device.type == "cpu"
    with pytest.raises(ValueError, match="device"):
        H.null_model(64, "float32", device="nowhere")


ARMS = {"autoregressive": None, "chain": ("token", "chain:2", "without_replacement"),
        "tree": ("token", [-1, 0, 0, 1], "without_replacement")}


def test_decoder_overhead_gives_every_arm_a_finite_cost():
    got = H.decoder_overhead(64, ARMS, temperature=0.8, dtype="float32", prompt_len=8, tokens=4, repeats=1,
                             progress=False)
    assert set(got) == set(ARMS)
    assert all(0.0 <= v < 10.0 for v in got.values())
    built = DO._null_pair.cache_info().misses
    columns = H.round_decoder_overhead(64, ARMS, 0.8, "float32", tokens=4)
    assert set(columns) == {H.overhead_column(a) for a in ARMS}
    assert DO._null_pair.cache_info().misses == built  # the null pair of these settings is built once


def _fixed_forwards(seconds):
    """A stand-in for `profiling.profile` in `decoder_overhead` whose forwards all take ``seconds``."""
    return lambda model, sizes, **kw: {"sizes": list(sizes), "median_s": [seconds] * len(sizes)}


def test_decoder_overhead_subtracts_the_null_forwards_and_floors_at_zero(monkeypatch):
    monkeypatch.setattr(DO, "profile", _fixed_forwards(100.0))  # forwards longer than any step: nothing left
    assert set(H.decoder_overhead(64, ARMS, dtype="float32", prompt_len=8, tokens=4, repeats=1,
                                  progress=False).values()) == {0.0}
    monkeypatch.setattr(DO, "profile", _fixed_forwards(0.0))    # free forwards: the whole step is overhead
    assert all(v > 0 for v in H.decoder_overhead(64, ARMS, dtype="float32", prompt_len=8, tokens=4, repeats=1,
                                                 progress=False).values())


def test_decoder_overhead_rejects_bad_arguments():
    with pytest.raises(ValueError, match="arms"):
        H.decoder_overhead(64, {})
    with pytest.raises(ValueError, match="verifier, shape, sampling"):
        H.decoder_overhead(64, {"bad": ("token", "chain:2")})
    for name in ("prompt_len", "tokens", "repeats"):
        with pytest.raises(ValueError, match=name):
            H.decoder_overhead(64, ARMS, **{name: 0})


def test_dp_tree_overheads_cover_every_tree_the_optimizer_scores():
    profile = {1: 0.08, 2: 0.082, 4: 0.09}
    overheads, baseline = H.dp_tree_overheads(64, VECTOR, list(profile), 3, temperature=0.8, dtype="float32",
                                              prompt_len=8, tokens=3, repeats=1, progress=False)
    plan = H.optimize_tree(VECTOR, profile, DRAFT, max_size=4, max_depth=3, step_overhead=overheads,
                           baseline_overhead=baseline)
    assert set(overheads) == {(n, d) for n, d, _, _ in plan.candidates}
    assert baseline >= 0
    table = T.sequoia_table(VECTOR, 4, 3)
    assert plan.tree == table.tree(plan.size, plan.depth)
    with pytest.raises(ValueError, match="sizes"):
        H.dp_tree_overheads(64, VECTOR, [], 3)
