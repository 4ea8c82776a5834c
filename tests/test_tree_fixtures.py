"""Every toy number of the specs about tree verification and drafting, as unit tests.

* docs/methods/sequoia.md §3.1-3.2: per-position acceptance p_j of Sequoia (token-level RRS without
  replacement), SpecInfer (RRS with replacement), top-k and naive sampling (`match`), and SpecTr.
* docs/methods/traversal.md §2.2, §3.3 (T1-T7), §3.4 P5, §2.8 #7 and Figure 2's traversal order.
* docs/methods/erss.md §3.7 T4-T6 (the verification / drafting cases). T1-T3 and T7 are about the tau* tree
  and the speed-up bounds: they belong to theory/ (H3) and are not repeated here.

Exact values are compared in float64 within 1e-12 (1e-6 or the printed digits where the spec prints
decimals). ERSS values need races, so they are Monte-Carlo chi-square tests.
"""

import functools
import sys
from collections import Counter
from fractions import Fraction as F

import pytest
import torch
from scipy.stats import chisquare

from specdec_lib.drafting import context_draft_fn, context_target_fn, draw_tree
from specdec_lib.exact import accepted_length_law, enumerate_drafts, expected_step_tokens
from specdec_lib.models.synthetic import ContextIndependentLM
from specdec_lib.tree import DraftTree, batch, binary, chain_parents, erss_specinfer
from specdec_lib.verifiers import exact_law, expected_tokens, traversal
from specdec_lib.verifiers.spectr import kseq_rho

EXACT = 1e-12


def _lm_pair(P, Q):
    return ContextIndependentLM(P), ContextIndependentLM(Q)


@functools.lru_cache(maxsize=None)
def _drafts(P, Q, parents, sampling):
    """Every drafted tree (with its probability) for context-independent target P and draft Q."""
    target, draft = _lm_pair(list(P), list(Q))
    return enumerate_drafts(target, draft, (0,), list(parents), sampling)


def drafts(P, Q, parents, sampling):
    return _drafts(tuple(float(x) for x in P), tuple(float(x) for x in Q), tuple(parents), sampling)


def tau_law(verifier, P, Q, parents, sampling):
    """P(tau = t), averaged over drafts (tau = accepted draft tokens)."""
    out = {}
    for pd, tree in drafts(P, Q, parents, sampling):
        law = exact_law(verifier, tree).sum(1)
        for node, mass in enumerate(law.tolist()):
            t = tree.depths[node]
            out[t] = out.get(t, 0.0) + pd * mass
    return [out.get(t, 0.0) for t in range(max(out) + 1)]


def mean_tokens(verifier, P, Q, parents, sampling):
    """E[tau + 1], averaged over drafts."""
    return sum((t + 1) * p for t, p in enumerate(tau_law(verifier, P, Q, parents, sampling)))


def positional(verifier, P, Q, k, sampling):
    """p_j = P(the j-th child of the root is the accepted one), averaged over drafts (batch(k, 1))."""
    out = [0.0] * k
    for pd, tree in drafts(P, Q, batch(k, 1), sampling):
        law = exact_law(verifier, tree)
        for j in range(k):
            out[j] += pd * float(law[j + 1].sum())
    return out


def _floats(values):
    return [float(v) for v in values]


