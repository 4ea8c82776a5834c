"""Tests of specdec_lib.theory against the golden numbers of docs/methods/sequoia.md and docs/methods/erss.md and
against brute force (every small ordered tree, exact enumeration, Monte Carlo)."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from specdec_lib import theory as T
from specdec_lib.theory.acceptance import RACE_HEAD, _race_mc

A = [0.6, 0.2, 0.1]
REPO = T.sequoia_repo_acceptance()


def approx(values, expected, tol):
    assert len(values) == len(expected)
    for v, e in zip(values, expected):
        if e is None:
            assert v == -math.inf
        else:
            assert abs(v - e) <= tol, (values, expected)


# ----------------------------------------------------------------------------------------------------
# brute force over ordered trees
# ----------------------------------------------------------------------------------------------------

def plane_trees(n: int):
    """All ordered rooted trees with n nodes as nested tuples of children."""
    if n == 1:
        yield ()
        return
    rest = n - 1
    for parts in _compositions(rest):
        for kids in itertools.product(*[list(plane_trees(s)) for s in parts]):
            yield tuple(kids)


def _compositions(n: int):
    if n == 0:
        yield ()
        return
    for first in range(1, n + 1):
        for tail in _compositions(n - first):
            yield (first,) + tail


def value(tree, p):
    return 1.0 + sum((p[i] if i < len(p) else 0.0) * value(c, p) for i, c in enumerate(tree))


def depth(tree):
    return 1 + max((depth(c) for c in tree), default=0)


def branching(tree):
    return max([len(tree)] + [branching(c) for c in tree])


def to_parents(tree):
    parents, queue = [-1], [(tree, 0)]
    while queue:
        node, idx = queue.pop(0)
        for child in node:
            parents.append(idx)
            queue.append((child, len(parents) - 1))
    return parents


def tree_depth(parents):
    d = [0] * len(parents)
    for i in range(1, len(parents)):
        d[i] = d[parents[i]] + 1
    return max(d) + 1


def max_children(parents):
    counts = [0] * len(parents)
    for p in parents[1:]:
        counts[p] += 1
    return max(counts)


ALL_TREES = {n: list(plane_trees(n)) for n in range(1, 9)}


def test_brute_force_enumeration_sizes():
    # Catalan(n-1) ordered trees with n nodes
    assert [len(ALL_TREES[n]) for n in range(1, 9)] == [1, 1, 2, 5, 14, 42, 132, 429]


@pytest.mark.parametrize("seed", range(8))
def test_dp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    p = rng.dirichlet(np.ones(k + 1))[:k]          # sum < 1
    if seed % 2 == 0:
        p = np.sort(p)[::-1]                        # monotone half of the cases, non-monotone the other
    if seed == 5:
        p[1] = 0.0                                  # a zero position
    n_max = 8
    unbounded = T.sequoia_table(p, n_max)
    bounded = T.sequoia_table(p, n_max, n_max)
    for n in range(1, n_max + 1):
        trees = [t for t in ALL_TREES[n] if branching(t) <= k] if n > 1 else ALL_TREES[1]
        best = max(value(t, p) for t in trees)
        assert unbounded.expected_tokens(n) == pytest.approx(best, abs=1e-12)
        parents = unbounded.tree(n)
        assert len(parents) == n and max_children(parents) <= k
        assert T.expected_tokens_positional(parents, p) == pytest.approx(best, abs=1e-12)
        for d in range(1, n + 1):
            fitting = [t for t in trees if depth(t) <= d]
            g = bounded.expected_tokens(n, d)
            if not fitting:
                assert g == -math.inf
                with pytest.raises(ValueError, match="no tree of size"):
                    bounded.tree(n, d)
                continue
            best_d = max(value(t, p) for t in fitting)
            assert g == pytest.approx(best_d, abs=1e-12)
            parents = bounded.tree(n, d)
            assert len(parents) == n and tree_depth(parents) <= d and max_children(parents) <= k
            assert all(0 <= parents[i] < i for i in range(1, n))
            assert T.expected_tokens_positional(parents, p) == pytest.approx(best_d, abs=1e-12)
            # the public entry point agrees
            tree, e = T.sequoia_tree(p, n, d)
            assert e == pytest.approx(best_d, abs=1e-12) and len(tree) == n and tree_depth(tree) <= d


def test_positional_value_matches_recursive_value_on_all_trees():
    p = [0.5, 0.3, 0.15]
    for t in ALL_TREES[7]:
        assert T.expected_tokens_positional(to_parents(t), p) == pytest.approx(value(t, p), abs=1e-14)


# ----------------------------------------------------------------------------------------------------
# Sequoia golden values (docs/methods/sequoia.md §3.4)
# ----------------------------------------------------------------------------------------------------

def test_golden_c_vector_a():
    expected = [1, 1.6, 1.96, 2.176, 2.376, 2.5056, 2.6256, 2.7456, 2.8456, 2.92336, 2.99536, 3.06736,
                3.13936, 3.19936, 3.25936, 3.306016]
    table = T.sequoia_table(A, 16)
    np.testing.assert_allclose(table.curve(), expected, atol=1e-12)
    assert list(table.sizes) == list(range(1, 17))


def test_golden_g_table_vector_a():
    rows = {
        2: [None, 1.6],
        3: [None, 1.8, 1.96],
        4: [None, 1.9, 2.16, 2.176],
        5: [None, None, 2.28, 2.376, 2.376],
        6: [None, None, 2.4, 2.496, 2.5056, 2.5056],
        7: [None, None, 2.5, 2.616, 2.6256],
        8: [None, None, 2.56, 2.716, 2.7456],
        9: [None, None, 2.62, 2.788, 2.8456],
        10: [None, None, 2.66, 2.86, 2.9176, 2.92336],
    }
    table = T.sequoia_table(A, 10, 10)
    for n, row in rows.items():
        approx([table.expected_tokens(n, d) for d in range(1, len(row) + 1)], row, 1e-12)
        # beyond the listed depths G stays at c(n)
        assert table.expected_tokens(n, n) == pytest.approx(T.sequoia_table(A, n).expected_tokens(n))
    assert table.grid.shape == (11, 11)
    # optimal shapes quoted in the spec: n=4 is the chain, n=5 is [[[[]]],[]]
    assert T.sequoia_tree(A, 4)[0] == [-1, 0, 1, 2]
    tree5, _ = T.sequoia_tree(A, 5)
    assert tree_depth(tree5) == 4 and max_children(tree5) == 2


def test_golden_large_n_vector_a():
    table = T.sequoia_table(A, 1024)
    rows = {  # n: (Sequoia c, best kxL (value, k, L), best full k-ary value, chain)
        8: (2.7456, (2.5680, 2, 3), 2.4580, 2.4580),
        16: (3.3060, (3.0750, 3, 5), 2.9520, 2.4993),
        32: (3.8324, (3.2364, 3, 10), 3.3616, 2.5),
        64: (4.3262, (3.25, 3, 21), 3.6893, 2.5),
        128: (4.7756, (3.25, 3, 42), 4.0951, 2.5),
        256: (5.1972, (3.25, 3, 85), 4.1611, 2.5),
        512: (5.5800, (3.25, 3, 170), 4.6856, 2.5),
        1024: (5.9359, (3.25, 3, 341), 4.6856, 2.5),
    }
    for n, (c, ksl, kary, chain) in rows.items():
        assert table.expected_tokens(n) == pytest.approx(c, abs=1e-4)
        v, k, length = T.best_k_sequences(A, n)
        assert v == pytest.approx(ksl[0], abs=1e-4) and (k, length) == ksl[1:]
        assert T.best_kary(A, n)[0] == pytest.approx(kary, abs=1e-4)
        assert T.chain_expected_tokens(A[0], n - 1) == pytest.approx(chain, abs=1e-4)
    assert T.best_kary(A, 16)[1:] == (2, 3)


def test_best_kary_with_a_minimum_branching_never_returns_the_chain():
    """A chain-heavy vector makes the chain the best full k-ary tree; ``min_branching = 2`` keeps the best tree
    with k >= 2 (brute force over k and the levels that fit), and refuses a size no such level fits."""
    steep = [0.9, 0.04, 0.02, 0.01]
    assert T.best_kary(steep, 64, depth=8)[1] == 1
    value, k, levels = T.best_kary(steep, 64, depth=8, min_branching=2)
    fits = lambda k, d: sum(k ** i for i in range(d + 1)) <= 64
    brute = max((T.kary_expected_tokens(steep, k, d), k, d) for k in range(2, 64) for d in range(0, 8) if fits(k, d))
    assert k >= 2 and value == pytest.approx(brute[0], abs=1e-12) and (k, levels) == brute[1:]
    with pytest.raises(ValueError, match="min_branching"):
        T.best_kary(steep, 2, min_branching=2)


@pytest.mark.parametrize("size,depth", [(16, 4), (64, 12), (13, 3), (40, 6)])
def test_depth_bounded_baselines_stay_within_the_depth_and_below_the_dp(size, depth):
    """With Sequoia's depth bound (root counted) the baselines are the best k x L / k-ary trees of at most that
    depth (brute force over k), and the bounded DP tree of the same size and depth is at least as good."""
    ksl = T.best_k_sequences(A, size, depth=depth)
    brute = max((T.k_sequences_expected_tokens(A, k, min((size - 1) // k, depth - 1)), k) for k in range(1, size))
    assert ksl[0] == pytest.approx(brute[0], abs=1e-12) and ksl[2] + 1 <= depth
    kary = T.best_kary(A, size, depth=depth)
    assert kary[2] + 1 <= depth and kary[0] <= T.best_kary(A, size)[0] + 1e-12
    assert T.sequoia_tree(A, size, depth)[1] >= max(ksl[0], kary[0]) - 1e-12
    assert T.best_k_sequences(A, size, depth=None) == T.best_k_sequences(A, size)
    assert T.best_k_sequences(A, size, depth=1)[0] == T.best_kary(A, size, depth=1)[0] == 1.0  # the root alone
    with pytest.raises(ValueError, match="depth"):
        T.best_kary(A, size, depth=0)


def test_golden_repo_vector():
    assert REPO[0] == pytest.approx(423 / 667) and REPO.sum() == pytest.approx(0.926537, abs=1e-6)
    table = T.sequoia_table(REPO, 1024)
    sizes = [2 ** i for i in range(1, 11)]
    np.testing.assert_allclose([table.expected_tokens(n) for n in sizes],
                               [1.6342, 2.2914, 2.7322, 3.1303, 3.5007, 3.8554, 4.2021, 4.5456, 4.8862, 5.2172],
                               atol=1e-4)
    np.testing.assert_allclose([T.best_k_sequences(REPO, n)[0] for n in sizes],
                               [1.6342, 2.2914, 2.6621, 2.9603, 3.1614, 3.3155, 3.4222, 3.4955, 3.5301, 3.5328],
                               atol=1e-4)
    bounded = T.sequoia_table(REPO, 32, 10)
    rows = {
        2: [None] + [1.6342] * 9,
        4: [None, 1.7991, 2.1443] + [2.2914] * 7,
        8: [None, 1.8606, 2.3743, 2.5933, 2.6980] + [2.7322] * 5,
        16: [None, 1.9025, 2.5207, 2.8645, 3.0126, 3.0876, 3.1252] + [3.1303] * 3,
        32: [None, 1.9250, 2.6256, 3.0560, 3.3047, 3.4123, 3.4628, 3.4896, 3.5007, 3.5007],
    }
    for n, row in rows.items():
        approx([bounded.expected_tokens(n, d) for d in range(1, 11)], row, 1e-4)


def test_table1_bounds():
    a = T.table1_bounds(A, 3)
    assert a["sequence"] == pytest.approx(2.5) and a["k_sequences"] == pytest.approx(3.25)
    assert a["binary"] == pytest.approx(5.0) and a["kary"] == pytest.approx(10.0)
    assert a["sequoia"] == pytest.approx(10.0)
    r = T.table1_bounds(REPO)
    assert r["sequence"] == pytest.approx(2.7336, abs=1e-4)
    assert r["k_sequences"] == pytest.approx(3.5328, abs=1e-4)
    assert r["binary"] == pytest.approx(1 / (1 - 495 / 667))
    assert r["kary"] == pytest.approx(13.612, abs=1e-3)
    # finite structures increase towards their limit and never exceed it
    for k in (1, 2, 3):
        values = [T.k_sequences_expected_tokens(A, k, length) for length in range(0, 60)]
        assert all(b >= a_ - 1e-15 for a_, b in zip(values, values[1:]))
        assert max(values) <= T.table1_bounds(A, k)["k_sequences"] + 1e-12
        levels = [T.kary_expected_tokens(A, k, d) for d in range(0, 60)]
        assert max(levels) <= T.table1_bounds(A, k)["kary"] + 1e-12
    # Sequoia exceeds the k x L limit at moderate sizes
    assert T.sequoia_table(A, 32).expected_tokens(32) > a["k_sequences"]
    table = T.sequoia_table(REPO, 512)
    assert table.expected_tokens(512) / T.best_k_sequences(REPO, 512)[0] == pytest.approx(4.886 / 3.530, abs=2e-3)
    assert T.table1_bounds([1.0])["sequence"] == math.inf


def test_closed_forms_match_positional_value():
    p = [0.55, 0.25, 0.1]
    for k, length in [(1, 4), (2, 3), (3, 2)]:
        parents = [-1]
        for branch in range(k):
            prev = 0
            for _ in range(length):
                parents.append(prev)
                prev = len(parents) - 1
        parents = sorted_bfs(parents)
        assert T.expected_tokens_positional(parents, p) == pytest.approx(
            T.k_sequences_expected_tokens(p, k, length))
    # full binary tree with 2 drafted levels
    assert T.expected_tokens_positional([-1, 0, 0, 1, 1, 2, 2], p) == pytest.approx(T.kary_expected_tokens(p, 2, 2))
    # chain of n nodes = Leviathan with gamma = n - 1
    assert T.expected_tokens_positional(list(range(-1, 6)), p) == pytest.approx(T.chain_expected_tokens(0.55, 6))
    # children beyond the vector contribute 0
    assert T.expected_tokens_positional([-1, 0, 0, 0, 0], [0.5, 0.2]) == pytest.approx(1.7)


def sorted_bfs(parents):
    """Relabel a parents list into BFS order (children contiguous, order kept)."""
    kids = [[] for _ in parents]
    for i, p in enumerate(parents[1:], 1):
        kids[p].append(i)
    order, queue = [], [0]
    while queue:
        v = queue.pop(0)
        order.append(v)
        queue.extend(kids[v])
    index = {v: i for i, v in enumerate(order)}
    return [-1] + [index[parents[v]] for v in order[1:]]


def test_positional_model_monte_carlo():
    """Prop. 3.4: simulate the positional model on a fixed tree; the mean equals F(T)."""
    p = np.array([0.5, 0.25, 0.1])
    parents = [-1, 0, 0, 1, 1, 2, 4]     # root->{1,2}, 1->{3,4}, 2->{5}, 4->{6}
    kids = [[i for i in range(len(parents)) if parents[i] == v] for v in range(len(parents))]
    rng = np.random.default_rng(0)
    n = 40000
    total = 0
    for u in rng.random((n, 4)):
        node, tokens, level = 0, 1, 0
        while kids[node]:
            cum = np.cumsum(p[: len(kids[node])])
            j = int(np.searchsorted(cum, u[level], side="right"))
            if j >= len(kids[node]):
                break
            node, tokens, level = kids[node][j], tokens + 1, level + 1
        total += tokens
    expected = T.expected_tokens_positional(parents, p)
    assert abs(total / n - expected) < 4 * 0.9 / math.sqrt(n)


def test_leviathan_closed_forms():
    assert T.chain_expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert T.chain_speedup(0.8, 4, 0.05) == pytest.approx(2.80133, abs=1e-5)
    assert T.chain_expected_tokens(1.0, 7) == 8.0
    assert T.chain_expected_tokens(0.8, 4) == pytest.approx(T.expected_tokens_positional(list(range(-1, 4)), [0.8]))


def test_power_law_growth():
    p = T.power_law_acceptance(0.4, 0.5, 64)
    assert p[0] == pytest.approx(0.6) and p.sum() == pytest.approx(0.95)
    table = T.sequoia_table(p, 1024)
    sizes = [16, 32, 64, 128, 256, 512, 1024]
    c = [table.expected_tokens(n) for n in sizes]
    np.testing.assert_allclose(c, [2.9285, 3.2657, 3.5967, 3.9209, 4.2449, 4.5669, 4.8886], atol=1e-4)
    steps = np.diff(c)
    assert np.all((steps > 0.3) & (steps < 0.36))
    assert T.best_k_sequences(p, 16)[0] == pytest.approx(2.773, abs=1e-3)
    assert T.best_k_sequences(p, 1024)[0] == pytest.approx(3.374, abs=1e-3)
    assert T.power_law_construction(10 ** 4, 1.0) == (9, 4, pytest.approx(4.0056, abs=1e-4))
    assert T.power_law_construction(10 ** 6, 1.0) == (13, 5, pytest.approx(4.9579, abs=1e-4))
    assert T.power_law_construction(10 ** 4, 0.5) == (84, 2, pytest.approx(2.6846, abs=1e-4))
    assert T.growth_threshold(0.25) == pytest.approx(12.7, abs=0.05)
    assert T.growth_threshold(0.5) == pytest.approx(9047, rel=1e-3)
    assert T.growth_threshold(1.0) == pytest.approx(2.4e221, rel=0.02)
    assert T.sequoia_growth_lower_bound(1e4, 0.5) == pytest.approx(0.21, abs=0.005)
    # DP value >= the construction's value for r_k = k^-b with the k-ary tree of that size
    pl = T.power_law_acceptance(1.0, 1.0, 16)
    for n in (40, 100):
        k = int(math.floor(math.log(n)))
        levels = max(dd for dd in range(0, 10) if (k ** (dd + 1) - 1) // (k - 1) <= n)
        size = (k ** (levels + 1) - 1) // (k - 1)
        assert T.sequoia_table(pl, size).expected_tokens(size) >= T.kary_expected_tokens(pl, k, levels) - 1e-12


def test_lemma_c5_random_check():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        m = int(rng.integers(1, 200))
        x = rng.uniform(1e-6, min(1.0, math.log(1.9) / m))
        assert (1 - (1 - x) ** m) / x >= m / 10


def test_dp_input_errors():
    with pytest.raises(ValueError, match="sums to"):
        T.sequoia_tree([0.7, 0.5], 4)
    with pytest.raises(ValueError, match="negative"):
        T.sequoia_tree([0.7, -0.1], 4)
    with pytest.raises(ValueError, match="size must be >= 1"):
        T.sequoia_tree(A, 0)
    with pytest.raises(ValueError, match="no tree of size 5"):
        T.sequoia_tree(A, 5, 2)          # K=3: at most 4 nodes fit in 2 levels
    with pytest.raises(ValueError, match="parent"):
        T.expected_tokens_positional([-1, 0, 3, 1], A)
    with pytest.raises(ValueError, match="exceeds the table's max_depth"):
        T.sequoia_table(A, 5, 3).expected_tokens(5, 4)


# ----------------------------------------------------------------------------------------------------
# ERSS tau* and bounds (docs/methods/erss.md §2.7, §3.7)
# ----------------------------------------------------------------------------------------------------

T1 = [0.6, 0.25, 0.1, 0.05]


def test_tau_star_t1():
    vertices = T.tau_star_vertices(T1, 12)
    assert vertices[:13] == [(), (1,), (1, 1), (2,), (1, 1, 1), (1, 2), (2, 1), (1, 1, 1, 1), (3,),
                             (1, 1, 2), (1, 2, 1), (2, 1, 1), (1, 1, 1, 1, 1)]
    parents, g, gains = T.tau_star_tree(T1, 10)
    np.testing.assert_allclose(gains[:4], [0.6, 0.36, 0.25, 0.216])
    np.testing.assert_allclose([1 + sum(gains[:k]) for k in range(1, 11)],
                               [1.6, 1.96, 2.21, 2.426, 2.576, 2.726, 2.8556, 2.9556, 3.0456, 3.1356], atol=1e-12)
    assert g == pytest.approx(3.1356)
    assert all(0 <= parents[i] < i for i in range(1, len(parents)))
    assert T.expected_tokens_positional(parents, T1) == pytest.approx(g)
    np.testing.assert_allclose([T.chain_expected_tokens(0.6, k) for k in range(1, 11)],
                               [1.6, 1.96, 2.176, 2.3056, 2.38336, 2.430016, 2.45801, 2.474806, 2.484883, 2.49093],
                               atol=1e-6)
    np.testing.assert_allclose([T.batch_expected_tokens(T1, k) for k in range(1, 5)], [1.6, 1.85, 1.95, 2.0])
    np.testing.assert_allclose([T.erss_specinfer_expected_tokens(T1, L) for L in (1, 2, 3)],
                               [2.302, 2.5072, 2.63032], atol=1e-12)


def test_tau_star_nested_and_asymptotics():
    parents, g, gains = T.tau_star_tree(T1, 10 ** 4)
    for k in (1, 5, 50, 500):
        p_k, g_k, gains_k = T.tau_star_tree(T1, k)
        assert p_k == parents[: k + 1] and gains_k == gains[:k]
    h = T.index_entropy(T1)
    assert g == pytest.approx(9.70382, abs=1e-5)
    gaps = [math.log(3 * k + 4) / h - (1 + sum(gains[:k])) for k in (1, 10, 100, 1000, 10 ** 4)]
    assert all(0.273 <= x <= 0.2841 for x in gaps)
    assert gaps[-1] == pytest.approx(0.27483, abs=1e-5)
    assert gains[-1] == pytest.approx(9.72e-5, rel=1e-3)


def test_tau_star_t2_t3_and_monotonicity_check():
    r2 = [0.5, 0.25, 0.125, 0.125]
    np.testing.assert_allclose([T.tau_star_tree(r2, k)[1] for k in range(1, 9)],
                               [1.5, 1.75, 2.0, 2.125, 2.25, 2.375, 2.5, 2.625])
    r3 = [0.5, 0.1, 0.4]
    with pytest.warns(UserWarning, match="not non-increasing"):
        parents, g, _ = T.tau_star_tree(r3, 3)
    assert parents == [-1, 0, 1, 2] and g == pytest.approx(1.875)
    assert T.batch_expected_tokens(r3, 3) == pytest.approx(2.0)      # the greedy tree is suboptimal here
    with pytest.raises(ValueError, match="not non-increasing"):
        T.tau_star_tree(r3, 3, check_monotone="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T.tau_star_tree(r3, 3, check_monotone="ignore")
        T.tau_star_tree(T1, 3)


@pytest.mark.parametrize("seed", range(6))
def test_tau_star_equals_sequoia_dp_for_zeroth_order(seed):
    rng = np.random.default_rng(100 + seed)
    k_pos = int(rng.integers(2, 7))
    r = np.sort(rng.dirichlet(np.ones(k_pos + 1))[:k_pos])[::-1]
    table = T.sequoia_table(r, 41)
    _, _, gains = T.tau_star_tree(r, 40)
    for k in range(0, 41):
        assert 1 + sum(gains[:k]) == pytest.approx(table.expected_tokens(k + 1), abs=1e-12)


def test_tau_star_callable_acceptance():
    r = np.array(T1)
    fn = lambda j: float(np.prod([r[i - 1] for i in j]))
    parents, g, gains = T.tau_star_tree(fn, 10, max_index=4)
    assert g == pytest.approx(T.tau_star_tree(T1, 10)[1])
    with pytest.raises(ValueError, match="max_index"):
        T.tau_star_tree(fn, 3)


def test_theorem_4_2_t1():
    for k, simple, refined in [(1, 2.01279, 1.88354), (3, 2.68372, 2.48274), (8, 3.46866, 3.22540)]:
        assert T.tunstall_bound(T1, k) == pytest.approx(simple, abs=1e-5)
        assert T.tunstall_bound(T1, k, refined=True) == pytest.approx(refined, abs=1e-5)
    assert T.index_entropy(T1) == pytest.approx(1.0331141, abs=1e-7)
    assert T.index_entropy(T1) / math.log(2) == pytest.approx(1.4904686, abs=1e-7)
    with pytest.raises(ValueError, match="vocab_size"):
        T.tunstall_bound([0.5, 0.2], 3)
    assert T.tunstall_bound([0.5, 0.2], 3, vocab_size=10) > 0


def test_lemma_4_3_t1_t2():
    rows = [(1, 1, 0.4, 0.6730117, 1, 3, 1.869234), (2, 1, 0.4, 0.6730117, 1, 7, 2.189684),
            (3, 2, 0.15, 0.9376370, 1, 1, 2.650180), (4, 2, 0.15, 0.9376370, 1, 2, 2.876062),
            (8, 3, 0.05, 1.0331141, 1, 1, 3.468658)]
    for k, d, p_res, h, m_min, m, bound in rows:
        res = T.lemma43_bound(T1, k)
        assert (res.k, res.d, res.m_min, res.m) == (k, d, m_min, m)
        assert res.p_res == pytest.approx(p_res) and res.entropy_res == pytest.approx(h, abs=1e-7)
        assert res.bound == pytest.approx(bound, abs=1e-6)
        assert res.bound >= T.tau_star_tree(T1, k)[1]
    assert T.lemma43_bound(T1, 8).bound == pytest.approx(T.tunstall_bound(T1, 8), abs=1e-9)
    res = T.lemma43_bound([0.5, 0.25, 0.125, 0.125], 8)
    assert (res.d, res.m, res.p_res) == (4, 0, 0.0)
    # ln(36) / (1.75 bits in nats) = 2.954243; the spec prints 2.95420 (last digits off by 4e-5)
    assert res.bound == pytest.approx(math.log(36) / (1.75 * math.log(2)), abs=1e-12)
    assert res.bound == pytest.approx(2.95420, abs=1e-4)
    with pytest.raises(ValueError, match="below m_min"):
        T.lemma43_bound([0.3, 0.2, 0.2], 1, m=1)    # d = 1, p_res = 0.7, m_min = ceil(0.7 / 0.3) = 3
    # m given explicitly evaluates B(k, m)
    assert T.lemma43_bound(T1, 1, m=3).bound == pytest.approx(1.869234, abs=1e-6)


def t7_vector():
    i = np.arange(2, 128257, dtype=np.float64)
    w = i ** -2.2
    return np.concatenate([[0.7], 0.3 * w / w.sum()])


def test_t7_llm_like_bounds():
    r = t7_vector()
    assert T.index_entropy(r) == pytest.approx(1.250381, abs=1e-6)
    _, _, gains = T.tau_star_tree(r, 384)
    rows = [(1, 1.7000, 1, 2.1883, 2, 9.961), (2, 2.1900, 1, 2.6375, 4, 10.285),
            (3, 2.5330, 1, 2.9011, 7, 10.515), (4, 2.7731, 1, 3.0777, 12, 10.694),
            (8, 3.2851, 2, 3.8053, 4, 11.164), (16, 3.8141, 3, 4.4224, 3, 11.672),
            (32, 4.3650, 4, 5.0482, 3, 12.203), (64, 4.9138, 5, 5.6856, 4, 12.745),
            (128, 5.4652, 8, 6.4228, 7, 13.293), (256, 6.0192, 11, 7.1276, 9, 13.844),
            (384, 6.3426, 13, 7.5543, 11, 14.168)]
    for k, g, d, bound, m, thm in rows:
        assert 1 + sum(gains[:k]) == pytest.approx(g, abs=1e-4)
        res = T.lemma43_bound(r, k)
        assert (res.d, res.m) == (d, m)
        assert res.bound == pytest.approx(bound, abs=1e-4)
        assert T.tunstall_bound(r, k) == pytest.approx(thm, abs=1e-3)
    res = T.lemma43_bound(r, 384)
    assert res.p_res == pytest.approx(0.02242, abs=1e-5) and res.entropy_res == pytest.approx(1.1550, abs=1e-4)
    ks = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384]
    np.testing.assert_allclose(T.lemma43_fixed_curve(r, ks),
                               [3.2026, 3.5381, 3.9607, 4.4469, 4.9731, 5.5218, 6.0826, 6.6497, 7.2199, 7.5543],
                               atol=1e-4)
    with pytest.raises(ValueError, match="k_ref"):
        T.lemma43_fixed_curve(r, [400])
    free128 = T.lemma43_bound(r, 128, constrained=False)
    free384 = T.lemma43_bound(r, 384, constrained=False)
    assert free128.bound == pytest.approx(6.3374, abs=1e-4)
    assert free384.bound == pytest.approx(7.3971, abs=1e-4) and free384.m == 3


# ----------------------------------------------------------------------------------------------------
# measuring acceptance from rows (docs/methods/sequoia.md §3.2, docs/methods/erss.md §3.6-3.7)
# ----------------------------------------------------------------------------------------------------

def t64(x):
    return torch.tensor(x, dtype=torch.float64)


F = Fraction
SEQUOIA_CASES = {  # case: (P, Q, k, without_replacement, iid, topk, naive cumulative or values)
    "C1": ([1, 0], [.5, .5], 2, [F(1, 2), F(1, 2)], [F(1, 2), F(1, 4)], [1, 0], [F(1, 2), F(1, 4)]),
    "C2": ([.6, .4], [.6, .4], 2, [1, 0], [1, 0], [F(3, 5), F(2, 5)], [F(13, 25), F(6, 25)]),
    "C3": ([.1, .2, .3, .4], [.4, .3, .2, .1], 4, [F(3, 5), F(23, 140), F(1277, 16800), F(2683, 16800)],
           [F(3, 5), F(3, 25), F(6, 125), F(29, 1250)], [.1, .2, .3, .4], [.2, .15, .1146, .0891]),
    "C4": ([0, 0, 1], [.5, .5, 0], 3, [0, 0, 1], [0, 0, 0], [0, 0, 1], [0, 0, 0]),
    "C5": ([.5, .3, .2, 0, 0], [.2] * 5, 5, [F(3, 5), F(1, 5), F(1, 15), F(1, 15), F(1, 15)],
           [F(3, 5), F(4, 25), F(17, 250), F(43, 1250), F(86, 3125)], [.5, .3, .2, 0, 0], None),
    "C6": ([.7, .2, .1], [.2, .7, .1], 3, [F(1, 2), F(1, 3), F(1, 6)], [F(1, 2), F(1, 10), F(2, 25)],
           [.2, .7, .1], None),
}
NAIVE_CUM = {"C5": 0.67232, "C6": 0.5633}


@pytest.mark.parametrize("case", sorted(SEQUOIA_CASES))
def test_sequoia_robustness_table(case):
    p, q, k, wo, iid, topk, naive = SEQUOIA_CASES[case]
    for scheme, expected, tol in (("without_replacement", wo, 1e-12), ("iid", iid, 1e-12),
                                  ("topk", topk, 1e-12), ("naive", naive, 1e-4)):
        got = T.positional_acceptance(t64(p), t64(q), k, scheme)
        if expected is None:
            assert float(got.sum()) == pytest.approx(NAIVE_CUM[case], abs=1e-4)
            continue
        np.testing.assert_allclose(got.numpy(), [float(x) for x in expected], atol=tol)
    # optimal transport at k=1: Sequoia = SpecInfer = 1 - TV
    one = 1 - T.total_variation(t64(p), t64(q))
    for scheme in ("without_replacement", "iid"):
        assert float(T.positional_acceptance(t64(p), t64(q), 1, scheme)[0]) == pytest.approx(one)


def test_erss_t4_t5_exact():
    p, q = t64([1 / 2, 3 / 10, 1 / 5]), t64([3 / 10, 2 / 5, 3 / 10])
    r_erss = T.erss_index_distribution(p, q, 3, "erss")
    r_gss = T.erss_index_distribution(p, q, 3, "gss")
    np.testing.assert_allclose(r_erss.numpy(), [65 / 82, 841 / 5330, 132 / 2665], atol=1e-12)
    np.testing.assert_allclose(r_gss.numpy(), [4 / 5, 13 / 140, 3 / 28], atol=1e-12)
    assert T.total_variation(p, q) == pytest.approx(0.2)
    assert T.harmonic_mean_divergence(p, q) == pytest.approx(1341 / 2800)
    assert T.kl_divergence(p, q) == pytest.approx(0.0880152, abs=1e-7)
    assert T.erss_first_acceptance(p, q) == pytest.approx(65 / 82)
    assert T.index_entropy(r_erss.numpy()) == pytest.approx(0.624368, abs=1e-6)
    assert T.index_entropy(r_gss.numpy()) == pytest.approx(0.638521, abs=1e-6)
    np.testing.assert_allclose([T.batch_expected_tokens(r_erss.numpy(), k) for k in (1, 2, 3)],
                               [1.792683, 1.950469, 2.0], atol=1e-6)
    np.testing.assert_allclose([T.batch_expected_tokens(r_gss.numpy(), k) for k in (1, 2, 3)],
                               [1.8, 1.892857, 2.0], atol=1e-6)
    # context-free P, Q (exactly 0th order): sequence and SpecInfer-tree values
    assert T.chain_expected_tokens(float(r_erss[0]), 3) == pytest.approx(2.919108, abs=1e-6)
    assert T.chain_expected_tokens(float(r_gss[0]), 3) == pytest.approx(2.952, abs=1e-6)
    assert T.chain_expected_tokens(float(r_erss[0]), 5) == pytest.approx(3.626894, abs=1e-6)
    assert T.chain_expected_tokens(float(r_gss[0]), 5) == pytest.approx(3.689280, abs=1e-6)
    assert T.erss_specinfer_expected_tokens(r_erss.numpy(), 1) == pytest.approx(3.049375, abs=1e-6)
    assert T.erss_specinfer_expected_tokens(r_gss.numpy(), 1) == pytest.approx(3.080, abs=1e-6)

    p5, q5 = t64([.5, .25, .125, .125]), t64([.25] * 4)
    np.testing.assert_allclose(T.erss_index_distribution(p5, q5, 4, "erss").numpy(),
                               [7 / 10, 3203 / 16380, 3632 / 45045, 477 / 20020], atol=1e-12)
    np.testing.assert_allclose(T.erss_index_distribution(p5, q5, 4, "gss").numpy(),
                               [3 / 4, 1 / 12, 1 / 12, 1 / 12], atol=1e-12)
    assert T.harmonic_mean_divergence(p5, q5) == pytest.approx(11 / 24)
    assert T.erss_first_acceptance(p5, q5) == pytest.approx(0.7)
    # T6: P = Q
    assert float(T.erss_index_distribution(p5, p5, 4, "erss")[0]) == pytest.approx(1.0)
    assert T.harmonic_mean_divergence(p5, p5) == pytest.approx(0.5)


def random_rows(m, v, seed, alpha=0.7, zeros=False):
    rng = np.random.default_rng(seed)
    p = torch.from_numpy(rng.dirichlet(np.full(v, alpha), size=m))
    q = torch.from_numpy(rng.dirichlet(np.full(v, alpha), size=m))
    if zeros:
        p[:, 0] = 0
        q[:, 1] = 0
        p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    return p, q


def test_acceptance_properties_on_random_rows():
    p, q = random_rows(12, 5, 3)
    per_row = T.positional_acceptance(p, q, 5, "race", per_row=True)
    assert per_row.shape == (12, 5)
    # Lemma C.1: D_HM <= r_ERSS(1) <= 1 - TV = r_GSS(1), per context; exact closed form agrees
    hm, tv = T.harmonic_mean_divergence(p, q), T.total_variation(p, q)
    first = T.erss_first_acceptance(p, q)
    gss = T.positional_acceptance(p, q, 5, "without_replacement", per_row=True)
    assert torch.all(hm <= per_row[:, 0] + 1e-12) and torch.all(per_row[:, 0] <= 1 - tv + 1e-12)
    torch.testing.assert_close(first, per_row[:, 0])
    torch.testing.assert_close(gss[:, 0], 1 - tv)
    # eq. 3: the context-averaged entropy is at most the pooled one
    assert T.index_entropy(per_row) <= T.index_entropy(per_row.mean(0)) + 1e-12
    assert T.index_entropy(per_row[:1]) == pytest.approx(T.index_entropy(per_row[0]))
    # with all V tokens drafted something is always accepted (supp P inside supp Q)
    torch.testing.assert_close(per_row.sum(-1), torch.ones(12, dtype=torch.float64))
    torch.testing.assert_close(gss.sum(-1), torch.ones(12, dtype=torch.float64))
    assert float(T.positional_acceptance(p, q, 5, "topk").sum()) == pytest.approx(1.0)
    # a target token outside the draft support: never accepted, the defect mass is kept
    pz, qz = random_rows(4, 4, 5, zeros=True)
    r = T.positional_acceptance(pz, qz, 4, "race", per_row=True)
    assert torch.all(r.sum(-1) < 1 - 1e-6)
    torch.testing.assert_close(1 - r.sum(-1), pz[:, 1])
    # K larger than V pads with zeros
    assert T.positional_acceptance(p, q, 7, "without_replacement").shape == (7,)
    assert float(T.positional_acceptance(p, q, 7, "without_replacement")[5:].abs().sum()) == 0.0


def test_monte_carlo_estimators_agree_with_exact():
    p, q = random_rows(6, 5, 11)
    exact_wo = T.positional_acceptance(p, q, 4, "without_replacement", method="exact")
    exact_race = T.positional_acceptance(p, q, 4, "race", method="exact")
    g1 = torch.Generator().manual_seed(1)
    mc_wo = T.positional_acceptance(p, q, 4, "without_replacement", method="monte_carlo", num_samples=3000,
                                    generator=g1)
    g2 = torch.Generator().manual_seed(2)
    mc_race = T.positional_acceptance(p, q, 4, "race", method="monte_carlo", num_samples=6000, generator=g2)
    # standard errors: RB estimators <= sqrt(1/4 / (6 * 3000)), the race's with 6000 // 32 orders per winner
    assert float((mc_wo - exact_wo).abs().max()) < 4 * math.sqrt(0.25 / 18000)
    assert float((mc_race - exact_race).abs().max()) < 4 * math.sqrt(0.25 / 36000)
    # a deliberately wrong exact answer (with-replacement residual) is far from the MC estimate: the
    # comparison can fail
    wrong = T.positional_acceptance(p, q, 4, "iid")
    assert float((mc_wo - wrong).abs().max()) > 10 * math.sqrt(0.25 / 18000)
    # same seed, same output
    again = T.positional_acceptance(p, q, 4, "race", method="monte_carlo", num_samples=6000,
                                    generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(again, mc_race)


@pytest.mark.parametrize("head", [RACE_HEAD, 2, 0])
@pytest.mark.parametrize("vocab, k, zeros", [(5, 4, False), (5, 4, True), (6, 2, False), (4, 4, True), (7, 6, False)])
def test_race_index_law_integrates_the_race_out(vocab, k, zeros, head):
    """`_race_mc` (docs/methods/erss.md §5.4): its mean over many independent estimates is the exact race index
    law (inclusion-exclusion) whether the P-winner is enumerated (head >= V), partly sampled or all sampled;
    each estimate is less noisy than the indicator of a sampled race; a wrong law fails the same test."""
    p, q = random_rows(3, vocab, 7 * vocab + k, zeros=zeros)
    exact_law = T.positional_acceptance(p, q, k, "race", method="exact", per_row=True, exact_limit=10**7)
    reps = 2000
    draws = _race_mc(p.repeat(reps, 1), q.repeat(reps, 1), k, 1, torch.Generator().manual_seed(3), head=head)
    draws = draws.view(reps, 3, k)
    se = draws.std(0) / math.sqrt(reps)
    assert float(((draws.mean(0) - exact_law).abs() - 5 * se).max()) < 1e-12
    # the estimates of P(index <= j) are far less noisy than the indicators of sampled races, F (1 - F):
    # measured 0.1-0.3% of their variance with the winner enumerated, under 7% with two winners enumerated
    cdf = exact_law.cumsum(-1)
    ratio = float(draws.cumsum(-1).var(0).sum() / (cdf * (1 - cdf)).sum())
    assert ratio < (0.1 if head >= 2 else 0.8), ratio
    if head >= vocab:  # the first index is exact: erss_first_acceptance's closed form
        torch.testing.assert_close(draws[:, :, 0], T.erss_first_acceptance(p, q).expand(reps, -1))
    # the control: the without-replacement (GSS) law differs from the race's by far more than the noise
    wrong = T.positional_acceptance(p, q, k, "without_replacement", method="exact", per_row=True)
    assert float(((draws.mean(0) - wrong).abs() / se.clamp_min(1e-12)).max()) > 10


def test_without_replacement_mc_handles_uniform_fallback():
    p, q = t64([[0, 0, 1, 0]]), t64([[.5, .5, 0, 0]])
    mc = T.positional_acceptance(p, q, 4, "without_replacement", method="monte_carlo", num_samples=50)
    ex = T.positional_acceptance(p, q, 4, "without_replacement", method="exact")
    # after both draft tokens are rejected the third child is uniform over {2, 3}
    np.testing.assert_allclose(ex.numpy(), [0, 0, 0.5, 0.5], atol=1e-12)
    assert float((mc - ex).abs().max()) < 0.3
    assert float(mc.sum()) == pytest.approx(1.0)


def test_measurement_input_errors():
    p, q = random_rows(3, 4, 0)
    with pytest.raises(ValueError, match="vocabulary"):
        T.positional_acceptance(p, q[:, :3], 2)
    with pytest.raises(ValueError, match="not 1"):
        T.positional_acceptance(p * 2, q, 2)
    with pytest.raises(ValueError, match="unknown sampling"):
        T.positional_acceptance(p, q, 2, "spectr")
    with pytest.raises(ValueError, match="matched"):
        T.positional_acceptance(p[:2], q, 2)
    with pytest.raises(ValueError, match="exact_limit"):
        T.positional_acceptance(p, q, 4, "without_replacement", method="exact", exact_limit=2)
    with pytest.raises(ValueError, match="coupling"):
        T.erss_index_distribution(p, q, 2, "spec")


def test_strategy_shape_gives_each_erss_strategy():
    r = [0.5, 0.2, 0.1, 0.05]
    assert T.strategy_shape("sequence", 3, r) == [-1, 0, 1, 2]
    assert T.strategy_shape("batch", 3, r) == [-1, 0, 0, 0]
    parents, _, _ = T.tau_star_tree(r, 5)
    assert T.strategy_shape("tau_star", 5, r) == parents
    assert len(T.strategy_shape("specinfer", 4, r)) == 5
    with pytest.raises(ValueError, match="strategy"):
        T.strategy_shape("star", 3, r)
    with pytest.raises(ValueError, match="k"):
        T.strategy_shape("sequence", 0, r)


def test_acceptance_by_scheme_is_positional_acceptance_per_scheme():
    g = torch.Generator().manual_seed(0)
    P = torch.softmax(torch.randn(4, 6, generator=g, dtype=torch.float64), -1)
    Q = torch.softmax(torch.randn(4, 6, generator=g, dtype=torch.float64), -1)
    out = T.acceptance_by_scheme(P, Q, 3, {"a": "iid", "b": "without_replacement"}, num_samples=8)
    assert set(out) == {"a", "b"} and out["a"].shape == (4, 3)
    ref = T.positional_acceptance(P, Q, 3, "iid", per_row=True).numpy()
    assert np.allclose(out["a"], ref)
    with pytest.raises(ValueError, match="schemes"):
        T.acceptance_by_scheme(P, Q, 3, {})


def test_two_children_without_replacement_by_prefix_sums_equal_the_enumeration():
    """k = 2 without replacement (Sequoia / GSS): the O(V log V) form equals enumerating the rejected first
    child, on random rows with zeros, one-hot drafts and ties, and positional_acceptance uses it."""
    from specdec_lib.theory.acceptance import _without_replacement_exact_row, _without_replacement_two_row

    rng = np.random.default_rng(0)
    for trial in range(300):
        vocab = int(rng.integers(2, 30))
        p = rng.dirichlet(np.ones(vocab) * rng.choice([0.1, 1.0, 5.0]))
        q = rng.dirichlet(np.ones(vocab) * rng.choice([0.1, 1.0, 5.0]))
        if trial % 5 == 0:
            q[rng.integers(vocab)] = 0.0
            q /= q.sum()
        if trial % 7 == 0:
            p[rng.integers(vocab)] = 0.0
            p /= p.sum()
        if trial % 11 == 0:  # the rejected token takes all the draft's mass: uniform over the unseen ones
            q = np.zeros(vocab)
            q[0] = 1.0
        if trial % 13 == 0:
            q = p.copy()
        np.testing.assert_allclose(_without_replacement_two_row(p, q), _without_replacement_exact_row(p, q, 2),
                                   atol=1e-13)
    gen = torch.Generator().manual_seed(1)
    P = torch.softmax(3 * torch.randn(4, 50, generator=gen, dtype=torch.float64), -1)
    Q = torch.softmax(3 * torch.randn(4, 50, generator=gen, dtype=torch.float64), -1)
    got = T.positional_acceptance(P, Q, 2, "without_replacement", per_row=True)
    want = np.stack([_without_replacement_exact_row(P[i].numpy(), Q[i].numpy(), 2) for i in range(4)])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-13)


def test_power_law_fit_tells_a_power_law_from_a_geometric_decay():
    fit = T.power_law_fit(T.power_law_acceptance(0.3, 0.7, 16))
    assert fit["b"] == pytest.approx(0.7, abs=1e-9) and fit["r2_power"] == pytest.approx(1.0, abs=1e-12)
    assert fit["fit_gain"] > 0.1
    geo = T.power_law_fit(T.geometric_acceptance(0.3, 0.8, 16))   # r_k = 0.3 * 0.8^(k-1)
    assert geo["r2_geometric"] == pytest.approx(1.0, abs=1e-12) and geo["fit_gain"] < -0.1
    flat = T.power_law_fit([0.5, 0.0, 0.0, 0.0])
    assert flat["b"] == 0.0 and math.isnan(flat["fit_gain"])
    with pytest.raises(ValueError, match="at least 3 positions"):
        T.power_law_fit([0.5, 0.2])
    with pytest.raises(ValueError, match="floor"):
        T.power_law_fit([0.5, 0.2, 0.1], floor=0.0)
    with pytest.raises(ValueError, match="ratio"):
        T.geometric_acceptance(0.3, 1.0, 16)
