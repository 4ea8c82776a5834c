"""Arms drafted at shared target-sampled contexts (`experiments.shared_contexts`).

* on a tiny random Llama pair (the real KV-cached tree sessions), every arm's tree at position j is rooted
  at the prompt plus the target's first j sampled tokens: its root rows equal plain forwards of both models
  at that context, for every arm, although no drafted node is ever accepted;
* the frame pairs arms per context (same prompt_id/step keys), and a GainCheck with pair_on="tree" runs on it;
* on a context-free toy pair the per-context mean converges to the exact expectation over drafts;
* with common random numbers the arms share their draws (identical arms draw identical trees, an i.i.d. and a
  without-replacement arm share each node's first child) and each arm keeps its exact expectation;
* bad arguments are ValueErrors naming the argument.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from specdec_lib import experiments as E, verdicts as V
from specdec_lib.experiments.shared_contexts import _hf_forest_trees, _target_text, paired_tokens_at_shared_contexts
from specdec_lib.decoding import resolve_shape
from specdec_lib.exact import enumerate_drafts
from specdec_lib.models import LanguageModel
from specdec_lib.models.offline import build_student
from specdec_lib.models.synthetic import ContextIndependentLM
from specdec_lib.reporting.results import VERDICTS
from specdec_lib.sampling import process_logits
from specdec_lib.verifiers import expected_tokens

VOCAB = 48


@pytest.fixture(scope="module")
def tiny_pair(tiny_llama):
    target = tiny_llama(VOCAB, head_scale=20.0)
    draft = LanguageModel(build_student(target, 1), None, "tiny-draft")
    return E.Pair(target, draft, "hf", "tiny")


def _prompt(ids, pid="writing-01"):
    return E.PromptIds(pid, pid.split("-")[0], torch.tensor(ids))


@pytest.mark.parametrize("shape,sampling,block", [("binary:3", "iid", 1), ("kary:2x3", "without_replacement", 1),
                                                  ("chain:3", "iid", 1), ("binary:3", "iid", 4), ("chain:3", "race", 6)])
def test_every_tree_is_rooted_at_the_shared_context(tiny_pair, shape, sampling, block):
    """Also with ``block`` contexts drafted together (their trees hanging off the text's positions in one tree):
    every node still sees its own context and ancestors only."""
    T, top_p = 0.8, 0.9
    prompt = _prompt([3, 9, 4, 17])
    gen = torch.Generator().manual_seed(5)
    text = _target_text(tiny_pair, prompt, 6, T, top_p, 11, gen)
    assert len(text) == 6
    parents = resolve_shape(shape)
    ids = prompt.ids.tolist() + text
    with torch.no_grad():
        p_rows = process_logits(tiny_pair.target.logits(ids).double(), T, top_p, apply_top_p=True)
        q_rows = process_logits(tiny_pair.draft.logits(ids).double(), T, top_p, apply_top_p=False)
    trees = [t for (t,) in _hf_forest_trees(tiny_pair, prompt, text, [(parents, sampling)], [len(text)], T, top_p,
                                            lambda j: [gen], block)]
    assert len(trees) == len(text)
    for j, tree in enumerate(trees):
        at = len(prompt.ids) - 1 + j
        assert int(tree.tokens[0]) == ids[at]
        assert torch.allclose(tree.target_probs[0].double(), p_rows[at], atol=2e-5)
        assert torch.allclose(tree.draft_probs[0].double(), q_rows[at], atol=2e-5)
        # a drafted child is scored by the target at context + child
        child = tree.parent_list.index(0)
        with torch.no_grad():
            row = process_logits(tiny_pair.target.logits(ids[:at + 1] + [int(tree.tokens[child])]).double()[-1],
                                 T, top_p, apply_top_p=True)
        assert torch.allclose(tree.target_probs[child].double(), row, atol=2e-5)


def test_frame_pairs_arms_per_context_and_feeds_a_gain_check(tiny_pair):
    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01"), _prompt([5, 5], "math-01")]
    arms = {"wide": ("binary:3", "iid"), "deep": ("chain:4", "iid"), "kary": ("kary:2x3", "without_replacement")}
    frame = paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, temperature=1.0, contexts=5, column="tree",
                                             labels={"size": 8}, progress=False)
    assert set(frame["tree"]) == set(arms) and (frame["size"] == 8).all()
    keys = {name: set(map(tuple, g[["prompt_id", "step"]].to_numpy())) for name, g in frame.groupby("tree")}
    assert keys["wide"] == keys["deep"] == keys["kary"] and len(keys["wide"]) == 15
    assert frame.groupby("tree")["nodes"].first().to_dict() == {"wide": 6, "deep": 4, "kary": 6}
    # the same seed gives the same frame
    again = paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, temperature=1.0, contexts=5, column="tree",
                                             labels={"size": 8}, progress=False)
    assert frame["expected_tokens"].tolist() == again["expected_tokens"].tolist()
    claim = V.checked_claim(V.GainCheck("wide vs deep", "wide", "deep", column="tree"), frame, "sequoia", "-")
    assert claim.verdict in VERDICTS and "seed" in claim.notes


@pytest.mark.parametrize("contexts_per_forward", [None, 8])
def test_toy_mean_matches_the_exact_expectation_over_drafts(contexts_per_forward):
    """Context-free toy pair: every context has the same rows, so the per-context mean of an arm's exact
    expected tokens estimates E over drafted trees, computed here by enumerating every draft (with each arm's
    generator running through the contexts, and with a generator per context)."""
    target = ContextIndependentLM([0.4, 0.3, 0.2, 0.1])
    draft = ContextIndependentLM([0.1, 0.2, 0.3, 0.4])
    pair = E.Pair(target, draft, "toy", "context-free toy", context_free=True)
    prompts = [_prompt([1], f"toy-{i:02d}") for i in range(40)]
    for shape, sampling in [("binary:2", "iid"), ("kary:2x2", "without_replacement")]:
        frame = paired_tokens_at_shared_contexts(pair, prompts, {"a": (shape, sampling)}, contexts=25,
                                                 column="arm", progress=False, contexts_per_forward=contexts_per_forward)
        parents = resolve_shape(shape)
        # exact: the rows do not depend on the context, so enumerate drafts at any context
        exact = sum(w * expected_tokens("token", t) for w, t in enumerate_drafts(target, draft, (1,), parents, sampling))
        est, se = frame["expected_tokens"].mean(), frame["expected_tokens"].std() / len(frame) ** 0.5
        assert abs(est - exact) < 4 * se + 1e-9, (shape, est, exact, se)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(arms={}), "arms"),
    (dict(arms={"a": "chain:3"}), "arms['a']"),
    (dict(arms={"a": ("chain:3", "greedy")}), "unknown sampling"),
    (dict(arms={"a": ("chain:3", "iid")}, contexts=0), "contexts"),
    (dict(arms={"a": ("chain:3", "iid")}, contexts=2.5), "contexts"),
    (dict(arms={"a": ("chain:3", "iid")}, column="step"), "column"),
])
def test_bad_arguments_are_value_errors(kwargs, needle):
    pair = E.toy_pair()
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        paired_tokens_at_shared_contexts(pair, [_prompt([1])], progress=False, **kwargs)


def test_views_and_separate_calls_share_the_contexts(tiny_pair):
    """Two calls with the same prompts and seed, one arm each, meet at the same contexts (the target's text
    depends only on the prompt and the seed), and nested views of one tree are evaluated on that tree."""
    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    views = {1: lambda t: E.truncate_chain(t, 1), 3: lambda t: t}
    one = paired_tokens_at_shared_contexts(tiny_pair, prompts, {"chain": ("chain:3", "iid")}, contexts=4,
                                           views=views, progress=False)
    two = paired_tokens_at_shared_contexts(tiny_pair, prompts, {"star": ("batch:3x1", "iid")}, contexts=4,
                                           progress=False)
    assert set(one["view"]) == {1, 3} and (one.query("view == 1")["nodes"] == 1).all()
    keys = lambda f: set(map(tuple, f[["prompt_id", "step"]].to_numpy()))
    assert keys(one) == keys(two) and len(keys(two)) == 8
    a = one.query("view == 1")["expected_tokens"]  # one drafted token: between 1 and 2 tokens per step
    assert (a >= 1 - 1e-12).all() and (a <= 2 + 1e-12).all()  # up to float rounding (2.0000000000000004 seen)


def test_rows_at_shared_contexts_are_the_trees_root_rows(tiny_pair):
    """The matched rows of `rows_at_shared_contexts` are the root rows of the trees drafted at the same
    prompts, contexts and seed: acceptance vectors from them describe exactly the compared contexts."""
    from specdec_lib.experiments.shared_contexts import _prompt_seed, rows_at_shared_contexts

    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    P, Q = rows_at_shared_contexts(tiny_pair, prompts, 0.8, 0.9, contexts=5, seed=2)
    assert P.shape == Q.shape == (10, VOCAB)
    roots_p, roots_q = [], []
    for prompt in prompts:
        s = _prompt_seed(2, prompt)
        text = _target_text(tiny_pair, prompt, 5, 0.8, 0.9, s, torch.Generator().manual_seed(s))
        gen = torch.Generator().manual_seed(0)
        for (tree,) in _hf_forest_trees(tiny_pair, prompt, text, [([-1, 0], "iid")], [len(text)], 0.8, 0.9,
                                        lambda j: [gen]):
            roots_p.append(tree.target_probs[0].double())
            roots_q.append(tree.draft_probs[0].double())
    assert torch.allclose(P, torch.stack(roots_p), atol=2e-5) and torch.allclose(Q, torch.stack(roots_q), atol=2e-5)


def test_rows_index_names_the_steps_of_the_trees_drafted_there(tiny_pair):
    """``with_index=True`` names each row's context with the (prompt_id, step) keys of the trees drafted there."""
    from specdec_lib.experiments.shared_contexts import rows_at_shared_contexts

    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    P, _, index = rows_at_shared_contexts(tiny_pair, prompts, 1.0, contexts=4, seed=3, with_index=True)
    trees = paired_tokens_at_shared_contexts(tiny_pair, prompts, {"a": ("chain:1", "iid")}, 1.0, contexts=4, seed=3,
                                             progress=False)
    assert len(index) == P.shape[0] == 8
    assert list(index.columns) == ["prompt_id", "category", "step"]
    assert set(map(tuple, index[["prompt_id", "step"]].values)) == set(map(tuple, trees[["prompt_id", "step"]].values))
    with pytest.raises(ValueError, match="contexts"):
        rows_at_shared_contexts(tiny_pair, prompts, contexts=0)


def test_longer_texts_extend_shorter_ones(tiny_pair):
    """The target's text for ``contexts`` = n is the prefix of its text for more contexts (token-by-token sampling
    with the same generator), so an arm given more contexts (to average out more drafting noise) still pairs
    with the other arms on their common positions."""
    prompt = _prompt([3, 9, 4, 17])
    short = paired_tokens_at_shared_contexts(tiny_pair, [prompt], {"a": ("chain:2", "iid")}, 1.0, contexts=3, seed=4,
                                             progress=False)
    long = paired_tokens_at_shared_contexts(tiny_pair, [prompt], {"a": ("chain:2", "iid")}, 1.0, contexts=6, seed=4,
                                            progress=False)
    s = _prompt_text(tiny_pair, prompt, 3)
    assert s == _prompt_text(tiny_pair, prompt, 6)[:3]
    assert set(short["step"]) == {0, 1, 2} and set(long["step"]) == set(range(6))
    merged = short.merge(long, on=["prompt_id", "step", "view", "verifier"], suffixes=("_s", "_l"))
    assert len(merged) == len(short)  # every short step pairs with the long run's step at the same context
    assert torch.allclose(torch.tensor(merged["expected_tokens_s"].to_numpy()),
                          torch.tensor(merged["expected_tokens_l"].to_numpy()), atol=1e-6)  # and the same trees


def _prompt_text(pair, prompt, contexts, seed=4):
    from specdec_lib.experiments.shared_contexts import _prompt_seed

    s = _prompt_seed(seed, prompt)
    return _target_text(pair, prompt, contexts, 1.0, 1.0, s, torch.Generator().manual_seed(s))


def test_an_arm_drafts_the_same_trees_alone_and_in_lockstep_with_others(tiny_pair):
    """Arms are drafted in lockstep (one draft forward per level for all of them), each with its own
    generator: an arm's trees, and so its expected tokens, are those it gets when drafted alone."""
    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    arms = {"race": ("batch:3x2", "race"), "deep": ("chain:4", "iid"), "kary": ("kary:2x3", "without_replacement")}
    together = paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, 0.9, ["token", "erss"], contexts=4, seed=1,
                                                progress=False, verifiers_by_arm={"deep": ["token"], "kary": ["token"]})
    for name, arm in arms.items():
        alone = paired_tokens_at_shared_contexts(tiny_pair, prompts, {name: arm}, 0.9,
                                                 ["token", "erss"] if name == "race" else ["token"], contexts=4, seed=1,
                                                 progress=False)
        mine = together[together["arm"] == name]
        merged = mine.merge(alone, on=["prompt_id", "step", "view", "verifier"], suffixes=("_f", "_a"))
        assert len(merged) == len(mine) == len(alone) > 0
        assert (merged["nodes_f"] == merged["nodes_a"]).all()
        assert torch.allclose(torch.tensor(merged["expected_tokens_f"].to_numpy()),
                              torch.tensor(merged["expected_tokens_a"].to_numpy()), atol=1e-5), name