# ----- Sequoia §3.2: robustness table ------------------------------------------------------------
# (P, Q, k, Sequoia p_j, SpecInfer p_j, top-k p_j, naive iid p_j or its cumulative sum)
SEQUOIA_CASES = {
    "C1": ([1, 0], [.5, .5], 2, [F(1, 2), F(1, 2)], [F(1, 2), F(1, 4)], [1, 0], [F(1, 2), F(1, 4)]),
    "C2": ([.6, .4], [.6, .4], 2, [1, 0], [1, 0], [F(3, 5), F(2, 5)], [F(13, 25), F(6, 25)]),
    "C3": ([.1, .2, .3, .4], [.4, .3, .2, .1], 4,
           [F(3, 5), F(23, 140), F(1277, 16800), F(2683, 16800)],
           [F(3, 5), F(3, 25), F(6, 125), F(29, 1250)], [.1, .2, .3, .4], [.2, .15, .1146, .0891]),
    "C4": ([0, 0, 1], [.5, .5, 0], 3, [0, 0, 1], [0, 0, 0], [0, 0, 1], 0.0),
    "C5": ([.5, .3, .2, 0, 0], [.2] * 5, 5, [F(3, 5), F(1, 5), F(1, 15), F(1, 15), F(1, 15)],
           [F(3, 5), F(4, 25), F(17, 250), F(43, 1250), F(86, 3125)], [.5, .3, .2, 0, 0], .67232),
    "C6": ([.7, .2, .1], [.2, .7, .1], 3, [F(1, 2), F(1, 3), F(1, 6)], [F(1, 2), F(1, 10), F(2, 25)],
           [.2, .7, .1], .5633),
}


@pytest.mark.parametrize("case", sorted(SEQUOIA_CASES))
def test_sequoia_positional_acceptance(case):
    P, Q, k, sequoia, specinfer, topk, naive = SEQUOIA_CASES[case]
    assert positional("token", P, Q, k, "without_replacement") == pytest.approx(_floats(sequoia), abs=EXACT)
    assert positional("token", P, Q, k, "iid") == pytest.approx(_floats(specinfer), abs=EXACT)
    assert positional("token", P, Q, k, "topk") == pytest.approx(_floats(topk), abs=EXACT)
    assert positional("match", P, Q, k, "topk") == pytest.approx(_floats(topk), abs=EXACT)
    got = positional("match", P, Q, k, "iid")
    if isinstance(naive, list):
        assert got == pytest.approx(_floats(naive), abs=5e-5)
    else:
        assert sum(got) == pytest.approx(naive, abs=5e-6)


def test_sequoia_headline_counterexamples():
    # P=[1,0], Q=[.5,.5], k=2: without replacement accepts surely, SpecInfer only 0.75
    assert sum(positional("token", [1, 0], [.5, .5], 2, "without_replacement")) == pytest.approx(1.0, abs=EXACT)
    assert sum(positional("token", [1, 0], [.5, .5], 2, "iid")) == pytest.approx(0.75, abs=EXACT)
    # P=Q=[.6,.4], k=1: top-k accepts 0.6, sampling accepts surely (optimal transport)
    assert positional("token", [.6, .4], [.6, .4], 1, "topk") == pytest.approx([0.6], abs=EXACT)
    assert positional("token", [.6, .4], [.6, .4], 1, "without_replacement") == pytest.approx([1.0], abs=EXACT)


@pytest.mark.parametrize("case", ["C3", "C6"])
def test_optimal_transport_at_k1(case):
    P, Q = SEQUOIA_CASES[case][:2]
    one_minus_tv = sum(min(a, b) for a, b in zip(P, Q))
    for sampling in ("iid", "without_replacement"):
        assert positional("token", P, Q, 1, sampling) == pytest.approx([one_minus_tv], abs=EXACT)


# ----- SpecTr (Sequoia §2.8 / §3.2) --------------------------------------------------------------
@pytest.mark.parametrize("P, Q, totals", [
    ([1, 0], [.5, .5], [0.5, 0.75]),
    ([.1, .2, .3, .4], [.4, .3, .2, .1], [0.6, 0.75, 0.79395, 0.831438]),
    ([.5, .3, .2, 0, 0], [.2] * 5, [0.6, 0.78533, 0.858519, 0.906007, 0.93873]),
])
def test_spectr_total_acceptance(P, Q, totals):
    p = torch.tensor(P, dtype=torch.float64)
    q = torch.tensor(Q, dtype=torch.float64)
    for k, expected in enumerate(totals, start=1):
        rho, beta = kseq_rho(p, q, k)
        assert 1.0 <= rho <= k
        assert 1 - (1 - beta) ** k == pytest.approx(expected, abs=5e-6)


