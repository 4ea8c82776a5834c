"""`node_rao_blackwell`: token-level verification's expected tokens with each node's children draw integrated
out has, at every context, the same expectation over the drafted trees as the verifier's exact value, and less
variance. Proved by enumerating every tree a shape can be drafted as on toy pairs (`exact.enumerate_drafts`),
where every node acceptance is exact; the broken control integrates the draw with the wrong scheme."""

from __future__ import annotations

import math

import pytest
import torch

from specdec_lib import exact, node_rao_blackwell as NRB
from specdec_lib.drafting import context_draft_fn, context_target_fn, draw_tree
from specdec_lib.models.synthetic import random_markov_pair
from specdec_lib.verifiers import expected_tokens

SHAPE = [-1, 0, 0, 1, 1, 2, 3]  # two root children, a branching first child, a chain under it


def _moments(values, probs):
    mean = sum(p * v for p, v in zip(probs, values))
    return mean, sum(p * (v - mean) ** 2 for p, v in zip(probs, values))


@pytest.mark.parametrize("sampling", ["iid", "without_replacement"])
@pytest.mark.parametrize("seed", [0, 3])
def test_same_expectation_as_the_verifier_and_less_variance(sampling, seed):
    target, draft = random_markov_pair(4, 0.6, seed, eos=False)
    trees = exact.enumerate_drafts(target, draft, (1,), SHAPE, sampling)
    probs = [p for p, _ in trees]
    assert math.isclose(sum(probs), 1.0, abs_tol=1e-12)
    exact_values = [expected_tokens("token", t) for _, t in trees]
    rb_values = [NRB.rao_blackwell_tokens(t) for _, t in trees]
    mean_exact, var_exact = _moments(exact_values, probs)
    mean_rb, var_rb = _moments(rb_values, probs)
    assert mean_rb == pytest.approx(mean_exact, abs=1e-12)
    assert mean_exact == pytest.approx(exact.expected_step_tokens("token", target, draft, (1,), SHAPE, sampling), abs=1e-12)
    assert var_rb < 0.8 * var_exact


def test_control_the_wrong_scheme_breaks_the_expectation():
    """Integrating each node's draw as if its children were i.i.d. when they were drawn without replacement
    (a different acceptance law) must miss the verifier's expectation."""
    target, draft = random_markov_pair(4, 0.6, 0, eos=False)
    trees = exact.enumerate_drafts(target, draft, (1,), SHAPE, "without_replacement")
    right = sum(p * expected_tokens("token", t) for p, t in trees)
    wrong = 0.0
    for p, t in trees:
        reach = NRB.path_reach(t)
        wrong += p * (1.0 + sum(float(reach[u]) * NRB.expected_node_acceptance(t.target_probs[u], t.draft_probs[u],
                                                                               len(kids), "iid")
                                for u, kids in enumerate(t.children) if kids))
    assert abs(wrong - right) > 1e-3


def test_tokens_are_one_plus_reach_times_node_acceptance_on_every_tree():
    target, draft = random_markov_pair(5, 0.5, 1, eos=False)
    for _, tree in exact.enumerate_drafts(target, draft, (2,), [-1, 0, 0, 1], "iid")[:40]:
        reach = NRB.path_reach(tree)
        acc = NRB.node_acceptance(tree, reach)
        assert float(reach[0]) == pytest.approx(1.0, abs=1e-12)
        assert 1.0 + sum(float(reach[u]) * a for u, a in acc.items()) == pytest.approx(expected_tokens("token", tree), abs=1e-12)


def test_race_children_are_integrated_as_sampling_without_replacement_and_topk_is_exact():
    target, draft = random_markov_pair(4, 0.6, 2, eos=False)
    p, q = target.probs((1,)).double(), draft.probs((1,)).double()
    assert NRB.expected_node_acceptance(p, q, 2, "race") == NRB.expected_node_acceptance(p, q, 2, "without_replacement")
    for _, tree in exact.enumerate_drafts(target, draft, (1,), SHAPE, "topk"):
        assert NRB.rao_blackwell_tokens(tree) == pytest.approx(expected_tokens("token", tree), abs=1e-12)


def test_bad_arguments_are_value_errors():
    target, draft = random_markov_pair(4, 0.6, 0, eos=False)
    p, q = target.probs((1,)).double(), draft.probs((1,)).double()
    with pytest.raises(ValueError, match="k must"):
        NRB.expected_node_acceptance(p, q, 0, "iid")
    with pytest.raises(ValueError, match="sampling"):
        NRB.expected_node_acceptance(p, q, 2, "topk")


