"""Tests of specdec_lib.hardware: the optimizer's golden numbers (docs/methods/sequoia.md §3.4), the chain optimizer,
the published model shapes, the profile JSON round trip and a tiny profiling run (no timing assertions)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from specdec_lib import hardware as H
from specdec_lib.hardware import profiling
from specdec_lib import theory as T
from specdec_lib.models.kv_cache import cache_of, with_cache

REPO = T.sequoia_repo_acceptance()


def test_optimizer_golden_demo_config():
    """Sequoia's demo-config.json: p = REPO, depth <= 10, sizes 1..32 with times 10,10,10,12,14,18, draft 0.3."""
    plan = H.optimize_tree(REPO, H.SEQUOIA_DEMO_PROFILE, H.SEQUOIA_DEMO_DRAFT_COST, max_size=128, max_depth=10)
    assert (plan.size, plan.depth) == (4, 4)
    assert plan.tree == [-1, 0, 1, 2]                     # size 4 in 4 levels can only be the chain
    assert plan.expected_tokens == pytest.approx(2.291432, abs=1e-6)
    assert plan.time_per_token == pytest.approx(4.887774, abs=1e-6)
    assert plan.speedup == pytest.approx(2.045921, abs=1e-6)
    assert T.expected_tokens_positional(plan.tree, REPO) == pytest.approx(plan.expected_tokens)
    # every candidate is scored with the same formula
    for n, d, g, s in plan.candidates:
        assert s == pytest.approx(g / ((H.SEQUOIA_DEMO_PROFILE[n] + 0.3 * d) / 10.0))
    assert max(c[3] for c in plan.candidates) == pytest.approx(plan.speedup)


def test_optimizer_synthetic_hardware():
    """docs/methods/sequoia.md §3.4: t(n) = 1 + max(0, n-32)/64, c = 0.05, depth <= 16 -> (32, 5), 2.6438."""
    profile = {n: 1 + max(0, n - 32) / 64 for n in range(1, 257)}
    plan = H.optimize_tree(REPO, profile, 0.05, max_size=256, max_depth=16)
    assert (plan.size, plan.depth) == (32, 5)
    assert plan.expected_tokens == pytest.approx(3.3047, abs=1e-4)
    assert plan.speedup == pytest.approx(2.6438, abs=1e-4)
    table = T.sequoia_table(REPO, 256, 16)
    for n, expected in [(64, 2.0565), (128, 1.4335), (256, 0.9103)]:   # fixed size, best depth
        best = max(table.expected_tokens(n, d) / (profile[n] + 0.05 * d) for d in range(1, 17))
        assert best == pytest.approx(expected, abs=1e-4)
    unbounded = T.sequoia_table(REPO, 256)
    for n, expected in [(64, 1.8807), (128, 1.3340), (256, 0.8742)]:  # fixed size, max-G tree
        parents = unbounded.tree(n)
        depths = [0] * n
        for i in range(1, n):
            depths[i] = depths[parents[i]] + 1
        d = max(depths) + 1
        assert unbounded.expected_tokens(n) / (profile[n] + 0.05 * d) == pytest.approx(expected, abs=1e-4)