def test_views_and_verifiers_per_arm(tiny_pair):
    prompts = [_prompt([3, 9, 4], "writing-01")]
    arms = {"chain": ("chain:3", "iid"), "star": ("batch:3x1", "race")}
    frame = paired_tokens_at_shared_contexts(
        tiny_pair, prompts, arms, 1.0, ["token"], contexts=3, progress=False,
        views_by_arm={"chain": {1: lambda t: E.truncate_chain(t, 1), 3: lambda t: t}},
        verifiers_by_arm={"star": ["token", "erss"]})
    assert set(frame.query("arm == 'chain'")["view"]) == {1, 3} and set(frame.query("arm == 'star'")["view"]) == {"tree"}
    assert set(frame.query("arm == 'chain'")["verifier"]) == {"token"}
    assert set(frame.query("arm == 'star'")["verifier"]) == {"token", "erss"}
    for argument in ("views_by_arm", "verifiers_by_arm"):
        with pytest.raises(ValueError, match=f"{argument} names arms that are not drafted: \\['nope'\\]"):
            paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, contexts=2, progress=False,
                                             **{argument: {"nope": ["token"]}})
    with pytest.raises(ValueError, match=r"verifiers_by_arm\['star'\] must be a list"):
        paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, contexts=2, progress=False,
                                         verifiers_by_arm={"star": "erss"})
    with pytest.raises(ValueError, match=r"views_by_arm\['star'\] must be a mapping"):
        paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, contexts=2, progress=False,
                                         views_by_arm={"star": [lambda t: t]})
    # each view evaluated by the verifiers named for it only; a label no arm has is an error, not ignored
    only = paired_tokens_at_shared_contexts(
        tiny_pair, prompts, arms, 1.0, ["token", "block"], contexts=3, progress=False,
        views_by_arm={"chain": {1: lambda t: E.truncate_chain(t, 1), 3: lambda t: t}}, verifiers_by_view={1: ["block"]})
    assert set(only.query("arm == 'chain' and view == 1")["verifier"]) == {"block"}
    assert set(only.query("arm == 'chain' and view == 3")["verifier"]) == {"token", "block"}
    with pytest.raises(ValueError, match="verifiers_by_view names views that no arm has"):
        paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, contexts=2, progress=False,
                                         verifiers_by_view={"typo": ["token"]})