def test_paired_expected_tokens_evaluates_token_rb_beside_the_verifier():
    from specdec_lib.experiments import TreeRecord, paired_expected_tokens

    target, draft = random_markov_pair(4, 0.6, 1, eos=False)
    trees = exact.enumerate_drafts(target, draft, (1,), SHAPE, "without_replacement")
    records = [TreeRecord(f"qa-{i:05d}", "qa", 0, tree, 0) for i, (_, tree) in enumerate(trees)]
    frame = paired_expected_tokens(records, ["token", "token_rb"]).pivot_table(index="prompt_id", columns="verifier",
                                                                               values="expected_tokens")
    probs = torch.tensor([p for p, _ in trees], dtype=torch.float64)
    tok, rb = (torch.tensor(frame[v].to_numpy()) for v in ("token", "token_rb"))
    assert float((probs * rb).sum()) == pytest.approx(float((probs * tok).sum()), abs=1e-12)
    assert float(rb[0]) == pytest.approx(NRB.rao_blackwell_tokens(trees[0][1]), abs=1e-12)


def _race_draws(seed: int, n: int):
    target, draft = random_markov_pair(4, 0.6, seed, eos=False)
    generator = torch.Generator().manual_seed(seed)
    draft_fn, target_fn = context_draft_fn(draft.probs, (1,)), context_target_fn(target.probs, (1,))
    return [draw_tree(SHAPE, 1, draft_fn, "race", generator).scored_by(target_fn) for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 3])
def test_erss_rb_has_the_verifiers_mean_and_less_variance(seed):
    """ERSS on race-drafted trees: per tree, 1 + sum_u R_u Abar_u (every node's race integrated out; exact at this
    vocabulary) against the verifier's exact value given the races. Races are continuous, so trees are sampled:
    the paired difference has mean 0 within 4 standard errors (measured: 65% less variance). The control must
    fail: Abar computed with the draft's row in place of the target's (the printed Algorithm 5's race winner
    under Q, which always descends) misses the mean by far more."""
    trees = _race_draws(seed, 1500)
    exact_values = torch.tensor([expected_tokens("erss", t) for t in trees], dtype=torch.float64)
    rb = torch.tensor([NRB.rao_blackwell_erss(t) for t in trees], dtype=torch.float64)
    diff = rb - exact_values
    se = float(diff.std()) / math.sqrt(len(trees))
    assert abs(float(diff.mean())) < 4 * se
    assert float(rb.var()) < 0.8 * float(exact_values.var())
    wrong = torch.tensor([1.0 + sum(float(NRB.path_reach(t, "erss")[u]) * NRB.expected_race_acceptance(
        t.draft_probs[u], t.draft_probs[u], len(kids)) for u, kids in enumerate(t.children) if kids)
        for t in trees], dtype=torch.float64)
    wrong_diff = wrong - exact_values
    assert abs(float(wrong_diff.mean())) > 6 * float(wrong_diff.std()) / math.sqrt(len(trees))


def test_erss_rb_needs_a_race_tree_and_an_estimator_name():
    from specdec_lib.experiments import TreeRecord, paired_expected_tokens

    target, draft = random_markov_pair(4, 0.6, 1, eos=False)
    tree = exact.enumerate_drafts(target, draft, (1,), SHAPE, "without_replacement")[0][1]
    with pytest.raises(ValueError, match="race"):
        NRB.rao_blackwell_erss(tree)
    with pytest.raises(ValueError, match="verifier"):
        NRB.path_reach(tree, "spectr")
    with pytest.raises(ValueError, match="k must"):
        NRB.expected_race_acceptance(tree.target_probs[0], tree.draft_probs[0], 0)
    races = _race_draws(1, 3)
    frame = paired_expected_tokens([TreeRecord("qa-00000", "qa", 0, t, i) for i, t in enumerate(races)],
                                   ["erss", "erss_rb"])
    assert set(frame["verifier"]) == {"erss", "erss_rb"}
    rb = frame.query("verifier == 'erss_rb'")["expected_tokens"].to_numpy()
    assert rb[0] == pytest.approx(NRB.rao_blackwell_erss(races[0]), abs=1e-12)