def test_spectr_rho_and_enumerated_acceptance():
    rho, _ = kseq_rho(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]), 2)
    assert rho == pytest.approx(1.5, abs=1e-12)
    assert sum(positional("spectr", [1, 0], [.5, .5], 2, "iid")) == pytest.approx(0.75, abs=1e-12)
    assert sum(positional("spectr", [.1, .2, .3, .4], [.4, .3, .2, .1], 2, "iid")) == pytest.approx(0.75, abs=1e-9)
    assert sum(positional("spectr", [.1, .2, .3, .4], [.4, .3, .2, .1], 3, "iid")) == pytest.approx(0.79395, abs=5e-6)


# ----- Traversal Verification §3.3 -----------------------------------------------------------------
PB = [0.3, 0.4, 0.3]  # target, tokens (a, b, c) = (0, 1, 2)
PS = [0.6, 0.3, 0.1]  # draft
FIG1 = [-1, 0, 0, 1, 1, 2]  # root -> X1, X2; X1 -> X3, X4; X2 -> X5


def _fixed_tree(parents, tokens, sampling="without_replacement", P=PB, Q=PS):
    n = len(parents)
    p = torch.tensor([P] * n, dtype=torch.float64)
    q = torch.tensor([Q] * n, dtype=torch.float64)
    return DraftTree(torch.tensor([0] + tokens), torch.tensor(parents), q, p, sampling)


def _toy():
    return _lm_pair(PB, PS)


def test_t1_single_token_joint_table():
    target, draft = _toy()
    joint = [[0.0] * 3 for _ in range(3)]  # joint[output][drafted]
    for pd, tree in enumerate_drafts(target, draft, (0,), chain_parents(1), "iid"):
        law = exact_law("token", tree)
        x = int(tree.tokens[1])
        joint[x][x] += pd * float(law[1].sum())
        for y in range(3):
            joint[y][x] += pd * float(law[0, y])
    expected = [[.3, 0, 0], [.1, .3, 0], [.2, 0, .1]]
    for row, exp in zip(joint, expected):
        assert row == pytest.approx(exp, abs=EXACT)
    tree = _fixed_tree([-1, 0], [0], "iid")
    law = exact_law("token", tree)
    assert float(law[1].sum()) == pytest.approx(0.5, abs=EXACT)
    assert (law[0] / law[0].sum()).tolist() == pytest.approx([0, 1 / 3, 2 / 3], abs=EXACT)


def test_t2_rrsw_toy():
    # a drawn and rejected, then b: accepted with 4/9; after b is rejected the residual is [0, 0, 1]
    law = exact_law("token", _fixed_tree([-1, 0, 0], [0, 1]))
    assert float(law[1].sum()) == pytest.approx(0.5, abs=EXACT)
    assert float(law[2].sum()) / 0.5 == pytest.approx(4 / 9, abs=EXACT)
    assert (law[0] / law[0].sum()).tolist() == pytest.approx([0, 0, 1], abs=EXACT)
    for sampling, expected in (("without_replacement", 7 / 8), ("iid", 41 / 50)):
        for verifier in ("token", "traversal"):
            tau = tau_law(verifier, PB, PS, batch(2, 1), sampling)
            assert 1 - tau[0] == pytest.approx(expected, abs=EXACT)


def _law_by_node(law):
    return {i: law[i].tolist() for i in range(law.shape[0]) if float(law[i].sum()) > 0}


