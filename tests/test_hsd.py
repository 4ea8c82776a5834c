"""HSD (Zhou et al., arXiv 2601.05724) by exact enumeration: the paper's Algorithm 2 (`hsd`) has Block
Verification's one-step law and is lossless over several steps; the authors' released rule (`hsd_released`,
whole chain accepted with min(1, Lambda_gamma)) is not, accepts more than Block (which no lossless chain
verifier can), is measured only, and decoding refuses it. docs/papers/hsd.md explains the finding."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import pytest
import torch

from specdec_lib import exact
from specdec_lib.models.synthetic import ContextIndependentLM, random_markov_pair, tempered
from specdec_lib.tree import DraftTree, chain_parents
from specdec_lib.verifiers import NOT_LOSSLESS, VERIFIERS, exact_law, expected_tokens, get_verifier, verify
from specdec_lib.verifiers import block, hsd, hsd_released

PREFIX = (0,)
RELEASED = hsd_released.VERIFIER
# the two context-free pairs of docs/papers/hsd.md
PAIR_A = (ContextIndependentLM([0.5, 0.3, 0.2]), ContextIndependentLM([0.2, 0.3, 0.5]))   # gamma = 2
PAIR_B = (ContextIndependentLM([0.7, 0.3]), ContextIndependentLM([0.4, 0.6]))             # gamma = 3
# (V, mismatch, seed, temperature, zero_prob): random Markov pairs with EOS (= V-1)
MARKOV = [(3, 0.6, 0, 1.0, 0.0), (3, 1.0, 1, 0.5, 0.3), (4, 0.4, 2, 1.0, 0.0), (5, 0.8, 3, 2.0, 0.2),
          (3, 0.7, 10, 1.0, 0.0)]
CONTROL = (3, 0.7, 10, 1.0, 0.0)


@lru_cache(maxsize=None)
def _pair(v, m, s, t, z):
    target, draft = random_markov_pair(v, m, s, eos=True, zero_prob=z)
    return tempered(target, t), tempered(draft, t)


def _random_chain(vocab, gamma, seed, zeros=0.0, dtype=torch.float64):
    """A chain whose drafts are drawn from its draft rows; rows with random zeros (the target's may vanish
    on a drafted token, the draft's never does)."""
    gen = torch.Generator().manual_seed(seed)

    def rows(n):
        r = torch.exp(2.0 * torch.randn(n, vocab, generator=gen, dtype=torch.float64))
        r = r * (torch.rand(n, vocab, generator=gen, dtype=torch.float64) >= zeros)
        r[r.sum(1) == 0, 0] = 1.0
        return r / r.sum(1, keepdim=True)

    Q, P = rows(gamma + 1), rows(gamma + 1)
    tokens = [int(torch.randint(vocab, (1,), generator=gen))]
    for i in range(gamma):
        tokens.append(int(torch.multinomial(Q[i], 1, generator=gen)))
    return DraftTree(torch.tensor(tokens), torch.tensor(chain_parents(gamma)), Q.to(dtype), P.to(dtype),
                     sampling="iid")


def _multistep(verifier, target, draft, g, horizon):
    return exact.multistep_output_law(verifier, target, draft, PREFIX, chain_parents(g), "iid", horizon)


# ----- the paper's Algorithm 2 is Block Verification -------------------------------------------------

@pytest.mark.parametrize("vocab", [2, 3, 5, 16])
@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8])
def test_one_step_law_equals_block(vocab, gamma):
    worst = 0.0
    for seed in range(25):
        tree = _random_chain(vocab, gamma, seed, zeros=0.3 if seed % 2 else 0.0)
        got, want = hsd.law(tree), block.law(tree)
        assert got.shape == (gamma + 1, vocab) and abs(float(got.sum()) - 1) < 1e-12 and float(got.min()) >= 0
        worst = max(worst, float((got - want).abs().max()))
    assert worst < 1e-12


def test_capped_ratios_are_block_weights_and_stops_are_block_h():
    for seed in range(20):
        tree = _random_chain(4, 5, seed, zeros=0.2)
        P, Q, x = block.chain_inputs(tree)
        log_lam, log_w = hsd.level_weights(P, Q, x)
        assert torch.allclose(log_w, block.log_block_weights(P, Q, x), atol=1e-12, rtol=0)
        sigma, _ = hsd.stop_probs(P, Q, x)
        h, _ = block.tau_law(P, Q, log_w)
        assert torch.allclose(sigma, h, atol=1e-12, rtol=0)
        # the released rule changes the full-acceptance probability only, and only upwards
        rel, _ = hsd.stop_probs(P, Q, x, released=True)
        assert torch.equal(rel[:-1], sigma[:-1]) and float(rel[-1]) >= float(sigma[-1])
        assert float(rel[-1]) == pytest.approx(min(1.0, float(torch.exp(log_lam[-1]))), abs=1e-12)


