"""ERSS: the optimal tree tau* (Algorithm 3), its closed forms, the index entropy, and the bounds of
Theorem 4.2 (``tunstall_bound``) and Lemma 4.3 (``lemma43_bound``, ``lemma43_fixed_curve``)."""

from __future__ import annotations

import heapq
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..tree import parse_shape
from .checks import _check_int, _cumulative, _monotone_check, _prob_vector


def _zeroth_order(r: np.ndarray) -> Callable[[tuple[int, ...]], float]:
    def acceptance(j: tuple[int, ...]) -> float:
        # Multiply the factors in sorted order so that permutations of the same indices give bit-identical
        # values: ties are then broken by the lexicographic rule, not by rounding (e.g. (1,1,2) vs (1,2,1)).
        value = 1.0
        for factor in sorted(r[i - 1] for i in j):
            value *= factor
        return value
    return acceptance


def _tau_star(r, k: int, max_index: int | None, check_monotone: str):
    k = _check_int(k, "k", 0)
    if callable(r):
        if max_index is None:
            raise ValueError("an acceptance function R(j) needs max_index (the largest child index allowed)")
        acceptance = r
        limit = _check_int(max_index, "max_index", 1)
    else:
        vec = _prob_vector(r, "r")
        _monotone_check(vec, check_monotone, "tau_star_tree")
        acceptance = _zeroth_order(vec)
        limit = vec.size if max_index is None else min(vec.size, _check_int(max_index, "max_index", 1))
    vertices: list[tuple[int, ...]] = [()]
    gains: list[float] = []
    heap = [(-float(acceptance((1,))), (1,))]
    while len(gains) < k:
        neg_value, j = heapq.heappop(heap)   # max R; ties -> lexicographically smaller tuple
        vertices.append(j)
        gains.append(-neg_value)
        child = j + (1,)
        heapq.heappush(heap, (-float(acceptance(child)), child))
        if j[-1] < limit:
            sibling = j[:-1] + (j[-1] + 1,)
            heapq.heappush(heap, (-float(acceptance(sibling)), sibling))
    return vertices, gains


def tau_star_vertices(r, k: int, *, max_index: int | None = None,
                      check_monotone: str = "warn") -> list[tuple[int, ...]]:
    """The vertices of ERSS's tau*_k as 1-based index tuples, root ``()`` first, in pop order (Algorithm 3)."""
    return _tau_star(r, k, max_index, check_monotone)[0]


def tau_star_tree(r, k: int, *, max_index: int | None = None,
                  check_monotone: str = "warn") -> tuple[list[int], float, list[float]]:
    """ERSS's optimal draft tree tau*_k (Algorithm 3, restated 1-based in docs/methods/erss.md §2.7).

    A max-heap of candidate vertices keyed by R(j), seeded with (1,); k times: pop the best vertex, add it,
    push its first child j+(1,) and its next sibling j[:-1]+(j[-1]+1,) (if the index stays <= V). Returns
    ``(parents, expected_tokens, gains)``: the parents list in pop order (DraftTree convention: a parent is
    always popped before its child, and sibling i before sibling i+1), G(tau*_k) = 1 + sum(gains), and the
    popped values (the Fig. 4 marginal curve). The trees are nested: tau*_k is a prefix of tau*_{k+1}.

    ``r`` is the 0th-order index distribution (R(j) = prod_m r[j_m], R(()) = 1) as a 1-D sequence (its
    length = the largest index, V or a measured truncation), or a callable R(j) on index tuples together
    with ``max_index``. Ties (equal R) are broken towards the lexicographically smaller tuple; for a vector r
    the product is taken in sorted order so equal multisets tie exactly.

    Optimality needs r non-increasing in the index; ``check_monotone`` ("warn", "raise" or "ignore") says
    what to do otherwise (test T3). For non-increasing r, tau*_k equals Sequoia's unbounded DP optimum for
    k+1 nodes with p = r (docs/methods/erss.md §2.7).
    """
    vertices, gains = _tau_star(r, k, max_index, check_monotone)
    position = {j: i for i, j in enumerate(vertices)}
    parents = [-1] + [position[j[:-1]] for j in vertices[1:]]
    return parents, 1.0 + float(sum(gains)), gains


STRATEGIES = ("sequence", "batch", "specinfer", "tau_star")
"""The drafting strategies the ERSS paper compares (its Figures 3-4)."""