def test_t3_figure2_fixed_tree_traversal_law():
    tree = _fixed_tree(FIG1, [0, 2, 1, 2, 0])  # X1..X5 = a, c, b, c, a
    got = _law_by_node(exact_law("traversal", tree))
    expected = {
        3: [F(1, 5), F(4, 15), F(1, 5)],        # (a, b): 2/3, Y ~ P_b
        4: [F(7, 110), F(14, 165), F(7, 110)],  # (a, c): 7/33, Y ~ P_b
        5: [F(1, 55), F(4, 165), F(1, 55)],     # (c, a): 2/33, Y ~ P_b
        2: [0, F(2, 99), F(4, 99)],             # (c): 2/33, Y ~ [0, 1/3, 2/3]
    }
    assert set(got) == set(expected)
    for node, row in expected.items():
        assert got[node] == pytest.approx(_floats(row), abs=EXACT)
    assert expected_tokens("traversal", tree) == pytest.approx(97 / 33, abs=EXACT)
    law = exact_law("traversal", tree)
    assert float(law[[1, 3, 4]].sum()) == pytest.approx(29 / 33, abs=EXACT)  # §2.8 #7: not rho_ini = 1/2


def test_t3_figure2_fixed_tree_token_law():
    tree = _fixed_tree(FIG1, [0, 2, 1, 2, 0])
    got = _law_by_node(exact_law("token", tree))
    expected = {3: [F(3, 20), F(1, 5), F(3, 20)], 5: [F(3, 40), F(1, 10), F(3, 40)], 2: [0, F(1, 12), F(1, 6)]}
    assert set(got) == set(expected)
    for node, row in expected.items():
        assert got[node] == pytest.approx(_floats(row), abs=EXACT)
    assert expected_tokens("token", tree) == pytest.approx(11 / 4, abs=EXACT)


def test_t3_intermediate_rates():
    # rho'(X1) = 1/11 after X3 is rejected, rho(X1 X4) = 7/11, rho''(X1) = 0 after X4
    assert traversal.sequence_rate(0.05, 0.5) == pytest.approx(1 / 11, abs=EXACT)
    tree = _fixed_tree(FIG1, [0, 2, 1, 2, 0])
    law = exact_law("traversal", tree)
    # P(X4 accepted) = P(X3 rejected) * 7/11 = (1 - 2/3) * 7/11
    assert float(law[4].sum()) == pytest.approx((1 - 2 / 3) * 7 / 11, abs=EXACT)
    assert float(law[1].sum()) == 0.0  # X1 itself can never be accepted (rho'' = 0)


def test_figure2_traversal_order(monkeypatch):
    # Post-order DFS in sampling order: X3 -> X4 -> X1 -> X5 -> X2 -> root. Every test is made to
    # fail (u just below 1) on a tree whose rates stay in (0, 1) (context-dependent rows, so that no
    # node is pruned), and the node each coin is drawn for is recorded.
    order = []

    def recording_uniform(generator):
        order.append(sys._getframe(1).f_locals["top"].node)
        return 1.0 - 1e-12

    monkeypatch.setattr(traversal, "uniform", recording_uniform)
    target = [[.26, .16, .58], [.24, .55, .21], [.16, .05, .79], [.38, .36, .26], [.35, .03, .62], [.18, .53, .29]]
    draft = [[.48, .02, .5], [.01, .24, .75], [.04, .96, 0], [.58, .24, .18], [.61, .01, .38], [.19, .51, .3]]
    tree = DraftTree(torch.tensor([0, 0, 2, 2, 1, 1]), torch.tensor(FIG1), torch.tensor(draft, dtype=torch.float64),
                     torch.tensor(target, dtype=torch.float64), "without_replacement")
    traversal.sample(tree, torch.Generator().manual_seed(0))
    assert order == [3, 4, 1, 5, 2, 0]


def test_t4_figure1_shape_averaged_without_replacement():
    target, draft = _toy()
    for verifier, p2, mean in (("traversal", F(159, 200), F(267, 100)), ("token", F(147, 200), F(261, 100))):
        tau = accepted_length_law(verifier, target, draft, (0,), FIG1, "without_replacement")
        assert 1 - tau[0] == pytest.approx(7 / 8, abs=EXACT)
        assert tau[2] == pytest.approx(float(p2), abs=EXACT)
        assert expected_step_tokens(verifier, target, draft, (0,), FIG1, "without_replacement") == \
            pytest.approx(float(mean), abs=EXACT)


