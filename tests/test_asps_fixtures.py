"""ASpS (Hu & Huang, ICML'24) toy numbers and lemmas as tests: docs/methods/asps.md §2.4 and §3.

SpS is the `token` verifier on chains. Exact fractions are compared with float64 results (atol 1e-12).
"""

from __future__ import annotations

import random
from fractions import Fraction as F

import pytest
import torch

from specdec_lib import exact
from specdec_lib.models.synthetic import ContextIndependentLM, TabularLM, random_markov_pair
from specdec_lib.tree import DraftTree, chain_parents
from specdec_lib.verifiers import asps as asps_mod
from specdec_lib.verifiers import exact_law

a, b, c, EOS = 0, 1, 2, 3
PREFIX = (0,)


def close(x, frac, tol=1e-12):
    return abs(float(x) - float(frac)) < tol


def chain(tokens, q_rows, p_rows):
    """A chain after root token 0: drafts ``tokens``, draft rows ``q_rows`` (the leaf's is zero)."""
    vocab = len(p_rows[0])
    q = [list(map(float, r)) for r in q_rows] + [[0.0] * vocab]
    return DraftTree(torch.tensor((0,) + tuple(tokens)), torch.tensor(chain_parents(len(tokens))),
                     torch.tensor(q, dtype=torch.float64),
                     torch.tensor([list(map(float, r)) for r in p_rows], dtype=torch.float64))


def pn_of(law, tokens):
    """Algorithm 1's PN matrix [L, V] from a law [L+1, V]: the all-accepted mass back on its cell."""
    L = len(tokens)
    pn = law[:L].clone()
    pn[L - 1, tokens[-1]] += law[L].sum()
    return pn


def assert_pn(law, tokens, rows):
    pn = pn_of(law, tokens)
    want = torch.tensor([[float(v) for v in r] + [0.0] * (pn.shape[1] - len(r)) for r in rows],
                        dtype=torch.float64)
    assert torch.allclose(pn, want, atol=1e-12, rtol=0), (tokens, pn, want)


# ----- Table 1: one token ---------------------------------------------------------------------------

def test_table1_single_token_coupling():
    draft, target = ContextIndependentLM([.5, .3, .2]), ContextIndependentLM([.3, .4, .3])
    drafts = exact.enumerate_drafts(target, draft, PREFIX, chain_parents(1))
    for name in ("token", "asps"):
        accept = 0.0
        for p, tree in drafts:
            law = exact_law(name, tree)
            accept += p * float(law[1].sum())
            if int(tree.tokens[1]) == a:   # given x = a: a 60%, b 20%, c 20%
                assert close(law[1].sum(), F(3, 5)) and close(law[0, b], F(1, 5)) and close(law[0, c], F(1, 5))
        assert close(accept, F(4, 5))   # = 1 - TV
        assert close(exact.expected_step_tokens(name, target, draft, PREFIX, chain_parents(1)), F(9, 5))


# ----- Tables 2 and 3: two tokens after a ------------------------------------------------------------

P0, Q0 = (F(3, 10), F(2, 5), F(3, 10), 0), (F(1, 2), F(3, 10), F(1, 5), 0)
P1, Q1 = (F(1, 3), F(1, 3), F(1, 3), 0), (F(2, 5), F(2, 5), F(1, 5), 0)
END = (0, 0, 0, 1)     # all five outputs are leaves: after them the target is a point mass on EOS
TABLE23_DRAFTS = {     # draft: (probability, tree)
    (a, a): (F(1, 5), chain((a, a), [Q0, Q1], [P0, P1, END])),
    (a, b): (F(1, 5), chain((a, b), [Q0, Q1], [P0, P1, END])),
    (a, c): (F(1, 10), chain((a, c), [Q0, Q1], [P0, P1, END])),
    (b,): (F(3, 10), chain((b,), [Q0], [P0, END])),
    (c,): (F(1, 5), chain((c,), [Q0], [P0, END])),
}
TABLE23_PN = {  # draft: (SpS rows, ASpS rows)
    (a, a): ([(0, .2, .2), (.5, 0, .1)], [(0, .25, .25), (.5, 0, 0)]),
    (a, b): ([(0, .2, .2), (0, .5, .1)], [(0, .25, .25), (0, .5, 0)]),
    (a, c): ([(0, .2, .2), (0, 0, .6)], [(0, 0, 0), (0, 0, 1)]),
    (b,): ([(0, 1, 0)], [(0, 1, 0)]),
    (c,): ([(0, 0, 1)], [(0, 0, 1)]),
}
TABLE23_JOINT = {  # draft -> output -> probability (Table 2 = SpS, Table 3 = ASpS)
    "token": {(a, a): {(a, a): .10, (a, c): .02, (b,): .04, (c,): .04},
              (a, b): {(a, b): .10, (a, c): .02, (b,): .04, (c,): .04},
              (a, c): {(a, c): .06, (b,): .02, (c,): .02}, (b,): {(b,): .3}, (c,): {(c,): .2}},
    "asps": {(a, a): {(a, a): .10, (b,): .05, (c,): .05}, (a, b): {(a, b): .10, (b,): .05, (c,): .05},
             (a, c): {(a, c): .10}, (b,): {(b,): .3}, (c,): {(c,): .2}},
}