@pytest.mark.parametrize("case", MARKOV)
def test_lossless_over_several_steps_on_toy_lms(case):
    target, draft = _pair(*case)
    for g in (1, 2, 3):
        horizon = g + 2
        want = exact.target_law(target, PREFIX, horizon)
        if case[0] == 3 or g <= 2:          # the multi-step enumeration grows fast with V and gamma
            assert exact.max_abs_diff(_multistep("hsd", target, draft, g, horizon), want) < 1e-12
        one = exact.step_output_law("hsd", target, draft, PREFIX, chain_parents(g), "iid", horizon)
        assert exact.max_abs_diff(one, want) < 1e-12
        assert exact.expected_step_tokens("hsd", target, draft, PREFIX, chain_parents(g)) == pytest.approx(
            exact.expected_step_tokens("block", target, draft, PREFIX, chain_parents(g)), abs=1e-12)


@pytest.mark.parametrize("pair, g", [(PAIR_A, 2), (PAIR_B, 3)], ids=["A", "B"])
def test_lossless_on_the_context_free_pairs(pair, g):
    target, draft = pair
    want = exact.target_law(target, PREFIX, 5)
    assert exact.max_abs_diff(_multistep("hsd", target, draft, g, 5), want) < 1e-12


def test_lossless_on_without_replacement_chains():
    target, draft = _pair(4, 0.7, 5, 1.0, 0.0)
    for g in (2, 3):
        want = exact.target_law(target, PREFIX, g + 1)
        got = exact.step_output_law("hsd", target, draft, PREFIX, chain_parents(g), "without_replacement", g + 1)
        assert exact.max_abs_diff(got, want) < 1e-12


# ----- the released rule: the control that must fail --------------------------------------------------

def test_released_rule_fails_the_same_harness():
    target, draft = _pair(*CONTROL)
    g = 3
    want = exact.target_law(target, PREFIX, g + 1)
    assert exact.max_abs_diff(_multistep(RELEASED, target, draft, g, g + 1), want) > 1e-3
    one = exact.step_output_law(RELEASED, target, draft, PREFIX, chain_parents(g), "iid", g + 1)
    assert exact.max_abs_diff(one, want) > 1e-3


@pytest.mark.parametrize("case", MARKOV)
def test_released_rule_is_lossy_or_ties_block(case):
    """It accepts more than Block exactly where it is lossy: Block is optimal among lossless chain verifiers."""
    target, draft = _pair(*case)
    for g in (2, 3):
        err = exact.max_abs_diff(exact.step_output_law(RELEASED, target, draft, PREFIX, chain_parents(g), "iid",
                                                       g + 1), exact.target_law(target, PREFIX, g + 1))
        e_rel, e_blk = (exact.expected_step_tokens(v, target, draft, PREFIX, chain_parents(g))
                        for v in (RELEASED, "block"))
        assert e_rel >= e_blk - 1e-12
        if e_rel > e_blk + 1e-9:
            assert err > 1e-4
        else:
            assert err < 1e-12


def test_single_draft_released_is_standard_speculative_sampling():
    for case in MARKOV:
        target, draft = _pair(*case)
        for _, tree in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(1)):
            assert torch.allclose(hsd_released.law(tree), VERIFIERS["token"].law(tree, None), atol=1e-12, rtol=0)


# ----- the numbers of docs/papers/hsd.md --------------------------------------------------------------

def test_pair_a_numbers():
    """p = (.5, .3, .2), q = (.2, .3, .5), gamma = 2: the released rule's first 5 tokens are off by 0.01752
    (sequence (0,0,0,0,0): 0.01373 instead of 0.03125); tokens per step 2.31 against Block's 2.25."""
    target, draft = PAIR_A
    want = exact.target_law(target, PREFIX, 5)
    got = _multistep(RELEASED, target, draft, 2, 5)
    assert exact.max_abs_diff(got, want) == pytest.approx(0.01752, abs=1e-12)
    assert got[(0, 0, 0, 0, 0)] == pytest.approx(0.01373, abs=1e-12) and want[(0, 0, 0, 0, 0)] == pytest.approx(
        0.03125, abs=1e-15)
    one = exact.step_output_law(RELEASED, target, draft, PREFIX, chain_parents(2), "iid", 5)
    assert exact.max_abs_diff(one, want) == pytest.approx(0.0075, abs=1e-12)
    two = exact.step_output_law(RELEASED, target, draft, PREFIX, chain_parents(2), "iid", 2)
    assert two[(0, 0)] == pytest.approx(0.19, abs=1e-12)          # target: 0.25
    tok = {v: exact.expected_step_tokens(v, target, draft, PREFIX, chain_parents(2))
           for v in ("token", "block", "hsd")}
    tok["released"] = exact.expected_step_tokens(RELEASED, target, draft, PREFIX, chain_parents(2))
    assert tok == pytest.approx({"token": 2.19, "block": 2.25, "hsd": 2.25, "released": 2.31}, abs=1e-12)
    lengths = exact.accepted_length_law(RELEASED, target, draft, PREFIX, chain_parents(2))
    assert lengths == pytest.approx([0.30, 0.09, 0.61], abs=1e-12)
    assert exact.accepted_length_law("hsd", target, draft, PREFIX, chain_parents(2)) == pytest.approx(
        [0.30, 0.15, 0.55], abs=1e-12)