def test_matched_rows_index_names_each_row_s_prompt_and_step(tiny_pair):
    """``matched_rows(with_index=True)`` names every row's context, so a CI can resample the prompts of the rows."""
    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    P, Q = E.matched_rows(tiny_pair, prompts, 1.0, max_new_tokens=5, seed=2, progress=False)
    P2, Q2, index = E.matched_rows(tiny_pair, prompts, 1.0, max_new_tokens=5, seed=2, progress=False, with_index=True)
    assert torch.equal(P, P2) and torch.equal(Q, Q2) and len(index) == P.shape[0]
    assert list(index.columns) == ["prompt_id", "category", "step"]
    for pid, part in index.groupby("prompt_id"):
        assert part["step"].tolist() == list(range(len(part)))


def test_common_random_numbers_couple_the_arms_and_keep_each_arm_s_law():
    """With common_random_numbers every arm starts from one seed: two arms drafting one shape the same way draw
    the same trees, i.i.d. and without-replacement arms share each node's first child, the paired difference
    loses most of its tree-draw variance, and each arm's mean still matches its exact expectation over drafts."""
    target = ContextIndependentLM([0.4, 0.3, 0.2, 0.1])
    draft = ContextIndependentLM([0.1, 0.2, 0.3, 0.4])
    pair = E.Pair(target, draft, "toy", "context-free toy", context_free=True)
    prompts = [_prompt([1], f"toy-{i:02d}") for i in range(40)]
    arms = {"wr": ("kary:2x2", "without_replacement"), "iid": ("kary:2x2", "iid"), "iid again": ("kary:2x2", "iid")}

    def frame(crn):
        f = paired_tokens_at_shared_contexts(pair, prompts, arms, contexts=25, progress=False, common_random_numbers=crn)
        return f.pivot_table(index=["prompt_id", "step"], columns="arm", values="expected_tokens")

    coupled, independent = frame(True), frame(False)
    assert (coupled["iid"] == coupled["iid again"]).all() and not (independent["iid"] == independent["iid again"]).all()
    var = {name: (f["wr"] - f["iid"]).var() for name, f in [("coupled", coupled), ("independent", independent)]}
    assert var["coupled"] < 0.5 * var["independent"], var
    parents = resolve_shape("kary:2x2")
    for name, sampling in [("wr", "without_replacement"), ("iid", "iid")]:
        exact = sum(w * expected_tokens("token", t) for w, t in enumerate_drafts(target, draft, (1,), parents, sampling))
        est, se = coupled[name].mean(), coupled[name].std() / len(coupled) ** 0.5
        assert abs(est - exact) < 4 * se + 1e-9, (name, est, exact, se)
    with pytest.raises(ValueError, match="common_random_numbers"):
        paired_tokens_at_shared_contexts(pair, prompts[:1], arms, progress=False, common_random_numbers=1)