def test_optimizer_accepts_profiles_and_checks_input():
    target = {"sizes": [1, 2, 4, 8], "median_s": [0.010, 0.011, 0.012, 0.020]}
    draft = {"sizes": [1], "median_s": [0.002]}
    plan = H.optimize_tree([0.7, 0.1], target, draft, max_size=8, max_depth=8)
    assert plan.size in (1, 2, 4, 8) and 1 <= plan.depth <= plan.size
    assert plan.speedup == pytest.approx(plan.expected_tokens / ((target["median_s"][[1, 2, 4, 8].index(plan.size)]
                                                                  + 0.002 * plan.depth) / 0.010))
    # a flat, free target with a free draft should take the biggest, deepest tree
    free = H.optimize_tree([0.7, 0.1], {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}, 0.0, max_size=8, max_depth=8)
    assert free.size == 8 and free.expected_tokens == pytest.approx(T.sequoia_table([0.7, 0.1], 8).expected_tokens(8))
    # a per-step overhead makes every candidate slower
    slow = H.optimize_tree([0.7, 0.1], target, draft, max_size=8, max_depth=8, step_overhead=0.01)
    assert slow.speedup < plan.speedup
    with pytest.raises(ValueError, match="size 1"):
        H.optimize_tree([0.7], {2: 1.0, 4: 1.0}, 0.1, 4, 4)
    with pytest.raises(ValueError, match="draft_cost"):
        H.optimize_tree([0.7], {1: 1.0}, -1.0, 4, 4)
    with pytest.raises(ValueError, match="bad profile entry"):
        H.optimize_tree([0.7], {1: 0.0}, 0.1, 4, 4)


def test_chain_optimizer():
    flat = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0}
    # Leviathan's numbers (docs/methods/sequoia.md §3.7): alpha 0.8, gamma 4, c 0.05 -> 3.3616 tokens, 2.80133x
    plan = H.optimize_chain(0.8, flat, 0.05, "token", max_length=4)
    assert plan.gamma == 4 and plan.expected_tokens == pytest.approx(3.3616)
    assert plan.speedup == pytest.approx(2.80133, abs=1e-5) and plan.interpolated
    best = H.optimize_chain(0.8, flat, 0.05, "token", max_length=15)
    assert best.gamma == max(range(1, 16), key=lambda g: T.chain_speedup(0.8, g, 0.05))
    assert best.speedup == pytest.approx(T.chain_speedup(0.8, best.gamma, 0.05))
    # measured profiles per verifier; block emits more tokens than token at the same gamma
    measured = {"token": {1: 1.5, 2: 1.8, 3: 2.0, 7: 2.3}, "block": {1: 1.5, 2: 1.9, 3: 2.2, 7: 2.6},
                "asps": {1: 1.5, 2: 1.85, 3: 2.1, 7: 2.5}}
    rising = {1: 1.0, 2: 1.05, 4: 1.2, 8: 1.6}
    plans = {v: H.optimize_chain(measured, rising, 0.1, v, max_length=7, interpolate=False) for v in measured}
    for v, p in plans.items():
        assert p.gamma in (1, 3, 7) and not p.interpolated      # gamma + 1 must be a profiled size
        expected = max(measured[v][g] / (rising[g + 1] + 0.1 * g) for g in (1, 3, 7))
        assert p.speedup == pytest.approx(expected)
    assert plans["block"].speedup >= plans["token"].speedup
    # Sequoia's accounting charges one more draft pass
    assert H.optimize_chain(0.8, flat, 0.05, "token", 4, extra_draft_passes=1).speedup == pytest.approx(
        3.3616 / 1.25)
    with pytest.raises(ValueError, match="closed form"):
        H.optimize_chain(0.8, flat, 0.05, "block")
    with pytest.raises(ValueError, match="unknown chain verifier"):
        H.optimize_chain(0.8, flat, 0.05, "traversal")
    with pytest.raises(ValueError, match="gamma \\+ 1"):
        H.optimize_chain({3: 5.0}, flat, 0.05, "block")


def analytic_parameters(name: str) -> int:
    s = H.SHAPES[name]
    h, f, layers, v = s["hidden"], s["intermediate"], s["layers"], s["vocab"]
    kv = h // s["heads"] * s["kv_heads"]
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    return v * h * (1 if s["tie"] else 2) + layers * per_layer + h


