"""Losslessness on chains with i.i.d. drafts of every registered verifier that declares ``("chain", "iid")``
(``Verifier.accepts``; no table of names) by exact enumeration over many toy pairs and chain lengths, and
of the chain verifiers (token, asps, block, greedy_block) by chi-square tests of their samplers, with
deliberately broken variants that must fail the same tests; relations between verifiers, edge cases,
and the harness (`specdec_lib.exact`) and toy LMs themselves.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

import pytest
import torch

from specdec_lib import exact
from specdec_lib.models.synthetic import (ContextIndependentLM, MarkovLM, TabularLM, random_markov_pair,
                                          tempered)
from specdec_lib.tree import SAMPLING_MODES, DraftTree, chain_parents
from specdec_lib.verifiers import VERIFIERS, declared_pairs, exact_law, verify
from specdec_lib.verifiers import block as block_mod
from specdec_lib.verifiers import greedy_block as greedy_mod
from specdec_lib.verifiers.base import Outcome, Verifier, accepted_pairs, sample_categorical

TOL = 1e-9
PREFIX = (0,)


def chain_iid(registry) -> tuple[list[str], list[str]]:
    """(lossless in one step, lossless across steps only): the verifiers declaring ``("chain", "iid")``,
    split by whether they carry state from step to step (``next_state``)."""
    names = [name for name, kind, s in declared_pairs(registry) if (kind, s) == ("chain", "iid")]
    return ([n for n in names if registry[n].next_state is None],
            [n for n in names if registry[n].next_state is not None])


ONE_STEP, ACROSS_STEPS = chain_iid(VERIFIERS)

# (V, mismatch, seed, temperature, zero_prob, max gamma): random Markov pairs with EOS (= V-1).
MODELS = [
    (3, 0.6, 0, 1.0, 0.0, 5),
    (3, 1.0, 1, 0.5, 0.3, 5),
    (4, 0.4, 2, 1.0, 0.0, 4),
    (5, 0.8, 3, 2.0, 0.2, 3),
    (6, 0.7, 4, 1.0, 0.0, 2),
]
CASES = [(m, g) for m in MODELS for g in range(1, m[-1] + 1)]
# a pair where every broken variant below is far from lossless (max error > 0.015)
CONTROL_MODEL = (3, 0.7, 10, 1.0, 0.0)


def _multistep_affordable(vocab, gamma):
    """Multi-step enumeration grows with the number of step histories: V = 3 up to gamma = 5,
    larger vocabularies up to gamma = 2 (keeps this file well under a minute)."""
    return vocab == 3 or gamma <= 2


@lru_cache(maxsize=None)
def pair(vocab, mismatch, seed, temperature, zero_prob):
    target, draft = random_markov_pair(vocab, mismatch, seed, eos=True, zero_prob=zero_prob)
    return tempered(target, temperature), tempered(draft, temperature)


def _id(case):
    (v, m, s, t, z, _), g = case
    return f"V{v}-mis{m}-s{s}-T{t}-z{z}-g{g}"


# ----- broken variants (each must fail) -----------------------------------------------------------

def _block_without_final_step_law(tree, state=None):
    """Appendix-A sketch as printed: the loop never reaches i = gamma (h_gamma = 0)."""
    P, Q, x = block_mod.chain_inputs(tree)
    h, W = block_mod.tau_law(P, Q, block_mod.log_block_weights(P, Q, x))
    h[-1] = 0.0
    g = Q.shape[0]
    mass = W.sum(1, keepdim=True)
    rows = torch.where(mass > 0, W / mass.clamp_min(1e-300), P[:g])
    return block_mod.tau_probs(h)[:, None] * torch.cat([rows, P[g:]])


def _asps_weight_without_division_law(tree, state=None):
    """ASpS with the rescaling factor w_k = r(x_k) instead of r(x_k) / Q[k][x_k] (renormalised)."""
    P, Q, x = block_mod.chain_inputs(tree)
    L = Q.shape[0]
    d = torch.exp(block_mod.log_block_weights(P, Q, x))
    idx = torch.arange(L)
    excess = d[:L, None] * P[:L] - Q
    c1 = (-excess).clamp_min(0)
    s = c1.sum(1)
    w = torch.where(s > 0, c1[idx, x] / s.clamp_min(1e-300), torch.ones_like(s))
    rows = torch.flip(torch.cumprod(torch.flip(w, [0]), 0), [0])[:, None] * excess.clamp_min(0)
    rows[idx, x] = 0.0
    law = torch.cat([rows, d[L] * P[L:]])
    return law / law.sum()


def _token_resampling_target_law(tree, state=None):
    """Token verification that draws the correction from P[tau] instead of the residual."""
    good = VERIFIERS["token"].law(tree, None)
    P, _, _ = block_mod.chain_inputs(tree)
    return good.sum(1, keepdim=True) * P


def _sampler_from_law(law_fn):
    def sample(tree, generator, state=None):
        table = law_fn(tree, state)
        j, y = divmod(sample_categorical(table.flatten(), generator), table.shape[1])
        return Outcome(path=tuple(range(1, j + 1)), token=y)
    return sample


def _greedy_unmodified_sample(tree, generator, state=None):
    v = greedy_mod.sample(tree, generator, None)
    return Outcome(v.path, v.token)


BROKEN = {
    "token": Verifier("token_resample_target", _sampler_from_law(_token_resampling_target_law),
                      _token_resampling_target_law, block_mod.check),
    "asps": Verifier("asps_w_without_division", _sampler_from_law(_asps_weight_without_division_law),
                     _asps_weight_without_division_law, block_mod.check),
    "block": Verifier("block_no_final_step", _sampler_from_law(_block_without_final_step_law),
                      _block_without_final_step_law, block_mod.check),
    # Algorithm 4 alone, with no distribution modification of the following steps
    "greedy_block": Verifier("greedy_block_unmodified", _greedy_unmodified_sample,
                             lambda tree, state=None: greedy_mod.law(tree, None), block_mod.check),
}


def _law(name_or_verifier, target, draft, g, multistep):
    if multistep:
        return exact.multistep_output_law(name_or_verifier, target, draft, PREFIX, chain_parents(g),
                                          "iid", g + 1)
    return exact.step_output_law(name_or_verifier, target, draft, PREFIX, chain_parents(g), "iid", g + 1)


# ----- exact losslessness -------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_exact_law_equals_target(case):
    (v, m, s, t, z, _), g = case
    target, draft = pair(v, m, s, t, z)
    want = exact.target_law(target, PREFIX, g + 1)
    assert abs(sum(want.values()) - 1) < 1e-12
    for name in ONE_STEP:
        assert exact.max_abs_diff(_law(name, target, draft, g, False), want) < TOL, name
    # greedy block verification is lossless only across steps (Block Verification Alg. 6)
    if _multistep_affordable(v, g):
        for name in ACROSS_STEPS:
            assert exact.max_abs_diff(_law(name, target, draft, g, True), want) < TOL, name
    if v == 3 and g <= 3:  # the other verifiers stay lossless when composed over steps
        for name in ONE_STEP:
            assert exact.max_abs_diff(_law(name, target, draft, g, True), want) < TOL, name


def _redrawing_the_extra_token(name):
    """``name`` with every node's extra token redrawn from the node's target row (mass kept per node)."""
    v = VERIFIERS[name]

    def law(tree, state=None):
        P = tree.target_probs.to(torch.float64)
        return v.law(tree, state).sum(1, keepdim=True) * (P / P.sum(1, keepdim=True))
    return Verifier(f"{name}_redraw", _sampler_from_law(law), law, v.check, next_state=v.next_state)


@pytest.mark.parametrize("name", ONE_STEP + ACROSS_STEPS)
def test_every_declared_chain_verifier_has_a_failing_control(name):
    """The exact check above can fail for each verifier it proves: redrawing the extra token from the
    target row (the residual dropped) is far from lossless."""
    target, draft = pair(*CONTROL_MODEL)
    g = 3
    want = exact.target_law(target, PREFIX, g + 1)
    assert exact.max_abs_diff(_law(_redrawing_the_extra_token(name), target, draft, g, name in ACROSS_STEPS),
                              want) > 1e-3


def test_a_new_declaration_is_picked_up():
    """A registered verifier needs no edit here: declaring ``("chain", "iid")`` makes it a case."""
    block = VERIFIERS["block"]
    one = Verifier("dummy", block.sample, block.law, block.check, accepts=accepted_pairs(("chain",), ("iid",)),
                   lossless=True)
    stateful = Verifier("dummy_state", block.sample, block.law, block.check, next_state=lambda *a: None,
                        accepts=accepted_pairs(("chain",), SAMPLING_MODES), lossless=True)
    chain_only_topk = Verifier("dummy_topk", block.sample, block.law, block.check,
                               accepts=accepted_pairs(("chain",), ("topk",)), lossless=True)
    got = chain_iid({**VERIFIERS, "dummy": one, "dummy_state": stateful, "dummy_topk": chain_only_topk})
    assert got == (sorted(ONE_STEP + ["dummy"]), sorted(ACROSS_STEPS + ["dummy_state"]))


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_variants_fail_exact_law(name):
    target, draft = pair(*CONTROL_MODEL)
    g = 3
    want = exact.target_law(target, PREFIX, g + 1)
    multistep = name == "greedy_block"
    assert exact.max_abs_diff(_law(name, target, draft, g, multistep), want) < TOL
    assert exact.max_abs_diff(_law(BROKEN[name], target, draft, g, multistep), want) > 1e-3


def test_greedy_block_single_step_is_not_lossless():
    """Used alone (the output continued by the unmodified target) Alg. 4 is lossy (docs/methods/block.md §2.4)."""
    target, draft = pair(*CONTROL_MODEL)
    want = exact.target_law(target, PREFIX, 4)
    assert exact.max_abs_diff(_law("greedy_block", target, draft, 3, False), want) > 1e-3


# ----- sampling paths: chi-square against the exact law --------------------------------------------

CHI_N = 800


@pytest.mark.parametrize("name", list(BROKEN))
def test_sampler_matches_exact_law_and_broken_fails(name):
    target, draft = pair(*CONTROL_MODEL)
    g, horizon = 2, 3
    want = exact.target_law(target, PREFIX, horizon)
    counter = exact.sample_multistep_counts if name == "greedy_block" else exact.sample_output_counts
    settings = exact.SamplerSettings("iid", horizon, CHI_N, seed=1)
    good = counter(name, target, draft, PREFIX, chain_parents(g), settings)
    bad = counter(BROKEN[name], target, draft, PREFIX, chain_parents(g), settings)
    assert sum(good.values()) == CHI_N
    assert exact.chi_square_pvalue(good, want) > 1e-3
    assert exact.chi_square_pvalue(bad, want) < 1e-3


def test_samplers_are_deterministic_given_the_seed():
    target, draft = pair(4, 0.4, 2, 1.0, 0.0)
    drafts = exact.enumerate_drafts(target, draft, PREFIX, chain_parents(3))
    for _, tree in drafts[:5]:
        for name in ("token", "asps", "block", "greedy_block"):
            a = [verify(name, tree, torch.Generator().manual_seed(s)) for s in range(4)]
            b = [verify(name, tree, torch.Generator().manual_seed(s)) for s in range(4)]
            assert [(x.path, x.token) for x in a] == [(x.path, x.token) for x in b]


# ----- relations between verifiers ----------------------------------------------------------------

def _per_draft_expectations(target, draft, g, names):
    out = {n: [] for n in names}
    for p, tree in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(g)):
        for n in names:
            law = exact_law(n, tree)
            depth = torch.arange(g + 1, dtype=torch.float64)
            out[n].append((p, float(((depth + 1) * law.sum(1)).sum())))
    return out


@pytest.mark.parametrize("model", [(3, 0.6, 0, 1.0, 0.0), (4, 1.0, 5, 1.0, 0.0), (5, 0.5, 6, 1.5, 0.0)])
def test_expected_tokens_ordering_on_average_not_per_draft(model):
    target, draft = pair(*model)
    names = ("token", "asps", "block", "greedy_block")
    some_draft_asps_below_token = some_draft_block_below_token = False
    for g in (2, 3):
        per = _per_draft_expectations(target, draft, g, names)
        mean = {n: sum(p * e for p, e in per[n]) for n in names}
        assert mean["asps"] >= mean["token"] - 1e-12        # ASpS Thm 5.6
        assert mean["block"] >= mean["asps"] - 1e-12        # Block Verification Thm 2 (optimal)
        assert mean["block"] >= mean["token"] - 1e-12
        assert mean["greedy_block"] >= mean["block"] - 1e-12  # Thm 3, first iteration
        some_draft_asps_below_token |= any(a[1] < t[1] - 1e-9 for a, t in zip(per["asps"], per["token"]))
        some_draft_block_below_token |= any(b[1] < t[1] - 1e-9 for b, t in zip(per["block"], per["token"]))
    # the orderings hold in expectation over drafts, not draft by draft
    assert some_draft_asps_below_token and some_draft_block_below_token


@pytest.mark.parametrize("model", [(3, 0.6, 0, 1.0, 0.0), (6, 0.9, 7, 1.0, 0.2)])
def test_gamma_one_asps_and_block_equal_token(model):
    target, draft = pair(*model)
    for _, tree in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(1)):
        tok = exact_law("token", tree)
        assert torch.allclose(exact_law("asps", tree), tok, atol=1e-15, rtol=0)
        assert torch.allclose(exact_law("block", tree), tok, atol=1e-15, rtol=0)


def test_temperature_zero_block_equals_token():
    for seed in range(3):
        target, draft = pair(4, 0.7, seed, 0.0, 0.0)
        drafts = exact.enumerate_drafts(target, draft, PREFIX, chain_parents(3))
        assert len(drafts) == 1  # one-hot draft rows: one possible draft
        for _, tree in drafts:
            assert torch.allclose(exact_law("block", tree), exact_law("token", tree), atol=1e-15, rtol=0)


def test_block_lemma3_and_greedy_lemma9():
    """P(tau >= i | X^i) = p_i(X^i) for block (Lemma 3); P(X^l = x^l, tau >= l) = min(M_b, M_s)(x^l)
    for greedy block in its first iteration (Lemma 9)."""
    target, draft = pair(3, 0.8, 8, 1.0, 0.0)
    g = 3
    drafts = exact.enumerate_drafts(target, draft, PREFIX, chain_parents(g))
    for level in range(1, g + 1):
        mass_blk, mass_greedy, prob = Counter(), Counter(), Counter()
        for p, tree in drafts:
            key = tuple(tree.tokens[1:level + 1].tolist())
            prob[key] += p
            mass_blk[key] += p * float(exact_law("block", tree)[level:].sum())
            mass_greedy[key] += p * float(exact_law("greedy_block", tree)[level:].sum())
        for key, p in prob.items():
            ctx = PREFIX + key
            joint_t = math.prod(float(target.probs(ctx[:i + 1])[key[i]]) for i in range(level))
            joint_d = math.prod(float(draft.probs(ctx[:i + 1])[key[i]]) for i in range(level))
            assert abs(joint_d - p) < 1e-12
            P, Q, x = block_mod.chain_inputs(_chain_tree(target, draft, key))
            p_level = math.exp(float(block_mod.log_block_weights(P, Q, x)[-1]))
            assert abs(mass_blk[key] / p - p_level) < 1e-12
            assert abs(mass_greedy[key] - min(joint_t, joint_d)) < 1e-12


def _chain_tree(target, draft, tokens):
    return next(tree for _, tree in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(len(tokens)))
                if tuple(tree.tokens[1:].tolist()) == tuple(tokens))


def test_greedy_state_threads_through_steps():
    """The state is the pending modifications, oldest first; it empties once their horizons pass."""
    target, draft = pair(3, 0.6, 0, 1.0, 0.0)
    g = 4
    tree = next(t for _, t in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(g))
                if float(exact_law("greedy_block", t)[0].sum()) > 0)
    state = greedy_mod.next_state(tree, None, (), 0)  # tau = 0: horizon gamma - 1
    assert isinstance(state, greedy_mod.GreedyBlockState)
    assert [m.remaining for m in state.pending] == [g - 1]
    assert greedy_mod.next_state(tree, None, tuple(range(1, g + 1)), 0) is None  # all accepted
    with pytest.raises(ValueError, match="GreedyBlockState"):
        greedy_mod.law(tree, state=("not", "a", "state"))


# ----- edge cases ---------------------------------------------------------------------------------

ALL = ("token", "asps", "block", "greedy_block")


def test_identical_models_accept_everything():
    target, _ = pair(4, 0.0, 3, 1.0, 0.0)
    for g in (1, 3):
        for _, tree in exact.enumerate_drafts(target, target, PREFIX, chain_parents(g)):
            for name in ALL:
                law = exact_law(name, tree)
                assert abs(float(law[g].sum()) - 1.0) < 1e-12, name
                assert torch.allclose(law[g], tree.target_probs[g].double(), atol=1e-12)


def test_disjoint_supports_accept_nothing_and_emit_from_target():
    target = ContextIndependentLM([0.5, 0.5, 0.0, 0.0])
    draft = ContextIndependentLM([0.0, 0.0, 0.25, 0.75])
    for g in (1, 3):
        for _, tree in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(g)):
            for name in ALL:
                law = exact_law(name, tree)
                assert torch.allclose(law[0], torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)), name
                assert float(law[1:].abs().sum()) == 0.0


def _hand_chain(tokens, q_rows, p_rows):
    return DraftTree(torch.tensor(tokens), torch.tensor(chain_parents(len(tokens) - 1)),
                     torch.tensor(q_rows, dtype=torch.float64), torch.tensor(p_rows, dtype=torch.float64))


EDGE_TREES = {
    # residual at position 1 has no mass (P[0] == Q[0]); later rows differ
    "equal_first_row": _hand_chain([0, 1, 0], [[.2, .5, .3], [.6, .2, .2], [0, 0, 0]],
                                   [[.2, .5, .3], [.1, .1, .8], [1 / 3, 1 / 3, 1 / 3]]),
    # the target forbids the first draft (P[0][x_1] = 0): D = 0 afterwards
    "target_zero": _hand_chain([0, 2, 1], [[.3, .3, .4], [.5, .5, 0], [0, 0, 0]],
                               [[.5, .5, 0], [.2, .3, .5], [.3, .3, .4]]),
    # one-hot EOS rows (forced EOS, ASpS corner case (v)) after a mismatched first token
    "one_hot_eos": _hand_chain([0, 2, 2], [[.3, .2, .5], [0, 0, 1], [0, 0, 0]],
                               [[.4, .4, .2], [0, 0, 1], [0, 0, 1]]),
    # a tiny draft probability on the drafted token
    "tiny_q": _hand_chain([0, 1, 0], [[1 - 1e-300, 1e-300, 0], [.5, .25, .25], [0, 0, 0]],
                          [[.5, .5, 0], [.2, .2, .6], [.1, .2, .7]]),
    # identical rows everywhere: every 0/0 case at once
    "all_equal": _hand_chain([0, 1, 2], [[.2, .5, .3]] * 2 + [[0, 0, 0]], [[.2, .5, .3]] * 3),
}


@pytest.mark.parametrize("case", list(EDGE_TREES))
def test_degenerate_rows_never_give_nan(case):
    tree = EDGE_TREES[case]
    for name in ALL:
        law = exact_law(name, tree)
        assert bool(torch.isfinite(law).all()), name
        assert float(law.min()) >= 0.0
        assert abs(float(law.sum()) - 1.0) < 1e-12, name
        for seed in range(20):
            v = verify(name, tree, torch.Generator().manual_seed(seed))
            assert float(law[len(v.path), v.token]) > 0.0, name


def test_tree_checks():
    branching = DraftTree(torch.tensor([0, 1, 2]), torch.tensor([-1, 0, 0]),
                          torch.tensor([[.4, .3, .3], [0, 0, 0], [0, 0, 0]]), torch.full((3, 3), 1 / 3))
    for name in ("asps", "block", "greedy_block"):
        with pytest.raises(ValueError, match="chains only"):
            verify(name, branching, torch.Generator())
    topk = DraftTree(torch.tensor([0, 0]), torch.tensor([-1, 0]), torch.tensor([[.6, .4], [0, 0]]),
                     torch.full((2, 2), .5), sampling="topk")
    with pytest.raises(ValueError, match="sampled from the draft rows"):
        verify("block", topk, torch.Generator())
    zero_q = DraftTree(torch.tensor([0, 1]), torch.tensor([-1, 0]), torch.tensor([[1.0, 0.0], [0, 0]]),
                       torch.full((2, 2), .5), sampling="without_replacement")
    with pytest.raises(ValueError, match="draft probability 0"):
        verify("asps", zero_q, torch.Generator())


# ----- the harness and the toy LMs ----------------------------------------------------------------

def test_enumerate_drafts_on_tree_shapes():
    target, draft = pair(4, 0.5, 9, 1.0, 0.0)
    shape = [-1, 0, 0, 1, 1, 2]   # binary tree of depth 2
    for sampling in ("iid", "without_replacement", "topk"):
        drafts = exact.enumerate_drafts(target, draft, PREFIX, shape, sampling)
        assert abs(sum(p for p, _ in drafts) - 1.0) < 1e-12
        for _, tree in drafts:
            assert tree.parent_list == shape and tree.sampling == sampling
    assert len(exact.enumerate_drafts(target, draft, PREFIX, shape, "topk")) == 1
    # without replacement, uniform over unused tokens once the draft support is used up
    point = ContextIndependentLM([0.0, 1.0, 0.0, 0.0])
    drafts = exact.enumerate_drafts(point, point, PREFIX, [-1, 0, 0], "without_replacement")
    assert sorted((tuple(t.tokens.tolist()), round(p, 12)) for p, t in drafts) == [
        ((0, 1, 0), round(1 / 3, 12)), ((0, 1, 2), round(1 / 3, 12)), ((0, 1, 3), round(1 / 3, 12))]


def test_harness_rejects_bad_arguments():
    target, draft = pair(3, 0.5, 0, 1.0, 0.0)
    other, _ = pair(4, 0.5, 0, 1.0, 0.0)
    with pytest.raises(ValueError, match="vocabulary"):
        exact.enumerate_drafts(target, other, PREFIX, [-1, 0])
    with pytest.raises(ValueError, match="race"):
        exact.enumerate_drafts(target, draft, PREFIX, [-1, 0], "race")
    with pytest.raises(ValueError, match="prefix"):
        exact.enumerate_drafts(target, draft, (), [-1, 0])
    with pytest.raises(ValueError, match="parent"):
        exact.enumerate_drafts(target, draft, PREFIX, [-1, 1])
    with pytest.raises(ValueError, match="children"):
        exact.enumerate_drafts(target, draft, PREFIX, [-1, 0, 0, 0, 0], "topk")
    with pytest.raises(ValueError, match="unknown verifier"):
        exact.step_output_law("nope", target, draft, PREFIX, [-1, 0])


def test_chi_square_pvalue():
    law = {(0,): 0.5, (1,): 0.3, (2,): 0.2, (3,): 1e-6}
    assert exact.chi_square_pvalue(Counter({(0,): 500, (1,): 300, (2,): 200}), law) > 0.5
    assert exact.chi_square_pvalue(Counter({(0,): 600, (1,): 250, (2,): 150}), law) < 1e-3
    assert exact.chi_square_pvalue(Counter({(0,): 500, (4,): 1}), law) == 0.0


def test_toy_language_models():
    target, draft = random_markov_pair(4, 0.0, 11)
    assert torch.equal(target.probs((0, 1)), draft.probs((0, 1)))       # mismatch 0: identical
    assert target.eos_token_id == 3
    assert torch.equal(target.probs((1, 3, 2)), torch.tensor([0.0, 0, 0, 1], dtype=torch.float64))
    t0 = tempered(target, 0.0).probs((2,))
    assert float(t0.sum()) == 1.0 and int(t0.argmax()) == int(target.probs((2,)).argmax())
    cold, hot = tempered(target, 0.5).probs((2,)), tempered(target, 4.0).probs((2,))
    assert float(cold.max()) > float(target.probs((2,)).max()) > float(hot.max())
    markov = MarkovLM([1, 0], [[0.5, 0.5], [0.25, 0.75]])
    assert markov.probs(()).tolist() == [1.0, 0.0] and markov.probs((1,)).tolist() == [0.25, 0.75]
    tab = TabularLM(3, {(0,): [0.5, 0.5, 0.0]}, eos_token_id=2)
    assert tab.probs((0,)).tolist() == [0.5, 0.5, 0.0] and tab.probs((0, 1)).tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="sums to"):
        ContextIndependentLM([0.5, 0.6])
    with pytest.raises(ValueError, match="out of range"):
        target.probs((7,))
    with pytest.raises(ValueError, match="mismatch"):
        random_markov_pair(3, 1.5, 0)
    with pytest.raises(ValueError, match="temperature"):
        tempered(target, -1.0)


# ----- an observed identity: ASpS and block verification have the same law on every chain --------

def _random_chain(gen, vocab, gamma, sparse):
    """A chain with random draft/target rows (some zero entries when ``sparse``) and a drafted token
    sampled from each draft row."""
    def rows(n):
        r = torch.rand(n, vocab, generator=gen, dtype=torch.float64) ** 3
        if sparse:
            r = r * (torch.rand(n, vocab, generator=gen) > 0.3)
            r[r.sum(1) == 0, 0] = 1.0
        return r / r.sum(1, keepdim=True)
    q, p = rows(gamma), rows(gamma + 1)
    x = torch.multinomial(q, 1, generator=gen).flatten()
    return DraftTree(torch.cat([torch.tensor([0]), x]), torch.tensor(chain_parents(gamma)),
                     torch.cat([q, torch.zeros(1, vocab, dtype=torch.float64)]), p)


def test_asps_and_block_have_the_same_law_on_every_chain():
    """Observed identity, not a claim of either paper: given ANY drafted chain, ASpS (Hu & Huang,
    Algorithm 1; also checked against an exact-fraction re-implementation in test_asps_fixtures.py)
    and block verification (Sun et al., Algorithm 2) give the same law of (accepted prefix, extra
    token), observed to agree within about 1e-15 (asserted < 1e-14) on random rows with V = 3..6 and
    gamma = 1..5 (dense and sparse rows).
    The papers only compare them in expectation (ASpS Thm 5.6 vs token, Block Thm 2: block is optimal).
    Control: token verification differs from both on some of the same chains with gamma >= 2, so this
    comparison can fail."""
    gen = torch.Generator().manual_seed(2024)
    worst, token_differs = 0.0, 0
    for vocab in range(3, 7):
        for gamma in range(1, 6):
            for rep in range(12):
                tree = _random_chain(gen, vocab, gamma, sparse=rep % 2 == 1)
                a, b = exact_law("asps", tree), exact_law("block", tree)
                assert abs(float(a.sum()) - 1.0) < 1e-12
                worst = max(worst, float((a - b).abs().max()))
                if gamma >= 2:
                    token_differs += float((exact_law("token", tree) - b).abs().max()) > 1e-6
    assert worst < 1e-14, worst
    assert token_differs > 0