def test_copies_of_an_arm_are_independent_trees_of_its_law_and_copy_0_is_unchanged(tiny_pair):
    """``copies_by_arm`` drafts n trees per context for an arm, labelled draw 0..n-1: copy 0 is exactly the tree
    drafted with one copy (adding copies changes no tree), the other copies are fresh draws at the same contexts."""
    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    arms = {"chain": ("chain:3", "race"), "star": ("batch:3x1", "race")}
    one = paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, 1.0, ["token"], contexts=4, seed=3, progress=False)
    three = paired_tokens_at_shared_contexts(tiny_pair, prompts, arms, 1.0, ["token"], contexts=4, seed=3, progress=False,
                                             copies_by_arm={"chain": 3})
    assert sorted(set(three.query("arm == 'chain'")["draw"])) == [0, 1, 2]
    assert set(three.query("arm == 'star'")["draw"]) == {0} and set(one["draw"]) == {0}
    keys = ["arm", "prompt_id", "step", "view", "verifier"]
    merged = one.merge(three.query("draw == 0"), on=keys, suffixes=("_1", "_3"))
    assert len(merged) == len(one) > 0
    assert torch.allclose(torch.tensor(merged["expected_tokens_1"].to_numpy()),
                          torch.tensor(merged["expected_tokens_3"].to_numpy()), atol=1e-5)
    chains = three.query("arm == 'chain'").pivot_table(index=["prompt_id", "step"], columns="draw", values="expected_tokens")
    assert len(chains) == 8 and not (chains[0] == chains[1]).all() and not (chains[1] == chains[2]).all()