def _outputs(law, tokens):
    """{output without EOS: conditional probability} of one drafted chain (float64 rounding leaves
    cells of ~1e-17 where the rationals give 0, docs/methods/asps.md T1, so those are left out)."""
    out = {}
    for j in range(len(tokens) + 1):
        for y, p in enumerate(law[j].tolist()):
            if p > 1e-12:
                seq = tuple(t for t in tuple(tokens[:j]) + (y,) if t != EOS)
                out[seq] = out.get(seq, 0.0) + p
    return out


@pytest.mark.parametrize("name,col", [("token", 0), ("asps", 1)])
def test_tables_2_and_3(name, col):
    stats = dict(acc=0.0, full=0.0, acc_a=0.0, full_a=0.0, length=0.0)
    marginal = {}
    per_draft_tokens = {}
    for draft, (prob, tree) in TABLE23_DRAFTS.items():
        law = exact_law(name, tree)
        assert_pn(law, draft, TABLE23_PN[draft][col])
        outputs = _outputs(law, draft)
        assert set(outputs) == set(TABLE23_JOINT[name][draft])
        for seq, p in outputs.items():
            assert close(float(prob) * p, TABLE23_JOINT[name][draft][seq])
            marginal[seq] = marginal.get(seq, 0.0) + float(prob) * p
            stats["length"] += float(prob) * p * len(seq)
        accepted = sum(j * float(law[j].sum()) for j in range(len(draft) + 1))
        full = float(law[len(draft)].sum())
        per_draft_tokens[draft] = accepted + 1
        stats["acc"] += float(prob) * accepted
        stats["full"] += float(prob) * full
        if draft[0] == a:
            stats["acc_a"] += float(prob / F(1, 2)) * accepted
            stats["full_a"] += float(prob / F(1, 2)) * full
    # the output marginals equal the target for both: aa .1, ab .1, ac .1, b .4, c .3
    assert marginal.keys() == {(a, a), (a, b), (a, c), (b,), (c,)}
    for seq, want in {(a, a): .1, (a, b): .1, (a, c): .1, (b,): .4, (c,): .3}.items():
        assert close(marginal[seq], want)
    want = {"token": dict(acc=1.06, full=.76, acc_a=1.12, full_a=.52, length=1.3),
            "asps": dict(acc=1.10, full=.80, acc_a=1.20, full_a=.60, length=1.3)}[name]
    for key, value in want.items():
        assert close(stats[key], value), key
    # E[tokens/step] if the outputs were not leaves (bonus when fully accepted): 2.06 vs 2.10
    assert close(stats["acc"] + 1, {"token": 2.06, "asps": 2.10}[name])
    # per-draft expectations are not monotone: aa 2.1 vs 2.0, ac 2.2 vs 3.0; a-branch 2.12 vs 2.20
    want_aa, want_ac = {"token": (2.1, 2.2), "asps": (2.0, 3.0)}[name]
    assert close(per_draft_tokens[(a, a)], want_aa) and close(per_draft_tokens[(a, c)], want_ac)
    assert close(stats["acc_a"] + 1, {"token": 2.12, "asps": 2.20}[name])


def test_tables_2_and_3_through_the_harness():
    """The same toy as finite tree LMs: the step's output law (EOS stripped) is the target's."""
    target = TabularLM(4, {(0,): [.3, .4, .3, 0], (0, a): [1 / 3, 1 / 3, 1 / 3, 0]}, eos_token_id=EOS)
    draft = TabularLM(4, {(0,): [.5, .3, .2, 0], (0, a): [.4, .4, .2, 0]}, eos_token_id=EOS)
    for name in ("token", "asps"):
        law = exact.step_emitted_law(name, target, draft, PREFIX, chain_parents(2))
        stripped = {}
        for seq, p in law.items():
            key = tuple(t for t in seq if t != EOS)
            stripped[key] = stripped.get(key, 0.0) + p
        assert exact.max_abs_diff(stripped, {(a, a): .1, (a, b): .1, (a, c): .1, (b,): .4, (c,): .3}) < 1e-12


