"""Experiment helpers: nested sub-trees are exact, paired summaries are right, settings parse."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from specdec_lib import exact, experiments as E
from specdec_lib.models.synthetic import random_markov_pair
from specdec_lib.tree import parse_shape
from specdec_lib.verifiers import expected_tokens


@pytest.mark.parametrize("big, small, sampling", [
    ("chain:3", "chain:2", "iid"),
    ("batch:3x1", "batch:2x1", "without_replacement"),
    ("batch:3x1", "batch:2x1", "iid"),
    ("binary:3", "binary:2", "iid"),
    ("parents:-1,0,0,1,2,1", "parents:-1,0,0,1", "without_replacement"),
    ("erss_specinfer:5", "chain:3", "without_replacement"),  # 03's C4: the sequence inside the SpecInfer tree
    ("parents:-1,0,0,1,3", "batch:2x1", "without_replacement"),  # 03's C5/C6: each shape inside the union
    ("parents:-1,0,0,1,3", "chain:3", "without_replacement"),
])
def test_restricted_trees_have_the_law_of_the_smaller_shape(big, small, sampling):
    """E over drafts of the big shape of E[tokens | restricted tree] == E over drafts of the small shape."""
    target, draft = random_markov_pair(4, 0.6, seed=3, eos=False)
    via_big = sum(p * expected_tokens("token", E.restrict_to_shape(t, small))
                  for p, t in exact.enumerate_drafts(target, draft, (1,), parse_shape(big), sampling))
    direct = exact.expected_step_tokens("token", target, draft, (1,), parse_shape(small), sampling)
    assert via_big == pytest.approx(direct, abs=1e-12)


def test_control_a_chain_off_the_first_child_has_another_law():
    """Control for 03's C4: only the chain of FIRST-drawn children has the law of a drafted chain; the chain through a
    second child (drawn without replacement, so never the first child's token) does not."""
    from specdec_lib.tree import subtree
    target, draft = random_markov_pair(4, 0.6, seed=3, eos=False)
    big = parse_shape("parents:-1,0,0,2")  # two root children, the second one with a child
    second = sum(p * expected_tokens("token", subtree(t, [0, 2, 3]))
                 for p, t in exact.enumerate_drafts(target, draft, (1,), big, "without_replacement"))
    first = sum(p * expected_tokens("token", E.restrict_to_shape(t, "chain:1"))
                for p, t in exact.enumerate_drafts(target, draft, (1,), big, "without_replacement"))
    direct = lambda n: exact.expected_step_tokens("token", target, draft, (1,), parse_shape(f"chain:{n}"), "without_replacement")
    assert first == pytest.approx(direct(1), abs=1e-12)
    assert abs(second - direct(2)) > 1e-3


def test_restrict_to_shape_rejects_a_shape_not_contained():
    target, draft = random_markov_pair(4, 0.6, seed=3, eos=False)
    _, tree = exact.enumerate_drafts(target, draft, (1,), parse_shape("chain:2"), "iid")[0]
    with pytest.raises(ValueError, match="not contained"):
        E.restrict_to_shape(tree, "batch:2x1")
    assert E.truncate_chain(tree, 1).num_nodes == 2  # root + 1 drafted token
    with pytest.raises(ValueError):
        E.truncate_chain(tree, 3)
    assert E.index_tuples([-1, 0, 0, 1]) == [(), (1,), (2,), (1, 1)]


@pytest.mark.parametrize("big, small, contained", [
    ("erss_specinfer:32", "chain:12", True),   # 03's C4 at the default sizes: the first chain has 2 + 10 tokens
    ("erss_specinfer:32", "chain:13", False),
    ("erss_specinfer:5", "chain:4", False),
    ("batch:3x1", "batch:2x1", True),
    ("chain:2", "batch:2x1", False),
])
def test_contains_shape_compares_index_paths(big, small, contained):
    from specdec_lib.tree import contains_shape
    assert contains_shape(big, small) is contained
    assert contains_shape(parse_shape(big), parse_shape(small)) is contained


def test_union_shape_holds_each_shape_and_nothing_else():
    from specdec_lib.theory import strategy_shape
    from specdec_lib.tree import contains_shape, index_tuples, union_shape
    assert union_shape("chain:3", "batch:2x1") == [-1, 0, 0, 1, 3]
    assert union_shape("chain:2") == parse_shape("chain:2")
    r_a, r_b = np.array([0.6, 0.2, 0.1, 0.05]), np.array([0.5, 0.3, 0.1, 0.05])
    a, b = strategy_shape("tau_star", 16, r_a), strategy_shape("tau_star", 16, r_b)
    both = union_shape(a, b)
    assert contains_shape(both, a) and contains_shape(both, b)
    assert set(index_tuples(both)) == set(index_tuples(a)) | set(index_tuples(b))
    with pytest.raises(ValueError):
        union_shape()


def test_paired_gain_and_summary():
    rows = []
    for p, scale in [("a", 1.0), ("b", 2.0), ("c", 3.0)]:
        for s in range(4):
            rows.append({"prompt_id": p, "category": "x", "step": s, "view": "v", "verifier": "base",
                         "expected_tokens": scale})
            rows.append({"prompt_id": p, "category": "x", "step": s, "view": "v", "verifier": "new",
                         "expected_tokens": 1.1 * scale})
    frame = pd.DataFrame(rows)
    g = E.paired_gain(frame, "new", "base").iloc[0]
    assert g["gain"] == pytest.approx(0.1) and g["ci_low"] == pytest.approx(0.1) and g["positive_prompts"] == 1
    assert E.gain_verdict(g) == "reproduced"
    s = E.summarize(frame, ["verifier"]).set_index("verifier")
    assert s.loc["base", "mean"] == pytest.approx(2.0) and s.loc["base", "prompts"] == 3
    point, lo, hi = E.bootstrap_ratio(np.array([1.0, 2.0]), np.array([1.0, 1.0]), n_boot=200)
    assert point == 1.5 and lo < 1.0 < 2.0 < hi  # two prompts: the t interval, wider than their range (few_units)


def test_settings_and_parse(monkeypatch):
    monkeypatch.setenv("SPECDEC_PROFILE", "smoke")  # settings() sets it when unset; keep the test process clean
    defaults = {"smoke": {"sizes": [2], "num_prompts": 1}}
    cfg = E.settings("smoke", defaults, sizes="[4, 8]", num_prompts=None, temperatures="0.6,1.0")
    assert cfg == {"dtype": None, "sizes": [4, 8], "num_prompts": 1, "temperatures": [0.6, 1.0], "profile": "smoke"}
    with pytest.raises(ValueError, match="unknown profile"):
        E.settings("huge", defaults)
    with pytest.raises(ValueError, match="no defaults"):
        E.settings("default", defaults)


@pytest.mark.parametrize("name, value, match", [
    ("num_prompts", "-3", "num_prompts: expected an integer >= 1"),
    ("num_prompts", "2.5", "num_prompts: expected an integer"),
    ("num_prompts", "true", "num_prompts: expected an integer"),
    ("temperatures", "0.6", r"temperatures: expected a list like the default \[0.2, 1.0\]"),
    ("temperatures", "[0.6, -1]", "temperatures: expected a number >= 0"),
    ("temperatures", "['hot']", "temperatures: expected a number"),
    ("sizes", "{'chain': [4, 0]}", r"sizes\['chain'\]: expected an integer >= 1"),
    ("sizes", "[4]", "sizes: expected a dict"),
    ("draft_model", "3", "draft_model: expected text"),
    ("timing_prompts", "-1", "timing_prompts: expected an integer >= 0"),
])
def test_settings_refuse_a_value_without_the_default_s_form(monkeypatch, name, value, match):
    monkeypatch.setenv("SPECDEC_PROFILE", "smoke")
    defaults = {"smoke": {"num_prompts": 2, "temperatures": [0.2, 1.0], "sizes": {"chain": [2, 4], "binary": [2]},
                          "draft_model": "toy", "timing_prompts": 1}}
    with pytest.raises(ValueError, match=match):
        E.settings("smoke", defaults, **{name: value})


def test_settings_take_values_of_the_default_s_form(monkeypatch):
    monkeypatch.setenv("SPECDEC_PROFILE", "smoke")
    defaults = {"smoke": {"num_prompts": 2, "temperatures": [0.2, 1.0], "sizes": {"chain": [2, 4], "binary": [2]},
                          "timing_prompts": 1, "categories": None}}
    cfg = E.settings("smoke", defaults, num_prompts="6", temperatures="[0, 1]", sizes="{'chain': [8]}",
                     timing_prompts="0", categories="['qa', 'math']", seeds="[3]")
    assert cfg["num_prompts"] == 6 and cfg["temperatures"] == [0, 1] and cfg["sizes"] == {"chain": [8]}
    assert cfg["timing_prompts"] == 0 and cfg["categories"] == ["qa", "math"] and cfg["seeds"] == [3]


def test_default_profile_runs_in_bfloat16_unless_told(monkeypatch):
    monkeypatch.setenv("SPECDEC_PROFILE", "smoke")
    defaults = {"default": {"num_prompts": 1}, "full": {"num_prompts": 4}}
    assert E.settings("default", defaults)["dtype"] == "bfloat16"
    assert E.settings("default", defaults, dtype="float32")["dtype"] == "float32"
    assert E.settings("default", {"default": {"dtype": "float16"}})["dtype"] == "float16"
    assert E.settings("full", defaults)["dtype"] is None  # load_model's device default


def test_collect_trees_on_toy_pair_is_reproducible_and_paired():
    pair = E.toy_pair(vocab_size=5, seed=1)
    prompts = E.prompts_for(pair, 2, ["t"])
    a = E.collect_trees(pair, prompts, "chain:3", "iid", 0.8, max_new_tokens=6, seed=2, progress=False)
    b = E.collect_trees(pair, prompts, "chain:3", "iid", 0.8, max_new_tokens=6, seed=2, progress=False)
    assert [r.tree.tokens.tolist() for r in a] == [r.tree.tokens.tolist() for r in b]
    f = E.paired_expected_tokens(a, ["token", "block", "traversal", "erss"],
                                 views={n: (lambda t, n=n: E.truncate_chain(t, n)) for n in (1, 3)})
    assert set(f["verifier"]) == {"token", "block", "traversal"}  # erss needs race trees
    one = f[f["view"] == 1].pivot_table(index=["prompt_id", "step"], columns="verifier", values="expected_tokens")
    assert np.allclose(one["block"], one["token"])  # one drafted token: every chain verifier is the same
    rows_p, rows_q = E.matched_rows(pair, prompts, 0.8, max_new_tokens=4, progress=False)
    assert rows_p.shape == rows_q.shape == (8, 5)
    assert torch.allclose(rows_p.sum(1), torch.ones(8, dtype=torch.float64))


@pytest.mark.parametrize("sampling, verifier", [("without_replacement", "token"), ("iid", "token"), ("topk", "match")])
def test_star_index_law_is_the_positional_acceptance(sampling, verifier):
    """Averaged over drafts, the per-child acceptance of a K-star equals G(batch k) - G(batch k-1)."""
    target, draft = random_markov_pair(4, 0.6, seed=5, eos=False)
    drafts = exact.enumerate_drafts(target, draft, (2,), parse_shape("batch:3x1"), sampling)
    law = E.star_index_law([E.TreeRecord("p", "c", 0, t, 0) for _, t in drafts], verifier)
    p = (law[["p1", "p2", "p3"]].to_numpy() * np.array([w for w, _ in drafts])[:, None]).sum(0)
    g = [exact.expected_step_tokens(verifier, target, draft, (2,), parse_shape(f"batch:{k}x1"), sampling)
         for k in (1, 2, 3)]
    assert np.allclose(np.cumsum(p), np.array(g) - 1, atol=1e-12)


@pytest.mark.parametrize("shape, copies, verifier", [
    (shape, copies, verifier)
    for shape, copies in [("chain:2", 2), ("binary:2", 2), ("parents:-1,0,0,1", 2), ("chain:1", 3)]
    for verifier in ["token", "traversal"] + (["block"] if shape.startswith("chain") else [])])
def test_copies_of_an_iid_shape_are_draws_of_that_shape(shape, copies, verifier):
    """Over all iid drafts of the replicated shape, each copy has the law of one draft of the shape: the
    mean over copies of E[tokens | copy] has the shape's expectation, and each copy keeps the shape."""
    target, draft = random_markov_pair(3, 0.7, seed=11, eos=False)
    small = parse_shape(shape)
    big = E.replicate_shape(small, copies)
    assert len(big) == 1 + copies * (len(small) - 1)
    drafts = exact.enumerate_drafts(target, draft, (0,), big, "iid")
    per_copy = np.zeros(copies)
    for w, tree in drafts:
        parts = E.split_copies(tree, copies)
        assert all(E.index_tuples(t.parent_list) == E.index_tuples(small) for t in parts)
        per_copy += w * np.array([expected_tokens(verifier, t) for t in parts])
    direct = exact.expected_step_tokens(verifier, target, draft, (0,), small, "iid")
    assert np.allclose(per_copy, direct, atol=1e-12)
    # control: the joint tree is not a draw of the shape (more tokens per step)
    joint = sum(w * expected_tokens("token", t) for w, t in drafts)
    assert joint > exact.expected_step_tokens("token", target, draft, (0,), small, "iid") + 1e-6


def test_copies_in_collect_trees_and_streaming_helper():
    pair = E.toy_pair(vocab_size=5, seed=1)
    prompts = E.prompts_for(pair, 2, ["t"])
    recs = E.collect_trees(pair, prompts, "chain:3", "iid", 1.0, max_new_tokens=6, seed=2, progress=False, copies=3)
    assert sorted({r.draw for r in recs}) == [0, 1, 2] and all(r.tree.num_nodes == 4 for r in recs)
    steps = {(r.prompt_id, r.step) for r in recs}
    assert len(recs) == 3 * len(steps)
    with pytest.raises(ValueError, match="iid"):
        E.collect_trees(pair, prompts, "chain:3", "without_replacement", 1.0, max_new_tokens=4, copies=2)
    with pytest.raises(ValueError, match="state"):
        E.collect_trees(pair, prompts, "chain:3", "iid", 1.0, max_new_tokens=4, copies=2, advance="greedy_block")
    with pytest.raises(ValueError, match="multiple"):
        E.split_copies(recs[0].tree, 2)
    both = E.paired_expected_tokens(recs, ["token", "block"])
    streamed = E.paired_tokens_by_prompt(pair, prompts, "chain:3", "iid", 1.0, ["token", "block"], progress=False,
                                         max_new_tokens=6, seed=2, copies=3)
    pd.testing.assert_frame_equal(both, streamed)
    g = E.paired_gain(streamed, "block", "token")  # averages the copies of a step before pairing
    assert g.iloc[0]["steps"] == len(steps)
    # each view evaluated by the verifiers named for it only; the values are those of evaluating it by all
    views = {"chain:3": lambda t: t, "chain:1": lambda t: E.truncate_chain(t, 1)}
    some = E.paired_expected_tokens(recs, ["token", "block"], views, verifiers_by_view={"chain:1": ["block"]})
    every = E.paired_expected_tokens(recs, ["token", "block"], views)
    assert set(map(tuple, some[["view", "verifier"]].drop_duplicates().to_numpy())) == {
        ("chain:3", "token"), ("chain:3", "block"), ("chain:1", "block")}
    pd.testing.assert_frame_equal(some.reset_index(drop=True),
                                  every.query("view == 'chain:3' or verifier == 'block'").reset_index(drop=True))
    for bad in ({"chain:2": ["token"]}, {"chain:1": ["spectr"]}, {"chain:1": "token"}):
        with pytest.raises(ValueError, match="verifiers_by_view"):
            E.paired_expected_tokens(recs, ["token", "block"], views, verifiers_by_view=bad)


@pytest.mark.parametrize("verifier, sampling", [("spectr", "iid"), ("token", "iid"), ("token", "without_replacement")])
def test_star_rejection_from_rows_matches_the_closed_forms(verifier, sampling):
    """Averaged over many drawn stars, the rejection rate on matched rows equals 1 - sum(p_1..p_k) of
    `theory.positional_acceptance` (token verification), and SpecTr with one child is 1 - sum min(p, q)."""
    from specdec_lib import theory

    gen = torch.Generator().manual_seed(0)
    P, Q = (-torch.log(torch.rand(2, 3, 5, generator=gen, dtype=torch.float64))).unbind(0)  # Dirichlet(1) rows
    P, Q = P / P.sum(1, keepdim=True), Q / Q.sum(1, keepdim=True)
    draws = 1500  # one star per row: the three contexts repeated
    frame = E.star_rejection_from_rows(P.repeat(draws, 1), Q.repeat(draws, 1), [1, 3], verifier, sampling, seed=1)
    rej = frame.assign(row=frame["row"] % 3).groupby(["row", "k"])["rejection"].mean().unstack()
    if verifier == "token":
        pos = theory.positional_acceptance(P, Q, 3, sampling, per_row=True, method="exact").numpy()
        expected = np.stack([1 - pos[:, :1].sum(1), 1 - pos.sum(1)], axis=1)
        assert np.allclose(rej.to_numpy(), expected, atol=0.04)  # Monte Carlo over 1500 stars: SE <= 0.013
    one = 1 - torch.minimum(P, Q).sum(1).numpy()
    assert np.allclose(rej[1].to_numpy(), one, atol=0.04)
    assert (rej[3].to_numpy() < one - 0.05).all()  # more children: fewer rejections
    with pytest.raises(ValueError):
        E.star_rejection_from_rows(P, Q[:2], [1])


def test_single_draft_acceptance_is_the_expectation_over_the_drafted_token():
    """token: exactly E over the single iid draft of its exact acceptance (enumerated); erss: the closed form
    equals the exact inclusion-exclusion of the race index at i = 1, and on race-drawn stars of a toy pair the
    mean of the per-star exact acceptance agrees with the closed form within 4 standard errors."""
    target, draft = random_markov_pair(4, 0.6, seed=5, eos=False)
    drafts = exact.enumerate_drafts(target, draft, (2,), parse_shape("batch:1x1"), "iid")
    law = E.star_index_law([E.TreeRecord("p", "c", 0, t, 0) for _, t in drafts], "token")
    enumerated = float((law["p1"].to_numpy() * np.array([w for w, _ in drafts])).sum())
    closed = E.single_draft_acceptance([E.TreeRecord("p", "c", 0, drafts[0][1], 0)], ["token"])["token"].iloc[0]
    assert abs(closed - enumerated) < 1e-12

    from specdec_lib.theory import erss_first_acceptance
    from specdec_lib.theory.acceptance import _race_exact_row

    rng = np.random.default_rng(3)
    for _ in range(5):
        p, q = rng.dirichlet(np.full(6, 0.5)), rng.dirichlet(np.full(6, 0.5))
        assert abs(float(erss_first_acceptance(torch.tensor(p), torch.tensor(q))) - _race_exact_row(p, q, 1)[0]) < 1e-12

    pair = E.toy_pair(6, 0.7, seed=1)
    records = E.collect_trees(pair, E.prompts_for(pair, 40), "batch:1x1", "race", 1.0, max_new_tokens=20,
                              advance="erss", progress=False)
    exact_rb = E.single_draft_acceptance(records)
    for verifier in ["token", "erss"]:
        sampled = E.star_index_law(records, verifier)["p1"].to_numpy()
        diff = sampled - exact_rb[verifier].to_numpy()
        assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(len(diff)), verifier
        assert exact_rb[verifier].var() < sampled.var()  # the drafted token integrated out
    with pytest.raises(ValueError, match="no closed form"):
        E.single_draft_acceptance(records, ["traversal"])


def test_interleaved_timing_runs_every_arm_on_each_prompt_back_to_back_in_a_rotated_order(tiny_llama):
    pair = E.Pair(tiny_llama(64), tiny_llama(64, name="tiny-draft"), "hf", "tiny")  # the same weights
    prompts = [E.PromptIds(f"p{k}", "c", torch.tensor([1, 2 + k, 3])) for k in range(3)]
    arms = {"autoregressive": None, "chain": ("token", "chain:2", "iid"), "tree": ("token", "binary:2", "iid")}
    rows = E.interleaved_timing(pair, prompts, arms, max_new_tokens=5, seed=2, progress=False)
    assert len(rows) == 9 and set(rows["arm"]) == set(arms)
    # arm k of the round starts prompt k: no arm always runs first
    first = rows[rows["order"] == 0].set_index("prompt_id")["arm"]
    assert list(first) == ["autoregressive", "chain", "tree"]
    assert list(rows["prompt_id"]) == ["p0"] * 3 + ["p1"] * 3 + ["p2"] * 3  # each prompt's arms back to back
    assert (rows["tokens"] == 5).all() and (rows["seconds"] > 0).all()
    assert set(rows.loc[rows["arm"] == "autoregressive", "verifier"]) == {"autoregressive"}
    # a draft identical to the target accepts every drafted token: 3 tokens per step on a 2-token chain
    chain = rows[rows["arm"] == "chain"]
    assert (chain["steps"] == 2).all()
    with pytest.raises(ValueError, match="arms"):
        E.interleaved_timing(pair, prompts, {}, seed=0, progress=False)
    with pytest.raises(ValueError, match=r"arms\['bad'\]"):
        E.interleaved_timing(pair, prompts, {"bad": ("token", "chain:2")}, seed=0, progress=False)
    with pytest.raises(ValueError, match="real model pair"):
        E.interleaved_timing(E.toy_pair(), prompts, arms, seed=0, progress=False)
    with pytest.raises(TypeError):                                  # the seed has no default
        E.interleaved_timing(pair, prompts, arms, progress=False)
    for bad in (-1, 1.5, None):
        with pytest.raises(ValueError, match="seed"):
            E.interleaved_timing(pair, prompts, arms, seed=bad, progress=False)


def test_prompts_for_never_returns_fewer_prompts_than_asked():
    class Encoder:  # the hf branch needs only the target's encode
        def encode(self, text):
            return torch.tensor([1, 2, 3])

    pair = E.Pair(Encoder(), Encoder(), "hf", "stub")
    got = E.prompts_for(pair, 12, categories=["coding", "rag"])
    assert len(got) == 24 and [p.category for p in got] == ["coding"] * 12 + ["rag"] * 12
    with pytest.raises(ValueError, match=r"num_prompts=13: category 'coding' of split 'heldout' has only 12"):
        E.prompts_for(pair, 13, categories=["coding"])
    with pytest.raises(ValueError, match="unknown category 'nothing'"):
        E.prompts_for(pair, 1, categories=["nothing"])
    with pytest.raises(ValueError, match="num_prompts must be >= 1"):
        E.prompts_for(pair, 0)


def test_interleaved_timing_records_round_inputs_once_per_prompt_before_its_round(tiny_llama):
    pair = E.Pair(tiny_llama(64), tiny_llama(64, name="tiny-draft"), "hf", "tiny")
    prompts = [E.PromptIds(f"p{k}", "c", torch.tensor([1, 2 + k, 3])) for k in range(3)]
    arms = {"autoregressive": None, "chain": ("token", "chain:2", "iid")}
    calls = []

    def measure():
        calls.append(len(calls))
        return {"prof_target_1": 0.01 * len(calls), "prof_draft_1": 0.001}

    rows = E.interleaved_timing(pair, prompts, arms, seed=0, max_new_tokens=3, progress=False, round_inputs=measure)
    assert calls == [0, 1, 2]  # one measurement per prompt's round
    by_prompt = rows.groupby("prompt_id")["prof_target_1"].agg(["min", "max"])
    assert list(by_prompt["min"]) == pytest.approx([0.01, 0.02, 0.03]) and (by_prompt["min"] == by_prompt["max"]).all()
    assert set(E.TIMING_COLUMNS) | {"prof_target_1", "prof_draft_1"} == set(rows.columns)
    for bad, match in [(lambda: {}, "non-empty"), (lambda: {"seconds": 1.0}, "timing columns"),
                       (lambda: {"x": "fast"}, "not a number"), (lambda: {"x": float("nan")}, "not finite")]:
        with pytest.raises(ValueError, match=match):
            E.interleaved_timing(pair, prompts, arms, seed=0, max_new_tokens=3, progress=False, round_inputs=bad)
    with pytest.raises(ValueError, match="round_inputs"):
        E.interleaved_timing(pair, prompts, arms, seed=0, progress=False, round_inputs={"x": 1.0})


def test_target_nll_scores_each_timed_text_under_the_target(tiny_llama):
    """The generated tokens a timed run keeps are scored by one teacher-forced forward: the mean NLL of each
    text under the target's law at T = 1, equal to the step-by-step log-probabilities."""
    target = tiny_llama(64)
    pair = E.Pair(target, tiny_llama(64, name="tiny-draft"), "hf", "tiny")
    prompts = [E.PromptIds(f"p{k}", "c", torch.tensor([1, 2 + k, 3])) for k in range(2)]
    rows = E.interleaved_timing(pair, prompts, {"ar": None, "chain": ("token", "chain:2", "iid")}, max_new_tokens=4,
                                seed=0, progress=False)
    scored = E.target_nll(pair, prompts, rows)
    for prompt_id, generated, nll in zip(scored["prompt_id"], scored["generated"], scored["nll_per_token"]):
        text = [int(t) for t in generated.split()]
        ids = {p.id: p for p in prompts}[prompt_id].ids.tolist()
        logp = []
        for t in text:
            logp.append(float(torch.log_softmax(target.logits(ids).double()[-1], -1)[t]))
            ids.append(t)
        assert len(text) == 4 and nll == pytest.approx(-sum(logp) / len(text), abs=1e-5)
    with pytest.raises(ValueError, match="lacks the columns"):
        E.target_nll(pair, prompts, rows.drop(columns="generated"))
    with pytest.raises(ValueError, match="not in prompts"):
        E.target_nll(pair, prompts[:1], rows)


def test_kseq_rejection_from_rows_is_the_mean_over_drawn_stars():
    """SpecTr's exact per-context rejection (drafts integrated out) equals the mean of the exact rejection of
    drawn i.i.d. stars (`star_rejection_from_rows`), and 1 - sum min(p, q) at k = 1 (the maximal coupling)."""
    gen = torch.Generator().manual_seed(0)
    P, Q = (-torch.log(torch.rand(2, 3, 5, generator=gen, dtype=torch.float64))).unbind(0)
    P, Q = P / P.sum(1, keepdim=True), Q / Q.sum(1, keepdim=True)
    exact = E.kseq_rejection_from_rows(P, Q, [1, 3]).set_index(["row", "k"])["rejection"].unstack()
    drawn = E.star_rejection_from_rows(P.repeat(1500, 1), Q.repeat(1500, 1), [1, 3], "spectr", "iid", seed=2)
    mean = drawn.assign(row=drawn["row"] % 3).groupby(["row", "k"])["rejection"].mean().unstack()
    assert np.allclose(exact.to_numpy(), mean.to_numpy(), atol=0.04)  # Monte Carlo over 1500 stars: SE <= 0.013
    assert np.allclose(exact[1].to_numpy(), 1 - torch.minimum(P, Q).sum(1).numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="ks"):
        E.kseq_rejection_from_rows(P, Q, [0])
    with pytest.raises(ValueError, match="matched"):
        E.kseq_rejection_from_rows(P, Q[:2], [1])


def test_load_pair_takes_the_profile_dtype(monkeypatch):
    from specdec_lib.experiments import setup

    seen = []

    class _Model:
        vocab_size = 8
        name = "m"

    def fake_load_model(name, device=None, dtype=None, target=None):
        seen.append(dtype)
        return _Model()

    monkeypatch.setattr(setup, "load_model", fake_load_model)
    setup.load_pair("default")
    setup.load_pair("default", dtype="float32")
    setup.load_pair("full")
    assert seen == ["bfloat16", "bfloat16", "float32", "float32", None, None]


def test_capped_vector_keeps_p1_and_scales_only_an_overshooting_tail():
    import numpy as np
    from specdec_lib import experiments as E, theory

    v = E.capped_vector([0.9, 0.08, 0.03])
    assert v[0] == 0.9 and abs(v.sum() - 1.0) < 1e-12 and np.allclose(v[1:] / v[1:].sum(), [0.08 / 0.11, 0.03 / 0.11])
    assert np.array_equal(E.capped_vector([0.5, 0.2]), [0.5, 0.2])                     # a sub-distribution: unchanged
    chain = theory.strategy_shape("sequence", 4, [0.9, 0.05])
    assert theory.expected_tokens_positional(chain, E.capped_vector([0.9, 0.08, 0.03])) == \
        theory.expected_tokens_positional(chain, [0.9, 0.05])                           # a chain reads p1 only
    for bad in ([], [[0.5]], [-0.1, 0.2], [1.5, 0.0], [float("nan")]):
        with pytest.raises(ValueError, match="vector"):
            E.capped_vector(bad)


def test_with_draft_loads_another_draft_for_the_same_target(monkeypatch):
    from specdec_lib.experiments import setup

    class _Model:
        vocab_size = 8
        dtype = torch.bfloat16
        device = torch.device("cpu")

        def __init__(self, name):
            self.name = name

    seen = []

    def fake_load_model(name, device=None, dtype=None, target=None):
        seen.append((name, str(device), dtype, target))
        return _Model(name)

    monkeypatch.setattr(setup, "load_model", fake_load_model)
    target, draft = _Model("t"), _Model("d")
    pair = setup.Pair(target, draft, "hf", "t / d")
    assert setup.with_draft(pair, None) is pair and setup.with_draft(pair, "d") is pair
    other = setup.with_draft(pair, "cheap")
    assert other.target is target and other.draft.name == "cheap" and other.name == "t / cheap"
    assert seen == [("cheap", "cpu", torch.bfloat16, target)]
    with pytest.raises(ValueError, match="draft_model"):
        setup.with_draft(pair, 3)
    with pytest.raises(ValueError, match="draft_model"):
        setup.with_draft(E.toy_pair(), "cheap")
    monkeypatch.setattr(setup, "load_model", lambda *a, **k: type("W", (), {"vocab_size": 9, "name": "w"})())
    with pytest.raises(ValueError, match="vocabulary"):
        setup.with_draft(pair, "wide")


def test_spread_prompts_takes_every_kth_and_refuses_more_than_it_has():
    """Ordered by category (12 each), 48 of 156 prompts give 4 to each of the first 12 categories."""
    prompts = [E.PromptIds(f"c{c}-{i}", f"c{c}", torch.zeros(1, dtype=torch.long)) for c in range(13) for i in range(12)]
    picked = E.spread_prompts(prompts, 48)
    assert len(picked) == 48 and pd.Series([p.category for p in picked]).value_counts().eq(4).all()
    assert E.spread_prompts(prompts, 156) == prompts
    with pytest.raises(ValueError, match="timing_prompts \\(157\\) exceeds the 156"):
        E.spread_prompts(prompts, 157, "timing_prompts")
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        E.spread_prompts(prompts, 0)


def test_equal_size_pairs_match_sequoia_sizes_to_baselines_of_the_same_node_count():
    assert E.equal_size_pairs([15, 17, 32], ["binary:4", "specinfer:4x4", "chain:8"]) == [
        ("sequoia:15", "binary:4"), ("sequoia:17", "specinfer:4x4")]
    with pytest.raises(ValueError, match="no baseline"):
        E.equal_size_pairs([16, 32], ["binary:4", "specinfer:4x4"])
    with pytest.raises(ValueError, match="baselines"):
        E.equal_size_pairs([15], "binary:4")


def test_fastest_arm_compares_each_arm_with_its_own_baseline_on_shared_prompts():
    rows = [("a: autoregressive", "p0", 10, 1.0), ("a: x", "p0", 10, 0.8),        # a: x 1.25x
            ("b: autoregressive", "p0", 10, 2.0), ("b: y", "p0", 10, 1.0),        # b: y 2.0x
            ("b: y", "p9", 10, 100.0)]                                            # p9: no baseline run, left out
    timing = pd.DataFrame(rows, columns=["arm", "prompt_id", "tokens", "seconds"])
    assert E.fastest_arm(timing, {"a: x": "a: autoregressive", "b: y": "b: autoregressive"}) == "b: y"
    with pytest.raises(ValueError, match="not timed"):
        E.fastest_arm(timing, {"c: z": "a: autoregressive"})
    with pytest.raises(ValueError, match="at least one"):
        E.fastest_arm(timing, {})