def test_copies_keep_the_arm_s_exact_expectation():
    """Context-free toy pair: every copy's per-context mean estimates the exact expectation over drafts."""
    target = ContextIndependentLM([0.4, 0.3, 0.2, 0.1])
    draft = ContextIndependentLM([0.1, 0.2, 0.3, 0.4])
    pair = E.Pair(target, draft, "toy", "context-free toy", context_free=True)
    prompts = [_prompt([1], f"toy-{i:02d}") for i in range(30)]
    frame = paired_tokens_at_shared_contexts(pair, prompts, {"a": ("binary:2", "iid")}, contexts=20, progress=False,
                                             copies_by_arm={"a": 2})
    exact = sum(w * expected_tokens("token", t)
                for w, t in enumerate_drafts(target, draft, (1,), resolve_shape("binary:2"), "iid"))
    for draw, part in frame.groupby("draw"):
        est, se = part["expected_tokens"].mean(), part["expected_tokens"].std() / len(part) ** 0.5
        assert abs(est - exact) < 4 * se + 1e-9, (draw, est, exact, se)
    wide = frame.pivot_table(index=["prompt_id", "step"], columns="draw", values="expected_tokens")
    assert abs(wide.corr().loc[0, 1]) < 0.2  # independent draws at the same context (the rows do not vary here)