def test_published_shapes():
    """The shapes reproduce the published parameter counts."""
    assert analytic_parameters("llama-2-7b") == 6_738_415_616
    assert analytic_parameters("llama-2-13b") == 13_015_864_320
    assert analytic_parameters("llama-2-70b") == 68_976_648_192
    assert analytic_parameters("smollm2-135m") == 134_515_008
    assert analytic_parameters("vicuna-33b") == pytest.approx(32.5e9, rel=0.005)
    assert analytic_parameters("jackfram-68m") == pytest.approx(68e6, rel=0.01)
    assert analytic_parameters("jackfram-160m") == pytest.approx(162e6, rel=0.02)
    assert analytic_parameters("sheared-llama-1.3b") == pytest.approx(1.345e9, rel=0.01)
    cfg = H.shape_config("Llama-2-7B", num_layers=2)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size) == (4096, 2, 11008, 32000)
    with pytest.raises(ValueError, match="known shapes"):
        H.shape_config("gpt-5")
    with pytest.raises(ValueError, match="num_layers"):
        H.shape_config("jackfram-68m", num_layers=3)


@pytest.fixture(scope="module")
def tiny_model():
    return H.shape_only_model("smollm2-135m", num_layers=1)


def test_shape_only_model_and_tree_mask_forward(tiny_model):
    model = tiny_model
    assert model.config.num_hidden_layers == 1 and model.config.hidden_size == 576
    assert next(model.parameters()).dtype == torch.float32
    # the timed forward (prefix cache + chain mask + positions) gives the logits of a plain forward,
    # and cropping restores the cache
    prefix = torch.randint(0, 49152, (1, 6), generator=torch.Generator().manual_seed(0))
    new = torch.randint(0, 49152, (1, 3), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        cache = cache_of(model(prefix, use_cache=True))
        mask = profiling._chain_mask(6, 3, torch.float32, torch.device("cpu"))
        out = model(new, attention_mask=mask, position_ids=torch.arange(6, 9)[None], use_cache=True,
                    **with_cache(model, cache)).logits
        profiling._truncate_cache(cache, 6)
        assert cache.get_seq_length() == 6
        ref = model(torch.cat([prefix, new], 1)).logits[:, 6:]
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_profile_interleaves_the_sizes_round_by_round(tiny_model):
    """Each round times every size once, so a slow spell of the machine falls on every size alike."""
    fed = []
    hook = tiny_model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(
        (args[0] if args else kwargs["input_ids"]).shape[1]), with_kwargs=True)
    try:
        prof = H.profile(tiny_model, [1, 4, 2], prefix_len=8, repeats=3, warmup=1)
    finally:
        hook.remove()
    assert fed == [8] + [1, 4, 2] * 4  # the prefix, then 1 warm-up round and 3 timed rounds
    assert [len(t) for t in prof["times_s"]] == [3, 3, 3]


def test_tiny_profile_and_json_round_trip(tiny_model, tmp_path):
    prof = H.profile(tiny_model, [1, 4], prefix_len=8, repeats=2, warmup=1)
    assert prof["sizes"] == [1, 4] and len(prof["median_s"]) == 2 and len(prof["times_s"][0]) == 2
    assert all(t > 0 for t in prof["median_s"])
    assert prof["num_layers"] == 1 and prof["full_num_layers"] == 30 and prof["shape_only"]
    assert prof["dtype"] == "float32" and prof["device_type"] == "cpu"
    for key in ("device", "torch", "transformers", "host", "date", "prefix_len"):
        assert key in prof
    path = H.save_profile(prof, tmp_path / "p.json")
    assert H.load_profile(path) == json.loads(json.dumps(prof))
    assert H.normalised_times(prof)[1] == 1.0
    assert H.level_cost(prof, 1) == prof["median_s"][0]
    assert H.profile_times(prof) == dict(zip(prof["sizes"], prof["median_s"]))
    # an object with .model (the project's LanguageModel) is accepted
    wrapper = type("Wrapper", (), {})()
    wrapper.model = tiny_model
    assert H.profile(wrapper, [1], prefix_len=4, repeats=1, warmup=0)["sizes"] == [1]
    with pytest.raises(ValueError, match="context"):
        H.profile(tiny_model, [10], prefix_len=8190, repeats=1)
    with pytest.raises(ValueError, match="causal LM"):
        H.profile(object(), [1])