# ----- Table 4 (reconstructed): a sub-distribution, not yet the target ------------------------------

def test_table4_step_is_a_sub_distribution():
    eos = 2
    target = TabularLM(3, {(0,): [.6, .4, 0], (0, a): [1 / 3, 2 / 3, 0]}, eos_token_id=eos)
    draft = TabularLM(3, {(0,): [.4, .6, 0], (0, a): [.5, .5, 0]}, eos_token_id=eos)
    laws = {}
    for name in ("token", "asps"):
        emitted = exact.step_emitted_law(name, target, draft, PREFIX, chain_parents(2))
        laws[name] = {}
        for seq, p in emitted.items():
            key = tuple(t for t in seq if t != eos)
            laws[name][key] = laws[name].get(key, 0.0) + p
        # P_s = {aa: 2/15, ab: 4/15, a (then stop this step): 1/5, b: 2/5}; P_s(aa)/P_s(ab) = P(a|a)/P(b|a)
        assert exact.max_abs_diff(laws[name], {(a, a): 2 / 15, (a, b): 4 / 15, (a,): 1 / 5, (b,): 2 / 5}) < 1e-12
    for p, tree in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(2)):
        assert torch.allclose(exact_law("asps", tree), exact_law("token", tree), atol=1e-15)  # D_1 = 1


# ----- Fixture B: i.i.d. q and p, exact rationals -----------------------------------------------------

FB_DRAFT = ContextIndependentLM([1 / 2, 3 / 10, 1 / 5])
FB_TARGET = ContextIndependentLM([3 / 10, 2 / 5, 3 / 10])
FIXTURE_B = {  # n: (SpS E[tok/step], SpS P(all), ASpS E[tok/step], ASpS P(all))
    1: (F(9, 5), F(4, 5), F(9, 5), F(4, 5)),
    2: (F(61, 25), F(16, 25), F(5, 2), F(7, 10)),
    3: (F(369, 125), F(64, 125), F(391, 125), F(628, 1000)),
    4: (F(2101, 625), F(256, 625), F(739, 200), F(567, 1000)),
    5: (F(11529, 3125), F(1024, 3125), F(42167, 10000), F(5217, 10000)),
}


def test_fixture_b_expected_tokens_and_full_acceptance():
    for n, (e_sps, all_sps, e_asps, all_asps) in FIXTURE_B.items():
        for name, e, full in (("token", e_sps, all_sps), ("asps", e_asps, all_asps)):
            law = exact.accepted_length_law(name, FB_TARGET, FB_DRAFT, PREFIX, chain_parents(n))
            assert close(sum((t + 1) * p for t, p in enumerate(law)), e), (name, n)
            assert close(law[n], full, tol=1e-4 if name == "asps" and n == 5 else 1e-12), (name, n)
        alpha = F(4, 5)   # SpS closed form (1 - alpha^(n+1)) / (1 - alpha), alpha = 1 - TV
        assert e_sps == (1 - alpha ** (n + 1)) / (1 - alpha)


FIXTURE_B_N3 = {  # draft: (SpS rows, SpS D, ASpS rows, ASpS D)
    (a, a, a): ([(0, F(1, 5), F(1, 5)), (0, F(3, 25), F(3, 25)), (F(27, 125), F(9, 125), F(9, 125))], F(27, 125),
                [(0, F(49, 125), F(49, 125)), (0, 0, 0), (F(27, 125), 0, 0)], F(27, 125)),
    (a, a, b): ([(0, F(1, 5), F(1, 5)), (0, F(3, 25), F(3, 25)), (0, F(9, 25), 0)], F(9, 25),
                [(0, F(13, 50), F(13, 50)), (0, 0, 0), (0, F(12, 25), 0)], F(12, 25)),
    (a, b, c): ([(0, F(1, 5), F(1, 5)), (0, 0, 0), (0, 0, F(3, 5))], F(3, 5),
                [(0, 0, 0), (0, 0, 0), (0, 0, 1)], F(1)),
    (b, a, a): ([(0, 0, 0), (0, F(1, 5), F(1, 5)), (F(9, 25), F(3, 25), F(3, 25))], F(9, 25),
                [(0, 0, 0), (0, F(8, 25), F(8, 25)), (F(9, 25), 0, 0)], F(9, 25)),
}


@pytest.mark.parametrize("draft", list(FIXTURE_B_N3))
def test_fixture_b_per_draft_matrices(draft):
    tree = next(t for _, t in exact.enumerate_drafts(FB_TARGET, FB_DRAFT, PREFIX, chain_parents(3))
                if tuple(t.tokens[1:].tolist()) == draft)
    sps_rows, sps_d, asps_rows, asps_d = FIXTURE_B_N3[draft]
    for name, rows, d in (("token", sps_rows, sps_d), ("asps", asps_rows, asps_d)):
        law = exact_law(name, tree)
        assert_pn(law, draft, rows)
        assert close(law[3].sum(), d)