@pytest.mark.parametrize("copies,needle", [({"nope": 2}, r"copies_by_arm names arms that are not drafted: \['nope'\]"),
                                           ({"a": 0}, r"copies_by_arm\['a'\] must be an int >= 1"),
                                           ({"a": 2.0}, r"copies_by_arm\['a'\] must be an int >= 1"),
                                           ({"a": True}, r"copies_by_arm\['a'\] must be an int >= 1"),
                                           ([("a", 2)], "copies_by_arm must be a mapping")])
def test_bad_copies_are_value_errors(copies, needle):
    with pytest.raises(ValueError, match=needle):
        paired_tokens_at_shared_contexts(E.toy_pair(), [_prompt([1])], {"a": ("chain:3", "iid")}, progress=False,
                                         copies_by_arm=copies)


def test_contexts_drafted_together_give_the_trees_drafted_one_at_a_time(tiny_pair):
    """``contexts_per_forward`` = n: each context's trees come from a generator of their own, so they are the
    same for every n (here 1, 3 and all 7 contexts, with the deeper arm limited to 4 contexts and drafted twice, so
    a block's contexts finish drafting at different levels) up to the rounding of batched forwards; the default
    (None) keeps each arm's generator running through the contexts, so its trees differ from these while having
    the same law."""
    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    arms = {"chain": ("chain:4", "race"), "tree": ("binary:2", "without_replacement")}
    keys = ["prompt_id", "step", "view", "verifier", "draw"]
    run = lambda n: paired_tokens_at_shared_contexts(
        tiny_pair, prompts, arms, 0.9, ["token"], contexts=7, seed=4, progress=False, contexts_by_arm={"chain": 4},
        copies_by_arm={"chain": 2}, contexts_per_forward=n).sort_values(keys).reset_index(drop=True)
    one = run(1)
    assert len(one) == 2 * (4 * 2 + 7) and sorted(set(one.query("arm == 'chain'")["step"])) == [0, 1, 2, 3]
    for n in (3, 7):
        together = run(n)
        assert (together[keys + ["arm", "nodes"]] == one[keys + ["arm", "nodes"]]).all().all()
        assert torch.allclose(torch.tensor(together["expected_tokens"].to_numpy()),
                              torch.tensor(one["expected_tokens"].to_numpy()), atol=1e-5), n
    running = run(None).sort_values(keys).reset_index(drop=True)
    assert not torch.allclose(torch.tensor(running["expected_tokens"].to_numpy()),
                              torch.tensor(one["expected_tokens"].to_numpy()), atol=1e-5)


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "4"])
def test_bad_contexts_per_forward_are_value_errors(n):
    with pytest.raises(ValueError, match=r"contexts_per_forward must be None or an int >= 1"):
        paired_tokens_at_shared_contexts(E.toy_pair(), [_prompt([1])], {"a": ("chain:3", "iid")}, contexts=4,
                                         progress=False, contexts_per_forward=n)