def test_profile_json_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sizes": [1]}))
    with pytest.raises(ValueError, match="missing"):
        H.load_profile(bad)
    with pytest.raises(ValueError, match="no profile"):
        H.load_profile(tmp_path / "absent.json")
    with pytest.raises(ValueError, match="missing"):
        H.save_profile({"sizes": [1], "median_s": [1.0]}, tmp_path / "x.json")


def test_shipped_profiles_load_and_feed_the_optimizer():
    """Every committed profile under data/hardware/ loads and feeds the optimizer (no timing asserts)."""
    paths = sorted(H.DATA_DIR.rglob("*.json"))  # subfolders: other machines (cpu_without_bf16_unit/)
    assert paths, "no measured profile committed under data/hardware/"
    for path in paths:
        prof = H.load_profile(path)
        assert prof["sizes"] == sorted(prof["sizes"]) and prof["sizes"][0] == 1, path.name
        assert len(prof["median_s"]) == len(prof["sizes"]) and all(t > 0 for t in prof["median_s"]), path.name
        plan = H.optimize_tree(REPO, prof, 0.2 * prof["median_s"][0], max_size=max(prof["sizes"]), max_depth=10)
        assert plan.size in prof["sizes"] and math.isfinite(plan.speedup), path.name


def test_sizes_spec():
    assert profiling._parse_sizes("1,2,4,...,64") == [1, 2, 4, 8, 16, 32, 64]
    assert profiling._parse_sizes("1,3,...,20") == [1, 3, 6, 12, 20]
    assert profiling._parse_sizes("8,1,2") == [1, 2, 8]
    for bad in ["", "0,1", "...,4", "1,...", "1,2,...,8,16"]:
        with pytest.raises(ValueError):
            profiling._parse_sizes(bad)


def test_command_line_profiles_a_shape(tmp_path, capsys):
    assert H.main(["jackfram-68m", "--layers", "1", "--sizes", "1,2", "--repeats", "2", "--warmup", "1",
                          "--prefix-len", "8", "--threads", "1", "--out-dir", str(tmp_path)]) == 0
    saved = list(tmp_path.glob("*.json"))
    assert [p.name for p in saved] == ["cpu_float32_jackfram-68m-shape-1layers.json"]
    prof = H.load_profile(saved[0])
    assert prof["sizes"] == [1, 2] and prof["num_layers"] == 1 and prof["shape_only"]
    assert "t(1)=" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        H.main([])


def test_predicted_step_seconds_is_the_optimizer_s_denominator():
    """t(n) + d c: over t(1) it gives back the optimizer's speedup for its chosen tree."""
    target, draft = {1: 0.08, 2: 0.082, 4: 0.09, 8: 0.12}, 0.005
    plan = H.optimize_tree([0.7, 0.1, 0.05], target, draft, max_size=8, max_depth=8)
    step = H.predicted_step_seconds(target, draft, plan.size, plan.depth)
    assert math.isclose(step, target[plan.size] + plan.depth * draft)
    assert math.isclose(plan.expected_tokens * target[1] / step, plan.speedup)
    with pytest.raises(ValueError, match="size 3"):
        H.predicted_step_seconds(target, draft, 3, 1)
    with pytest.raises(ValueError, match="depth"):
        H.predicted_step_seconds(target, draft, 4, 5)
    with pytest.raises(ValueError, match="step_overhead"):
        H.predicted_step_seconds(target, draft, 4, 2, step_overhead=-1.0)