def test_pair_b_numbers():
    """p = (.7, .3), q = (.4, .6), gamma = 3: off by 0.0685347 on the first 5 tokens (0.087 on the first 3);
    tokens per step 2.887 against Block's 2.761."""
    target, draft = PAIR_B
    for horizon, err in ((3, 0.087), (4, 0.081969), (5, 0.0685347)):
        want = exact.target_law(target, PREFIX, horizon)
        assert exact.max_abs_diff(_multistep(RELEASED, target, draft, 3, horizon), want) == pytest.approx(
            err, abs=1e-12)
    tok = [exact.expected_step_tokens(v, target, draft, PREFIX, chain_parents(3)) for v in (RELEASED, "block", "hsd")]
    assert tok == pytest.approx([2.887, 2.761, 2.761], abs=1e-12)


# ----- samplers, registry, checks ---------------------------------------------------------------------

@pytest.mark.parametrize("verifier", [hsd.VERIFIER, RELEASED], ids=["hsd", "hsd_released"])
def test_sampler_matches_the_exact_law(verifier):
    target, draft = PAIR_A
    gen = torch.Generator().manual_seed(3)
    n = 3000
    for _, tree in list(exact.enumerate_drafts(target, draft, PREFIX, chain_parents(2)))[:3]:
        law = verifier.law(tree, None)
        counts = Counter()
        for _ in range(n):
            v = verifier.sample(tree, gen, None)
            counts[(len(v.path), v.token)] += 1
        cells = {(t, y): float(law[t, y]) for t in range(law.shape[0]) for y in range(law.shape[1]) if law[t, y] > 0}
        assert set(counts) <= set(cells)
        assert exact.chi_square_pvalue(counts, cells) > 1e-3


def test_sampler_on_float32_rows_matches_the_exact_law():
    tree = _random_chain(5, 3, seed=4, dtype=torch.float32)
    law = hsd.law(tree)
    gen = torch.Generator().manual_seed(1)
    counts = Counter()
    for _ in range(4000):
        v = verify("hsd", tree, gen)
        counts[(len(v.path), v.token)] += 1
    cells = {(t, y): float(law[t, y]) for t in range(4) for y in range(5) if law[t, y] > 0}
    assert exact.chi_square_pvalue(counts, cells) > 1e-3


def test_hsd_is_registered_and_decodes(tiny_llama):
    from specdec_lib.decoding import speculative_generate

    assert "hsd" in VERIFIERS and "hsd" not in NOT_LOSSLESS and get_verifier("hsd") is hsd.VERIFIER
    target, draft = _pair(*CONTROL)
    _, tree = next(iter(exact.enumerate_drafts(target, draft, PREFIX, chain_parents(2))))
    assert torch.equal(exact_law("hsd", tree), hsd.law(tree))
    assert expected_tokens("hsd", tree) == pytest.approx(expected_tokens("block", tree), abs=1e-12)
    lm_target, lm_draft = tiny_llama(61, name="tiny-target"), tiny_llama(61, name="tiny-draft", seed=1)
    out = speculative_generate(lm_target, lm_draft, [1, 2, 3], verifier="hsd", shape="chain:3", max_new_tokens=8,
                               seed=0)
    assert len(out.tokens) == 8 and out.steps and all(s.drafted == 3 for s in out.steps[:-1])


def test_released_is_measured_only_and_refused_for_decoding():
    from specdec_lib.decoding import speculative_generate

    assert "hsd_released" in NOT_LOSSLESS and "hsd_released" not in VERIFIERS
    target, draft = _pair(*CONTROL)
    _, tree = next(iter(exact.enumerate_drafts(target, draft, PREFIX, chain_parents(2))))
    assert torch.equal(exact_law("hsd_released", tree), hsd_released.law(tree))
    assert len(verify("hsd_released", tree, torch.Generator().manual_seed(0)).path) <= 2
    with pytest.raises(ValueError, match="not lossless"):
        get_verifier("hsd_released")
    with pytest.raises(ValueError, match="not lossless"):
        exact.step_output_law("hsd_released", target, draft, PREFIX, chain_parents(2), "iid", 3)
    with pytest.raises(ValueError, match="not lossless"):
        speculative_generate(target, draft, list(PREFIX), verifier="hsd_released", shape="chain:2",
                             max_new_tokens=2, seed=0)


@pytest.mark.parametrize("name", ["hsd", "hsd_released"])
def test_chains_only(name):
    star = DraftTree(torch.tensor([0, 1, 2]), torch.tensor([-1, 0, 0]), torch.full((3, 3), 1 / 3),
                     torch.full((3, 3), 1 / 3), sampling="iid")
    with pytest.raises(ValueError, match="chains only"):
        verify(name, star, torch.Generator())
    topk = DraftTree(torch.tensor([0, 1, 2]), torch.tensor([-1, 0, 1]), torch.full((3, 3), 1 / 3),
                     torch.full((3, 3), 1 / 3), sampling="topk")
    with pytest.raises(ValueError, match="sampled from the draft rows"):
        exact_law(name, topk)