@pytest.mark.parametrize("pair_name", ["tiny", "toy"])
def test_an_arm_limited_to_fewer_contexts_drafts_the_trees_it_drafts_alone_there(tiny_pair, pair_name):
    """``contexts_by_arm``: an arm limited to n contexts has exactly the trees of a call with ``contexts`` = n, and
    stops there; the other arms go on to ``contexts`` with the trees they draft without it (hf lockstep and toy)."""
    pair = tiny_pair if pair_name == "tiny" else E.toy_pair()
    prompts = [_prompt([3, 5, 4], "writing-01"), _prompt([7, 1, 3, 2], "qa-01")]
    arms = {"chain": ("chain:3", "race"), "star": ("batch:3x1", "race")}
    keys = ["prompt_id", "step", "view", "verifier"]
    run = lambda chosen, n, **kw: paired_tokens_at_shared_contexts(pair, prompts, {a: arms[a] for a in chosen}, 1.0,
                                                                   ["token"], contexts=n, seed=3, progress=False, **kw)
    limited = run(arms, 6, contexts_by_arm={"star": 2})
    assert sorted(set(limited.query("arm == 'star'")["step"])) == [0, 1]
    assert sorted(set(limited.query("arm == 'chain'")["step"])) == list(range(6))
    for arm, n in (("star", 2), ("chain", 6)):
        alone = run([arm], n)
        merged = alone.merge(limited.query("arm == @arm"), on=keys, suffixes=("_alone", "_limited"))
        assert len(merged) == len(alone) == len(limited.query("arm == @arm")) > 0
        assert torch.allclose(torch.tensor(merged["expected_tokens_alone"].to_numpy()),
                              torch.tensor(merged["expected_tokens_limited"].to_numpy()), atol=1e-5)


@pytest.mark.parametrize("limit,needle", [({"nope": 2}, r"contexts_by_arm names arms that are not drafted: \['nope'\]"),
                                          ({"a": 0}, r"contexts_by_arm\['a'\] must be an int in 1..contexts \(4\)"),
                                          ({"a": 5}, r"contexts_by_arm\['a'\] must be an int in 1..contexts \(4\)"),
                                          ({"a": 2.0}, r"contexts_by_arm\['a'\] must be an int in 1..contexts"),
                                          ([("a", 2)], "contexts_by_arm must be a mapping")])
def test_bad_contexts_by_arm_are_value_errors(limit, needle):
    with pytest.raises(ValueError, match=needle):
        paired_tokens_at_shared_contexts(E.toy_pair(), [_prompt([1])], {"a": ("chain:3", "iid")}, contexts=4,
                                         progress=False, contexts_by_arm=limit)


@pytest.mark.parametrize("pair_name,per_forward", [("tiny", 3), ("tiny", None), ("toy", None)])
def test_extra_copies_limited_to_the_first_contexts_are_the_copies_drafted_there(tiny_pair, pair_name, per_forward):
    """``copy_contexts_by_arm``: an arm's copies 1, 2, ... are drafted at its first n contexts only; copy 0 keeps
    every context, and every tree drafted is the one the call without the limit drafts there (each copy has a
    generator of its own, so a shorter copy changes no other copy's draws)."""
    pair = tiny_pair if pair_name == "tiny" else E.toy_pair()
    prompts = [_prompt([3, 5, 4], "writing-01"), _prompt([7, 1, 3, 2], "qa-01")]
    arms = {"chain": ("chain:3", "race"), "star": ("batch:3x1", "race")}
    keys = ["arm", "prompt_id", "step", "view", "verifier", "draw"]
    run = lambda **kw: paired_tokens_at_shared_contexts(pair, prompts, arms, 1.0, ["token"], contexts=6, seed=3,
                                                        progress=False, copies_by_arm={"chain": 3},
                                                        contexts_per_forward=per_forward, **kw)
    full, limited = run(), run(copy_contexts_by_arm={"chain": 2})
    chains = limited.query("arm == 'chain'")
    assert sorted(set(chains.query("draw == 0")["step"])) == list(range(6))
    assert sorted(set(chains.query("draw > 0")["step"])) == [0, 1] and set(chains["draw"]) == {0, 1, 2}
    assert len(limited.query("arm == 'star'")) == len(full.query("arm == 'star'"))
    merged = limited.merge(full, on=keys, suffixes=("_limited", "_full"))
    assert len(merged) == len(limited) == len(full) - 2 * 2 * 4  # 2 prompts x 2 copies x 4 contexts fewer
    assert torch.allclose(torch.tensor(merged["expected_tokens_limited"].to_numpy()),
                          torch.tensor(merged["expected_tokens_full"].to_numpy()), atol=1e-5)