def test_t4_lemma_a2_on_average():
    # E[P(accepted path starts with X1) | X1 = x] = rho_ini(x) = 1/2, 1, 1 for x = a, b, c
    target, draft = _toy()
    mass, prob = [0.0] * 3, [0.0] * 3
    for pd, tree in enumerate_drafts(target, draft, (0,), FIG1, "without_replacement"):
        x = int(tree.tokens[1])
        law = exact_law("traversal", tree)
        mass[x] += pd
        prob[x] += pd * float(law[[1, 3, 4]].sum())
    assert [p / m for p, m in zip(prob, mass)] == pytest.approx([0.5, 1.0, 1.0], abs=EXACT)


@pytest.mark.parametrize("parents, tra, tok", [
    (batch(2, 1), (F(41, 50), None, 1.82), (F(41, 50), None, 1.82)),
    (FIG1, (F(41, 50), F(89, 125), 2.532), (F(41, 50), F(329, 500), 2.478)),
    (binary(3), (F(41, 50), F(454, 625), 2.5464), (F(41, 50), F(1681, 2500), 2.4924)),
])
def test_t5_with_replacement(parents, tra, tok):
    for verifier, (p1, p2, mean) in (("traversal", tra), ("token", tok)):
        tau = tau_law(verifier, PB, PS, parents, "iid")
        assert 1 - tau[0] == pytest.approx(float(p1), abs=EXACT)
        if p2 is not None:
            assert sum(tau[2:]) == pytest.approx(float(p2), abs=EXACT)
        assert mean_tokens(verifier, PB, PS, parents, "iid") == pytest.approx(mean, abs=EXACT)


@pytest.mark.parametrize("P, Q, token_tau, traversal_tau", [
    ([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)],
     [F(2, 3), F(10, 9), F(38, 27), F(130, 81), F(422, 243)],
     [F(2, 3), F(11, 9), F(5, 3), F(166, 81), F(64, 27)]),
    (PB, PS, [F(7, 10), F(119, 100), F(1533, 1000), 1.7731, 1.94117],
     [F(7, 10), F(5, 4), F(213, 125), 2.0887, F(15101, 6250)]),
])
def test_t6_chains(P, Q, token_tau, traversal_tau):
    for gamma in range(1, 6):
        for verifier, values in (("token", token_tau), ("traversal", traversal_tau)):
            expected = values[gamma - 1]
            tol = EXACT if isinstance(expected, F) else 5e-5
            got = mean_tokens(verifier, P, Q, chain_parents(gamma), "iid") - 1
            assert got == pytest.approx(float(expected), abs=tol), (verifier, gamma)


def test_t7_binary_depth2():
    parents = binary(3)  # Traversal's "binary depth 2": 6 draft tokens
    for verifier, tail, mean in (("traversal", [1, F(7, 8), F(261, 320)], F(861, 320)),
                                 ("token", [1, F(7, 8), F(49, 64)], F(169, 64))):
        tau = tau_law(verifier, PB, PS, parents, "without_replacement")
        at_least = [sum(tau[l:]) for l in range(3)]
        assert at_least == pytest.approx(_floats(tail), abs=EXACT)
        assert mean_tokens(verifier, PB, PS, parents, "without_replacement") == pytest.approx(float(mean), abs=EXACT)


def test_p5_per_tree_dominance_is_false():
    tree = _fixed_tree(FIG1, [0, 1, 0, 1, 0])  # X1..X5 = a, b, a, b, a
    assert expected_tokens("traversal", tree) - 1 == pytest.approx(551 / 636, abs=EXACT)
    assert expected_tokens("token", tree) - 1 == pytest.approx(43 / 36, abs=EXACT)