def test_best_at_size_is_the_optimizer_held_to_that_size():
    profile = {1: 1.0, 2: 1.0, 4: 1.05, 8: 1.1, 16: 1.3, 32: 1.8}
    plan = H.optimize_tree(REPO, profile, 0.05, max_size=32, max_depth=8)
    for size in (4, 16, 32):
        held = H.optimize_tree(REPO, {1: 1.0, size: profile[size]}, 0.05, max_size=size, max_depth=8)
        depth, g, speedup = H.best_at_size(plan, size)
        assert (depth, g, speedup) == pytest.approx((held.depth, held.expected_tokens, held.speedup))
    assert H.best_at_size(plan, plan.size)[2] == pytest.approx(plan.speedup)
    with pytest.raises(ValueError, match="size 64"):
        H.best_at_size(plan, 64)


def test_recorded_gpu_profiles_of_the_papers_shapes_load():
    """The profiles measured on a GPU for 05's Tables 3-4 analogue (data/hardware/cuda_*)."""
    for name in ("llama-2-7b", "llama-2-13b", "jackfram-68m"):
        prof = H.load_profile(f"cuda_float16_{name}-shape.json")
        assert prof["device_type"] == "cuda" and prof["device"] and 1 in prof["sizes"] and 1024 in prof["sizes"]


def test_round_profile_columns_pool_back_by_their_medians(tiny_model):
    """round_profile flattens several short profiles into columns; profile_from_columns reads them back."""
    cols = H.round_profile({"target": tiny_model, "draft": tiny_model}, {"target": [1, 4], "draft": [1]},
                           prefix_len=8, repeats=2, warmup=0)
    assert set(cols) == {H.profile_column("target", 1), H.profile_column("target", 4), H.profile_column("draft", 1)}
    assert all(v > 0 for v in cols.values())
    with pytest.raises(ValueError, match="same models"):
        H.round_profile({"target": tiny_model}, {"draft": [1]})
    import pandas as pd
    rounds = pd.DataFrame([{H.profile_column("target", 1): t1, H.profile_column("target", 4): 2 * t1,
                            H.profile_column("draft", 1): 0.1, "seconds": 9.0} for t1 in (1.0, 3.0, 2.0)])
    assert H.profile_from_columns(rounds, "target") == {1: 2.0, 4: 4.0}
    assert H.profile_from_columns(rounds, "draft") == {1: 0.1}
    with pytest.raises(ValueError, match="no profile columns"):
        H.profile_from_columns(rounds, "other")
    with pytest.raises(ValueError, match="no rows"):
        H.profile_from_columns(rounds.iloc[:0], "target")
    with pytest.raises(ValueError, match="model"):
        H.profile_column("a@b", 1)


def test_predicted_speedup_is_eq1_for_one_tree():
    target, draft = {1: 0.08, 2: 0.082, 4: 0.09, 8: 0.12}, 0.005
    plan = H.optimize_tree([0.7, 0.1, 0.05], target, draft, max_size=8, max_depth=8)
    assert H.predicted_speedup(plan.expected_tokens, target, draft, plan.size, plan.depth) == pytest.approx(plan.speedup)
    assert H.predicted_speedup(2.0, target, draft, 4, 2) == pytest.approx(2.0 * 0.08 / (0.09 + 2 * 0.005))
    with pytest.raises(ValueError, match="expected_tokens"):
        H.predicted_speedup(0.5, target, draft, 4, 2)
    with pytest.raises(ValueError, match="size 1"):
        H.predicted_speedup(2.0, {4: 0.1}, draft, 4, 2)


def test_speedup_from_round_profiles_pools_the_rounds_then_applies_eq1():
    import pandas as pd
    rounds = pd.DataFrame([{H.profile_column("target", 1): t, H.profile_column("target", 4): 1.25 * t,
                            H.profile_column("draft", 1): 0.1 * t} for t in (0.04, 0.05, 0.03)])
    expected = H.predicted_speedup(1.8, {1: 0.04, 4: 0.05}, 0.004, 4, 2)
    assert H.speedup_from_round_profiles(rounds, 1.8, 4, 2) == pytest.approx(expected)
    assert expected == pytest.approx(1.8 / ((1.25 + 2 * 0.1)))