@pytest.mark.parametrize("limit,needle", [({"nope": 2}, r"copy_contexts_by_arm names arms that are not drafted"),
                                          ({"a": 0}, r"copy_contexts_by_arm\['a'\] must be an int >= 1"),
                                          ({"a": 2.0}, r"copy_contexts_by_arm\['a'\] must be an int >= 1"),
                                          ({"a": 3}, r"copy_contexts_by_arm\['a'\] = 3 exceeds the arm's contexts \(2\)"),
                                          ([("a", 2)], "copy_contexts_by_arm must be a mapping")])
def test_bad_copy_contexts_are_value_errors(limit, needle):
    with pytest.raises(ValueError, match=needle):
        paired_tokens_at_shared_contexts(E.toy_pair(), [_prompt([1])], {"a": ("chain:3", "iid")}, contexts=4,
                                         progress=False, contexts_by_arm={"a": 2}, copy_contexts_by_arm=limit)


def test_model_gap_frame_puts_each_contexts_vector_beside_its_trees(tiny_pair):
    """`model_gap_frame`: one row per (context, tree) with the tree's exact expected tokens and the positional
    vector of the same context. For a root with one child F(T) = 1 + p1 holds at every context exactly (the
    token_rb value integrates the child's draw out), so the model gap is zero; a chain of three is measured at
    the same contexts and keeps the same vector."""
    from specdec_lib import theory
    from specdec_lib.experiments.shared_contexts import model_gap_frame, rows_at_shared_contexts

    prompts = [_prompt([3, 9, 4], "writing-01"), _prompt([7, 1, 30, 2], "qa-01")]
    trees = {2: [-1, 0], 3: [-1, 0, 1]}
    frame = model_gap_frame(tiny_pair, prompts, trees, 0.8, 3, mc_samples=4, contexts=4, seed=2, progress=False)
    assert len(frame) == 2 * 4 * 2 and set(frame["size"]) == {2, 3}
    assert {"prompt_id", "category", "step", "expected_tokens", "p1", "p2", "p3"} <= set(frame.columns)
    P, Q = rows_at_shared_contexts(tiny_pair, prompts, 0.8, contexts=4, seed=2)
    vectors = theory.acceptance_by_scheme(P, Q, 3, {"w": "without_replacement"}, 4)["w"]
    one = frame.query("size == 2").sort_values(["prompt_id", "step"])
    expected = pd.DataFrame(vectors, columns=["p1", "p2", "p3"]).assign(
        prompt_id=np.repeat(["writing-01", "qa-01"], 4), step=np.tile(range(4), 2)).sort_values(["prompt_id", "step"])
    assert np.allclose(one[["p1", "p2", "p3"]].to_numpy(), expected[["p1", "p2", "p3"]].to_numpy())
    assert np.allclose(one["expected_tokens"], 1 + one["p1"], atol=1e-5)
    three = frame.query("size == 3").sort_values(["prompt_id", "step"])
    assert np.allclose(three[["p1", "p2", "p3"]].to_numpy(), one[["p1", "p2", "p3"]].to_numpy())
    gap = V.ModelGapCheck("root and one child", lambda v: theory.expected_tokens_positional([-1, 0], v),
                          ["p1", "p2", "p3"], {"size": 2}, direction="=", margin=0.01).evaluate(frame)
    assert abs(gap.estimate) < 1e-5 and gap.verdict == "reproduced"
    with pytest.raises(ValueError, match="trees"):
        model_gap_frame(tiny_pair, prompts, {}, 0.8, 3, progress=False)
    with pytest.raises(ValueError, match="trees"):
        model_gap_frame(tiny_pair, prompts, {1: [-1, 0], "1": [-1, 0]}, 0.8, 3, progress=False)
    with pytest.raises(ValueError, match="max_children"):
        model_gap_frame(tiny_pair, prompts, trees, 0.8, 0, progress=False)