def strategy_shape(strategy: str, k: int, r) -> list[int]:
    """The parents list of ERSS's strategy ``strategy`` with ``k`` drafted tokens: ``sequence`` (a chain),
    ``batch`` (k root children), ``specinfer`` (`tree.erss_specinfer`) or ``tau_star`` (`tau_star_tree` of the
    index distribution ``r``; a measured r that is not non-increasing is used as it is, silently: the tree is
    then the best for the 0th-order model of that r, not a proven optimum)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    k = _check_int(k, "k", 1)
    if strategy == "tau_star":
        return tau_star_tree(r, k, check_monotone="ignore")[0]
    form = {"sequence": f"chain:{k}", "batch": f"batch:{k}x1", "specinfer": f"erss_specinfer:{k}"}[strategy]
    return list(parse_shape(form))


def batch_expected_tokens(r, k: int) -> float:
    """ERSS ``batch(k)`` (k root children drawn without replacement): G = 1 + sum_{i<=k} r_i (§3.2)."""
    vec = _prob_vector(r, "r")
    return 1.0 + _cumulative(vec, _check_int(k, "k", 0))


def erss_specinfer_expected_tokens(r, branch_length: int) -> float:
    """ERSS's SpecInfer tree with k = 2 + 3L drafts (docs/methods/erss.md §2.4, §3.2).

    A shared chain (1),(1,1), then three branches (1,1,b), each continued as a chain of L tokens:
    G = 1 + r1 + r1^2 + r1^2 (r1 + r2 + r3)(1 - r1^L)/(1 - r1).
    """
    vec = _prob_vector(r, "r")
    length = _check_int(branch_length, "branch_length", 0)
    r1 = float(vec[0])
    chain = float(sum(r1 ** i for i in range(length)))
    return 1.0 + r1 + r1 ** 2 + r1 ** 2 * _cumulative(vec, 3) * chain


def index_entropy(r) -> float:
    """H[R] in nats of an index distribution r (docs/methods/erss.md eq. 3).

    If r sums to less than 1 (a measured truncation r_1..r_K, or a draft whose support misses target
    tokens), the missing mass is counted as ONE extra symbol. Merging symbols can only lower the entropy,
    so bounds of the form log(.)/H computed from it stay valid upper bounds (they get looser).
    A 2-D input [M, K] (``positional_acceptance(..., per_row=True)``) gives eq. 3's context average
    E_x H[r(.|x)], which is at most the entropy of the pooled r (the one the paper's curves use).
    """
    if isinstance(r, torch.Tensor):
        r = r.detach().to("cpu", torch.float64).numpy()
    arr = np.asarray(r, dtype=np.float64)
    if arr.ndim == 2:
        return float(np.mean([index_entropy(row) for row in arr]))
    vec = _prob_vector(arr, "r")
    tail = 1.0 - float(vec.sum())
    probs = vec[vec > 0]
    if tail > 1e-12:
        probs = np.concatenate([probs, [tail]])
    return float(-(probs * np.log(probs)).sum())


def tunstall_bound(r, k, vocab_size: int | None = None, refined: bool = False):
    """ERSS Theorem 4.2 (eq. 5): G_tau <= log(k(|Omega|-1) + |Omega|) / H[R] <= (log|Omega| + log(k+1)) / H[R].

    ``refined=False`` gives the simple right-hand form (the one plotted), ``refined=True`` the left one.
    ``vocab_size`` = |Omega|; it defaults to len(r) when r is a full distribution (sums to 1), and is
    required otherwise. H[R] is :func:`index_entropy`. ``k`` may be an int or an array of ints.
    """
    vec = _prob_vector(r, "r")
    if vocab_size is None:
        if abs(float(vec.sum()) - 1.0) > 1e-6:
            raise ValueError("r does not sum to 1 (truncated); pass vocab_size = |Omega| for Theorem 4.2")
        vocab_size = vec.size
    vocab_size = _check_int(vocab_size, "vocab_size", 1)
    ks = np.asarray(k, dtype=np.float64)
    if np.any(ks < 0):
        raise ValueError("k must be >= 0")
    entropy = index_entropy(vec)
    if entropy <= 0:
        raise ValueError("H[R] = 0 (every first draft is accepted): Theorem 4.2 is vacuous (G is unbounded)")
    if refined:
        out = np.log(ks * (vocab_size - 1) + vocab_size) / entropy
    else:
        out = (math.log(vocab_size) + np.log(ks + 1.0)) / entropy
    return float(out) if np.ndim(k) == 0 else out


@dataclass(frozen=True)
class Lemma43Result:
    """One evaluation of ERSS Lemma 4.3 (docs/methods/erss.md §3.4).

    ``d`` largest child index used anywhere in tau*_k; ``p_res = 1 - sum_{i<=d} r_i``; ``entropy_res`` =
    H[R^res] of (r_1..r_d, p_res) in nats; ``m_min`` = ceil(p_res / min_{i<=d} r_i) (1 when unconstrained,
    0 when p_res = 0); ``m`` the minimising (or given) m; ``bound`` = B(k, m).
    """
    k: int
    d: int
    p_res: float
    entropy_res: float
    m_min: int
    m: int
    bound: float


def _lemma43_value(d: int, m, k, entropy_res: float, p_res: float):
    m = np.asarray(m, dtype=np.float64)
    return (np.log(d + m) + np.log(np.asarray(k, dtype=np.float64) + 1.0)) / (entropy_res + p_res * np.log(m))


def _minimise_lemma43(d: int, k: int, entropy_res: float, p_res: float, m_min: int) -> int:
    """argmin over integers m >= m_min of B(k, m); B is quasi-convex in log m (convex / linear)."""
    grid = np.unique(np.round(np.geomspace(m_min, m_min * 1e12, 2401)))
    grid = grid[grid >= m_min]
    values = _lemma43_value(d, grid, k, entropy_res, p_res)
    i = int(np.argmin(values))
    lo = int(grid[max(i - 1, 0)])
    hi = int(grid[min(i + 1, grid.size - 1)])
    while hi - lo > 200_000:               # integer ternary search inside the bracket (unimodal)
        a = lo + (hi - lo) // 3
        b = hi - (hi - lo) // 3
        if _lemma43_value(d, a, k, entropy_res, p_res) <= _lemma43_value(d, b, k, entropy_res, p_res):
            hi = b
        else:
            lo = a
    ints = np.arange(lo, hi + 1, dtype=np.float64)
    return int(ints[int(np.argmin(_lemma43_value(d, ints, k, entropy_res, p_res)))])


def lemma43_bound(r, k: int, m: int | None = None, *, constrained: bool = True,
                  check_monotone: str = "warn") -> Lemma43Result:
    """ERSS Lemma 4.3, the bound for small k, computed as in docs/methods/erss.md §3.4.

    1. build tau*_k (Algorithm 3) and take d = the largest child index it uses anywhere;
    2. p_res = 1 - sum_{i<=d} r_i, H[R^res] = entropy of (r_1..r_d, p_res);
    3. B(k, m) = [log(d + m) + log(k + 1)] / [H[R^res] + p_res log m] for integers m >= m_min =
       ceil(p_res / min_{i<=d} r_i) (``constrained=False``: m >= 1, the [derived] still-valid variant);
    4. with ``m=None`` return the minimum over m (geometric grid over [m_min, 1e12 m_min], then an integer
       refinement; B is quasi-convex in log m); with ``m`` given evaluate B(k, m).

    Edge case p_res = 0: m = 0 and B = (log d + log(k+1)) / H[r_1..d] (Theorem 4.2 with |Omega| = d).
    r must be the 0th-order index distribution sorted non-increasing (a measured truncation r_1..r_K is
    fine as long as tau*_k does not need index K+1; a warning says when it touches index K).
    """
    vec = _prob_vector(r, "r")
    k = _check_int(k, "k", 1)
    vertices = tau_star_vertices(vec, k, check_monotone=check_monotone)
    d = max(max(j) for j in vertices[1:])
    if d == vec.size and float(vec.sum()) < 1.0 - 1e-9:
        warnings.warn(f"tau*_{k} uses index {d}, the last one in the truncated r; the true tree may need "
                      "larger indices: measure more indices", UserWarning, stacklevel=2)
    head = vec[:d]
    p_res = max(0.0, 1.0 - float(head.sum()))
    if p_res <= 1e-12:
        probs = head[head > 0]
        entropy = float(-(probs * np.log(probs)).sum())
        bound = (math.log(d) + math.log(k + 1)) / entropy
        return Lemma43Result(k, d, 0.0, entropy, 0, 0, bound)
    probs = np.concatenate([head[head > 0], [p_res]])
    entropy_res = float(-(probs * np.log(probs)).sum())
    if constrained:
        smallest = float(head.min())
        if smallest <= 0:
            raise ValueError(f"r has a zero among its first d={d} entries: m_min = p_res / min r is infinite")
        m_min = max(1, int(math.ceil(p_res / smallest - 1e-12)))
    else:
        m_min = 1
    if m is None:
        m_best = _minimise_lemma43(d, k, entropy_res, p_res, m_min)
    else:
        m_best = _check_int(m, "m", 1)
        if m_best < m_min:
            raise ValueError(f"m={m_best} is below m_min={m_min} (the constraint keeps tau*_k unchanged)")
    bound = float(_lemma43_value(d, m_best, k, entropy_res, p_res))
    return Lemma43Result(k, d, p_res, entropy_res, m_min, m_best, bound)


def lemma43_fixed_curve(r, ks, k_ref: int = 384, *, constrained: bool = True,
                        check_monotone: str = "warn") -> np.ndarray:
    """The fixed-m curve of ERSS Fig. 3/4 (docs/methods/erss.md §3.4 step 5).

    Freeze (d, m, p_res, H[R^res]) at the Lemma 4.3 optimum for k = ``k_ref`` (the paper's 384) and vary
    only k: B_fix(k) = [log(d_ref + m_ref) + log(k + 1)] / [H_ref + p_res,ref log m_ref]. Valid for
    k <= k_ref (tau*_k is inside tau*_k_ref). Its marginal is log((k+1)/k) / H, about 1/(k H).
    """
    ref = lemma43_bound(r, k_ref, constrained=constrained, check_monotone=check_monotone)
    ks_arr = np.asarray(ks, dtype=np.float64)
    if np.any(ks_arr > k_ref) or np.any(ks_arr < 0):
        raise ValueError(f"the fixed-m curve is only valid for 0 <= k <= k_ref={k_ref}")
    if ref.m == 0:
        return (math.log(ref.d) + np.log(ks_arr + 1.0)) / ref.entropy_res
    return _lemma43_value(ref.d, ref.m, ks_arr, ref.entropy_res, ref.p_res)