# ----- ERSS §3.7 T4-T6 ---------------------------------------------------------------------------
T4 = ([.5, .3, .2], [.3, .4, .3])
T5 = ([.5, .25, .125, .125], [.25] * 4)


@pytest.mark.parametrize("P, Q, r_gss, batch_g", [
    (*T4, [F(4, 5), F(13, 140), F(3, 28)], [1.8, 1.892857, 2.0]),
    (*T5, [F(3, 4), F(1, 12), F(1, 12), F(1, 12)], [1.75, 1.833333, 1.916667]),
])
def test_erss_gss_index_law_and_batch(P, Q, r_gss, batch_g):
    r = positional("token", P, Q, len(r_gss), "without_replacement")
    assert r == pytest.approx(_floats(r_gss), abs=EXACT)
    for k, g in enumerate(batch_g, start=1):
        assert mean_tokens("token", P, Q, batch(k, 1), "without_replacement") == pytest.approx(g, abs=5e-7)


@pytest.mark.parametrize("parents, expected", [
    (chain_parents(3), 2.952), (chain_parents(5), 3.689280), (erss_specinfer(5), 3.080),
])
def test_erss_t4_gss_sequences(parents, expected):
    target, draft = _lm_pair(*T4)
    assert expected_step_tokens("token", target, draft, (0,), parents, "without_replacement") == \
        pytest.approx(expected, abs=5e-7)


def _race_index_counts(P, Q, k, n, seed):
    """How often the j-th race child is accepted (0 = none) over n race-drafted batch trees."""
    target, draft = _lm_pair(P, Q)
    draft_fn = context_draft_fn(draft.probs, (0,))
    target_fn = context_target_fn(target.probs, (0,))
    gen = torch.Generator().manual_seed(seed)
    counts = Counter()
    for _ in range(n):
        tree = draw_tree(batch(k, 1), 0, draft_fn, "race", gen).scored_by(target_fn)
        law = exact_law("erss", tree)  # deterministic at the root: the accepted child (or none)
        counts[int(torch.nonzero(law.sum(1))[0])] += 1
    return counts


@pytest.mark.parametrize("P, Q, r_erss, batch_g", [
    (*T4, [F(65, 82), F(841, 5330), F(132, 2665)], [1.792683, 1.950469, 2.0]),
    (*T5, [F(7, 10), F(3203, 16380), F(3632, 45045), F(477, 20020)], [1.7, 1.895543, 1.976174]),
])
def test_erss_index_law_monte_carlo(P, Q, r_erss, batch_g):
    k = len(r_erss)
    assert sum(r_erss) == 1  # all V tokens drafted: something is always accepted
    for j, g in enumerate(batch_g, start=1):  # batch G = 1 + sum_{i <= k} r_i (spec consistency)
        assert 1 + float(sum(r_erss[:j])) == pytest.approx(g, abs=5e-7)
    n = 1200
    counts = _race_index_counts(P, Q, k, n, seed=7)
    assert counts[0] == 0
    observed = [counts[j] for j in range(1, k + 1)]
    assert chisquare(observed, [n * float(r) for r in r_erss]).pvalue > 1e-4
    # and ERSS's index law differs from GSS's (greedy wins the first index, 0.8 > 65/82 etc.)


def test_erss_t6_identical_models_accept_everything():
    P = [.5, .3, .2]
    target, draft = _lm_pair(P, P)
    draft_fn = context_draft_fn(draft.probs, (0,))
    target_fn = context_target_fn(target.probs, (0,))
    gen = torch.Generator().manual_seed(0)
    for k in (1, 3, 5):
        assert expected_step_tokens("token", target, draft, (0,), chain_parents(k), "without_replacement") == \
            pytest.approx(k + 1, abs=EXACT)
        for _ in range(20):
            tree = draw_tree(chain_parents(k), 0, draft_fn, "race", gen).scored_by(target_fn)
            assert expected_tokens("erss", tree) == pytest.approx(k + 1, abs=EXACT)
