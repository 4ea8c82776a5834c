"""Block Verification (Sun et al., ICLR'25) toy numbers as tests: docs/methods/block.md §3.3-3.5.

Exact fractions are compared with the float64 results of the enumeration harness (atol 1e-12).
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from specdec_lib import exact
from specdec_lib.models.synthetic import ContextIndependentLM, MarkovLM
from specdec_lib.tree import chain_parents
from specdec_lib.verifiers import block as block_mod
from specdec_lib.verifiers import VERIFIERS, exact_law
from specdec_lib.verifiers.base import Verifier

PREFIX = (0,)
A, B = 0, 1
# Eq. 2: context-independent toy, M_b = (1/3, 2/3), M_s = (2/3, 1/3)
TOY_TARGET = ContextIndependentLM([1 / 3, 2 / 3])
TOY_DRAFT = ContextIndependentLM([2 / 3, 1 / 3])
NAMES = ("token", "block", "greedy_block")   # greedy_block with no state = its first iteration


def ccdf(name, target, draft, gamma, drafts=None):
    """P(tau >= k), k = 0..gamma, for a verifier name or object."""
    verifier = VERIFIERS[name] if isinstance(name, str) else name
    if drafts is None:
        drafts = exact.enumerate_drafts(target, draft, PREFIX, chain_parents(gamma))
    law = [0.0] * (gamma + 1)
    for p, tree in drafts:
        for t, mass in enumerate(verifier.law(tree, None).sum(1).tolist()):
            law[t] += p * mass
    return [sum(law[k:]) for k in range(gamma + 1)]


def expected_accepted(name, target, draft, gamma):
    return sum(ccdf(name, target, draft, gamma)[1:])


def close(x, frac, tol=1e-12):
    return abs(x - float(frac)) < tol


# ----- §3.4: the toy model of Eq. 2 ---------------------------------------------------------------

FIG3 = {  # k: (token (2/3)^k, block E[p_k], greedy 1st iteration), gamma = 10
    1: (F(2, 3), F(2, 3), F(2, 3)), 2: (F(4, 9), F(5, 9), F(2, 3)), 3: (F(8, 27), F(4, 9), F(14, 27)),
    4: (F(16, 81), F(31, 81), F(14, 27)), 5: (F(32, 243), F(26, 81), F(34, 81)),
    6: (F(64, 729), F(205, 729), F(34, 81)), 7: (F(128, 2187), F(176, 729), F(758, 2187)),
    8: (F(256, 6561), F(1403, 6561), F(758, 2187)), 9: (F(512, 19683), F(1222, 6561), F(5702, 19683)),
    10: (F(1024, 59049), F(9817, 59049), F(5702, 19683)),
}
E_TAU = {  # gamma: (E_tok, E_blk, E_greedy1)
    1: (F(2, 3), F(2, 3), F(2, 3)), 2: (F(10, 9), F(11, 9), F(4, 3)), 3: (F(38, 27), F(5, 3), F(50, 27)),
    4: (F(130, 81), F(166, 81), F(64, 27)), 5: (F(422, 243), F(64, 27), F(226, 81)),
    6: (F(1330, 729), F(1933, 729), F(260, 81)), 7: (F(4118, 2187), F(703, 243), F(7778, 2187)),
    8: (F(12610, 6561), F(20384, 6561), F(8536, 2187)), 9: (F(38342, 19683), F(7202, 2187), F(82526, 19683)),
    10: (F(116050, 59049), F(204271, 59049), F(88228, 19683)),
}


def test_toy_figure3_ccdf_and_expected_accepted_at_gamma_10():
    drafts = exact.enumerate_drafts(TOY_TARGET, TOY_DRAFT, PREFIX, chain_parents(10))
    assert len(drafts) == 1024
    curves = {name: ccdf(name, TOY_TARGET, TOY_DRAFT, 10, drafts) for name in NAMES}
    for k, expected in FIG3.items():
        for name, frac in zip(NAMES, expected):
            assert close(curves[name][k], frac), (name, k)
    # P(tau >= k) does not depend on gamma (k <= gamma), so E[tau] at gamma = sum_{k<=gamma} P(tau >= k)
    for gamma, expected in E_TAU.items():
        for name, frac in zip(NAMES, expected):
            assert close(sum(curves[name][1:gamma + 1]), frac), (name, gamma)
    assert round(sum(curves["token"][1:]), 5) == 1.96532 and round(sum(curves["block"][1:]), 5) == 3.45935
    assert round(sum(curves["greedy_block"][1:]), 5) == 4.48245
    assert close(sum(curves["token"][1:]), 2 * (1 - F(2, 3) ** 10))   # closed form 2(1 - (2/3)^gamma)


@pytest.mark.parametrize("gamma", [1, 2, 3, 4, 5, 6])
def test_toy_expected_accepted_by_gamma(gamma):
    for name, frac in zip(NAMES, E_TAU[gamma]):
        assert close(expected_accepted(name, TOY_TARGET, TOY_DRAFT, gamma), frac), name


def _toy_tree(tokens):
    return next(t for _, t in exact.enumerate_drafts(TOY_TARGET, TOY_DRAFT, PREFIX, chain_parents(2))
                if tuple(t.tokens[1:].tolist()) == tokens)


def test_toy_section2_walkthrough():
    """gamma = 2: ab, bb accept both; ba accepts b, then a w.p. 1/2 (else Y = b); aa accepts both
    w.p. 1/4, otherwise tau = 0 and Y = b. h_1 = 1 for ba, 0 for aa; p_2 = 1/2 and 1/4."""
    for tokens in ((A, B), (B, B)):
        assert close(float(exact_law("block", _toy_tree(tokens))[2].sum()), 1)
    law = exact_law("block", _toy_tree((B, A)))
    assert close(float(law[2].sum()), F(1, 2)) and close(float(law[1, B]), F(1, 2)) and float(law[0].sum()) == 0
    law = exact_law("block", _toy_tree((A, A)))
    assert close(float(law[2].sum()), F(1, 4)) and close(float(law[0, B]), F(3, 4))
    for tokens, h1, p2 in (((B, A), 1, F(1, 2)), ((A, A), 0, F(1, 4))):
        P, Q, x = block_mod.chain_inputs(_toy_tree(tokens))
        log_w = block_mod.log_block_weights(P, Q, x)
        h, _ = block_mod.tau_law(P, Q, log_w)
        assert close(float(h[1]), h1) and close(float(torch.exp(log_w[2])), p2)


def _first_two(law):
    return [law.get(k, 0.0) for k in ((A, A), (A, B), (B, A), (B, B))]


def test_toy_appendix_a_sketch_without_final_step_is_lossy():
    """The printed sketch never runs i = gamma: law of the first two tokens [0, 0, 2/9, 7/9] instead
    of [1/9, 2/9, 2/9, 4/9], and E[tau] = 1/3 instead of 11/9 (docs/methods/block.md §2.2)."""
    def broken_law(tree, state=None):
        P, Q, x = block_mod.chain_inputs(tree)
        h, W = block_mod.tau_law(P, Q, block_mod.log_block_weights(P, Q, x))
        h[-1] = 0.0
        rows = W / W.sum(1, keepdim=True).clamp_min(1e-300)
        return block_mod.tau_probs(h)[:, None] * torch.cat([rows, P[-1:]])

    broken = Verifier("block_appendix_a", None, broken_law, block_mod.check)
    good = exact.step_output_law("block", TOY_TARGET, TOY_DRAFT, PREFIX, chain_parents(2), "iid", 2)
    bad = exact.step_output_law(broken, TOY_TARGET, TOY_DRAFT, PREFIX, chain_parents(2), "iid", 2)
    for value, frac in zip(_first_two(good), (F(1, 9), F(2, 9), F(2, 9), F(4, 9))):
        assert close(value, frac)
    for value, frac in zip(_first_two(bad), (0, 0, F(2, 9), F(7, 9))):
        assert close(value, frac)
    assert close(expected_accepted(broken, TOY_TARGET, TOY_DRAFT, 2), F(1, 3))


def test_toy_greedy_needs_the_distribution_modification():
    """Alg. 4 alone gives P(first two = ba) = 1/3, not 2/9; with Alg. 5 over steps it is lossless."""
    single = exact.step_output_law("greedy_block", TOY_TARGET, TOY_DRAFT, PREFIX, chain_parents(2), "iid", 2)
    assert close(single[(B, A)], F(1, 3))
    for gamma in (2, 3):
        multi = exact.multistep_output_law("greedy_block", TOY_TARGET, TOY_DRAFT, PREFIX,
                                           chain_parents(gamma), "iid", gamma + 1)
        want = exact.target_law(TOY_TARGET, PREFIX, gamma + 1)
        assert exact.max_abs_diff(multi, want) < 1e-12
    assert close(sum(p for seq, p in multi.items() if seq[:2] == (B, A)), F(2, 9))


# ----- §3.3 T3: LP optimality (Lemma 4 / Theorem 2) -----------------------------------------------

def lp_optimum(target, draft, gamma):
    """max E[tau] over every verifier pi(t, y | x) whose output, continued by the target, is the
    target's law of gamma+1 tokens (Lemma 2), solved with HiGHS."""
    vocab = target.vocab_size
    drafts = exact.enumerate_drafts(target, draft, PREFIX, chain_parents(gamma))
    index = {}
    for d, (_, tree) in enumerate(drafts):
        for t in range(gamma + 1):
            for y in range(vocab):
                index[(d, t, y)] = len(index)
    want = exact.target_law(target, PREFIX, gamma + 1)
    outcomes = sorted(exact.target_law(ContextIndependentLM([1 / vocab] * vocab), PREFIX, gamma + 1))
    row_of = {o: r for r, o in enumerate(outcomes)}
    a_eq = np.zeros((len(outcomes) + len(drafts), len(index)))
    b_eq = np.zeros(len(outcomes) + len(drafts))
    cost = np.zeros(len(index))
    for d, (p, tree) in enumerate(drafts):
        x = tuple(tree.tokens[1:].tolist())
        for t in range(gamma + 1):
            for y in range(vocab):
                col = index[(d, t, y)]
                cost[col] = -p * t
                a_eq[len(outcomes) + d, col] = 1.0
                head = x[:t] + (y,)
                for cont, pc in exact.target_law(target, PREFIX + head, gamma - t).items():
                    a_eq[row_of[head + cont], col] += p * pc
    for o, r in row_of.items():
        b_eq[r] = want.get(o, 0.0)
    b_eq[len(outcomes):] = 1.0
    res = linprog(cost, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    assert res.status == 0, res.message
    return -res.fun


@pytest.mark.parametrize("gamma,frac", [(2, F(11, 9)), (3, F(5, 3)), (4, F(166, 81))])
def test_lp_optimum_equals_block_on_toy(gamma, frac):
    assert abs(lp_optimum(TOY_TARGET, TOY_DRAFT, gamma) - float(frac)) < 1e-8
    assert close(expected_accepted("block", TOY_TARGET, TOY_DRAFT, gamma), frac)


# ----- §3.5: two more exact reference cases -------------------------------------------------------

CI_TARGET = ContextIndependentLM([1 / 2, 3 / 10, 1 / 5])
CI_DRAFT = ContextIndependentLM([1 / 5, 3 / 10, 1 / 2])
CI_TABLE = {
    1: (F(7, 10), F(7, 10), F(7, 10)), 2: (F(119, 100), F(5, 4), F(131, 100)),
    3: (F(1533, 1000), F(339, 200), F(1833, 1000)), 4: (F(17731, 10000), F(4127, 2000), F(22939, 10000)),
    5: (F(194117, 100000), F(47461, 20000), F(270197, 100000)),
}
BIGRAM_TARGET = MarkovLM([1 / 3] * 3, [[1 / 2, 1 / 4, 1 / 4], [1 / 3, 1 / 3, 1 / 3], [1 / 5, 3 / 5, 1 / 5]])
BIGRAM_DRAFT = MarkovLM([1 / 3] * 3, [[1 / 4, 1 / 2, 1 / 4], [1 / 2, 1 / 4, 1 / 4], [1 / 3, 1 / 3, 1 / 3]])
BIGRAM_TABLE = {
    1: (F(3, 4), F(3, 4), F(3, 4)), 2: (F(319, 240), F(329, 240), F(43, 30)),
    3: (F(25603, 14400), F(27803, 14400), F(1873, 900)),
    4: (F(204059, 96000), F(16805, 6912), F(14441, 5400)),
    5: (F(41383429, 17280000), F(1989433, 691200), F(167347, 51840)),
}


@pytest.mark.parametrize("case", ["context_independent", "bigram"])
def test_reference_cases_first_iteration(case):
    target, draft, table = ((CI_TARGET, CI_DRAFT, CI_TABLE) if case == "context_independent"
                            else (BIGRAM_TARGET, BIGRAM_DRAFT, BIGRAM_TABLE))
    curves = {name: ccdf(name, target, draft, 5) for name in NAMES}
    # P(tau >= k) does not depend on gamma >= k (token: product of min(1, r); block: Lemma 3;
    # greedy: Lemma 9), so E[tau] at gamma = sum_{k <= gamma} P(tau >= k); checked directly at 2.
    for gamma, expected in table.items():
        for name, frac in zip(NAMES, expected):
            assert close(sum(curves[name][1:gamma + 1]), frac), (case, gamma, name)
    for name, frac in zip(NAMES, table[2]):
        assert close(expected_accepted(name, target, draft, 2), frac)
    for k in range(6):   # pointwise dominance gives CCDF dominance (§3.2)
        assert curves["token"][k] <= curves["block"][k] + 1e-12 <= curves["greedy_block"][k] + 2e-12


def test_bigram_lp_optimum_equals_block():
    assert abs(lp_optimum(BIGRAM_TARGET, BIGRAM_DRAFT, 2) - float(F(329, 240))) < 1e-8


MULTI_ITERATION = {  # (gamma, verifier): E[N(i)], i = 1..5 (six decimals)
    (2, "token"): (2.329167, 4.699947, 7.081492, 9.465301, 11.849637),
    (2, "block"): (2.370833, 4.789226, 7.219372, 9.652511, 12.086404),
    (3, "token"): (2.777986, 5.614966, 8.465839, 11.319755, 14.174362),
    (3, "block"): (2.930764, 5.917801, 8.918514, 11.922718, 14.927796),
}


@pytest.mark.parametrize("key", list(MULTI_ITERATION))
def test_bigram_multi_iteration_expected_tokens(key):
    """E[N(i)] exactly, through the Markov chain on the last emitted token (Theorem 2)."""
    gamma, name = key
    step = {s: exact.step_emitted_law(name, BIGRAM_TARGET, BIGRAM_DRAFT, (s,), chain_parents(gamma))
            for s in range(3)}
    last = {0: 1.0}
    total = 0.0
    for i, want in enumerate(MULTI_ITERATION[key]):
        nxt = {}
        for s, ps in last.items():
            for seq, p in step[s].items():
                total += ps * p * len(seq)
                nxt[seq[-1]] = nxt.get(seq[-1], 0.0) + ps * p
        last = nxt
        assert abs(total - want) < 6e-7, (key, i + 1)