# ----- §3 recipes: reference implementation, lemmas, theorem ------------------------------------------

def reference_pn(q, p, x, method):
    """docs/methods/asps.md §2.3.5 in exact rationals (q, p: L rows of Fractions, x: L tokens)."""
    L, V = len(q), len(q[0])
    pn = [[F(0)] * V for _ in range(L)]
    d = F(1)
    for k in range(L):
        if k > 0:
            pn[k - 1][x[k - 1]] = F(0)
        t = x[k]
        mref = q[k] if method == "asps" else [d * v for v in q[k]]
        m = [d * v for v in p[k]]
        c1 = [max(F(0), u - v) for u, v in zip(mref, m)]
        s = sum(c1)
        w = c1[t] / s / q[k][t] if s > 0 else F(1)
        if method == "asps":
            pn = [[w * v for v in row] for row in pn]
        pn[k] = [w * max(F(0), u - v) for u, v in zip(m, mref)]
        pn[k][t] = min(mref[t], m[t]) / q[k][t]
        d = pn[k][t]
    return pn, d


def _random_rational_row(rng, vocab, zeros=False):
    weights = [rng.randint(0 if zeros else 1, 6) for _ in range(vocab)]
    if sum(weights) == 0:
        weights[0] = 1
    return [F(w, sum(weights)) for w in weights]


def test_vectorised_log_space_matches_the_rational_algorithm():
    """T3/T4: the closed form used by the module equals Algorithm 1 step by step (and token = SpS)."""
    rng = random.Random(5)
    for trial in range(25):
        vocab, L = rng.randint(2, 5), rng.randint(1, 4)
        q = [_random_rational_row(rng, vocab, zeros=trial % 2 == 1) for _ in range(L)]
        p = [_random_rational_row(rng, vocab, zeros=trial % 3 == 0) for _ in range(L + 1)]
        x = [rng.choice([t for t in range(vocab) if q[k][t] > 0]) for k in range(L)]
        tree = chain(x, q, p)
        for name, method in (("asps", "asps"), ("token", "sps")):
            pn, d = reference_pn(q, p, x, method)
            law = exact_law(name, tree)
            got = pn_of(law, x)
            assert torch.allclose(got, torch.tensor([[float(v) for v in r] for r in pn], dtype=torch.float64),
                                  atol=1e-12, rtol=0), (trial, name)
            assert close(law[L].sum(), d)
            assert torch.allclose(law[L], float(d) * torch.tensor([float(v) for v in p[L]], dtype=torch.float64),
                                  atol=1e-12)
            for j in range(L - 1):   # T2: the draft cell of every earlier row is empty
                assert float(law[j, x[j]]) == 0.0


def test_lemmas_b5_b6_martingale_and_d_dominance():
    """Lemma B.5: sum_a q(a) PN_{sigma+a}[rows <= L] = PN_sigma with its draft cell emptied; Lemma B.6:
    sum_a q(a) PN_{sigma+a}[row L+1] = D_sigma p_{L+1}; Thm 5.5: D^ASpS >= D^SpS on every prefix."""
    target, draft = random_markov_pair(4, 0.8, 3, eos=False)
    for L in (1, 2):
        for _, sigma in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(L)):
            x = tuple(sigma.tokens[1:].tolist())
            extended = [t for _, t in exact.enumerate_drafts(target, draft, PREFIX, chain_parents(L + 1))
                        if tuple(t.tokens[1:L + 1].tolist()) == x]
            for name in ("asps", "token"):
                base = pn_of(exact_law(name, sigma), x)
                d_sigma = float(base[L - 1, x[-1]])
                base[L - 1, x[-1]] = 0.0
                acc = torch.zeros(L + 1, 4, dtype=torch.float64)
                for tree in extended:
                    y = tuple(tree.tokens[1:].tolist())
                    acc += float(draft.probs(PREFIX + x)[y[-1]]) * pn_of(exact_law(name, tree), y)
                assert torch.allclose(acc[:L], base, atol=1e-12)
                assert torch.allclose(acc[L], d_sigma * target.probs(PREFIX + x), atol=1e-12)
            assert float(exact_law("asps", sigma)[L].sum()) >= float(exact_law("token", sigma)[L].sum()) - 1e-15


def test_module_helper_handles_an_empty_chain():
    tree = chain((), [], [[.2, .8]])
    assert torch.allclose(asps_mod.law(tree), torch.tensor([[.2, .8]], dtype=torch.float64))
