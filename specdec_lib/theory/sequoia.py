"""Sequoia's dynamic programme (App. C.2.1 and C.2.2, Algorithms 4-5) and power-law acceptance
(Def. 3.5, Thm 3.6 / C.3): ``sequoia_table``, ``sequoia_tree``, ``power_law_acceptance``, the growth
bound of Thm C.3 and ``power_law_fit`` (does a measured rejection curve follow a power law?)."""

from __future__ import annotations

import math

import numpy as np

from .checks import _check_int, _prob_vector


class SequoiaTable:
    """The solved DP: optimal expected tokens for every size n <= max_size (and depth d <= max_depth).

    Built by :func:`sequoia_table`. Bounded depth (App. C.2.2, Algorithm 5 with the erratum fixed: T[1][l][b]
    is 1 for b = 0 and -inf for b >= 1) keeps the whole grid G(n, d); unbounded depth (App. C.2.1) keeps
    c(n). Infeasible entries are ``-inf``.

    * ``expected_tokens(size, depth=None)`` -> G(size, depth) (or c(size)); depth None = the table's bound.
    * ``tree(size, depth=None)`` -> an optimal parents list (DraftTree convention, BFS order, children of a
      node contiguous and ordered by position).
    * ``curve(depth=None)`` -> array of the optimum for sizes 1..max_size (for plots).
    * ``grid`` -> G[n, d] for n in 0..max_size, d in 0..max_depth (bounded tables only; row/col 0 unused).

    Ties are broken as the authors' code does (smallest split y, first argmax), but optimal shapes are not
    unique: compare values, sizes and depths, never shapes (docs/methods/sequoia.md §2.4).
    """

    def __init__(self, acceptance_vector: np.ndarray, max_size: int, max_depth: int | None,
                 values: np.ndarray, split: np.ndarray, best_branch: np.ndarray):
        self.acceptance_vector = acceptance_vector
        self.max_size = max_size
        self.max_depth = max_depth
        self._values = values          # bounded: T-max G[m, l]; unbounded: c[m]
        self._split = split            # bounded: y*[m, l, b]; unbounded: y*[m, b]
        self._best_branch = best_branch  # bounded: b*[m, l]; unbounded: b*[m]

    @property
    def sizes(self) -> np.ndarray:
        return np.arange(1, self.max_size + 1)

    @property
    def grid(self) -> np.ndarray:
        if self.max_depth is None:
            raise ValueError("an unbounded-depth table has no depth grid; use curve() or build with max_depth")
        return self._values.copy()

    def _resolve_depth(self, size: int, depth: int | None) -> int | None:
        if depth is None:
            return self.max_depth
        depth = _check_int(depth, "depth", 1)
        if self.max_depth is None:
            if depth < size:
                raise ValueError(f"this table has unbounded depth; depth {depth} < size {size} needs a table "
                                 f"built with max_depth >= {depth}")
            return None
        if depth > self.max_depth:
            raise ValueError(f"depth {depth} exceeds the table's max_depth {self.max_depth}")
        return depth

    def expected_tokens(self, size: int, depth: int | None = None) -> float:
        size = _check_int(size, "size", 1)
        if size > self.max_size:
            raise ValueError(f"size {size} exceeds the table's max_size {self.max_size}")
        depth = self._resolve_depth(size, depth)
        if depth is None:
            return float(self._values[size])
        return float(self._values[size, depth])

    def curve(self, depth: int | None = None) -> np.ndarray:
        if depth is None and self.max_depth is None:
            return self._values[1:].copy()
        depth = self.max_depth if depth is None else self._resolve_depth(self.max_size, depth)
        return self._values[1:, depth].copy()

    def tree(self, size: int, depth: int | None = None) -> list[int]:
        value = self.expected_tokens(size, depth)
        depth = self._resolve_depth(size, depth)
        if not math.isfinite(value):
            raise ValueError(
                f"no tree of size {size} and depth <= {depth} exists with at most "
                f"K={self.acceptance_vector.size} children per node (K = length of the acceptance vector)")
        if depth is None:
            root = (size, 0, int(self._best_branch[size]))
        else:
            root = (size, depth, int(self._best_branch[size, depth]))
        parents = [-1]
        queue = [(root, 0)]
        head = 0
        while head < len(queue):
            state, node = queue[head]
            head += 1
            for child in self._children(state):
                parents.append(node)
                queue.append((child, len(parents) - 1))
        if len(parents) != size:  # internal consistency of the reconstruction
            raise RuntimeError(f"DP reconstruction produced {len(parents)} nodes instead of {size}")
        return parents

    def _children(self, state: tuple[int, int, int]) -> list[tuple[int, int, int]]:
        """Child states (size, level, branching) of a state, in child-position order (branch_map)."""
        m, level, b = state
        bounded = self.max_depth is not None

        def sub(s: int) -> tuple[int, int, int]:
            if bounded:
                return (s, level - 1, int(self._best_branch[s, level - 1]))
            return (s, 0, int(self._best_branch[s]))

        kids = []
        while b >= 2:
            y = int(self._split[m, level, b]) if bounded else int(self._split[m, b])
            kids.append(sub(m - y))
            m, b = y, b - 1
        if b == 1:
            kids.append(sub(m - 1))
        kids.reverse()
        return kids


def sequoia_table(acceptance_vector, max_size: int, max_depth: int | None = None) -> SequoiaTable:
    """Solve Sequoia's DP for every size n <= ``max_size`` (and depth d <= ``max_depth``).

    Bounded depth (``max_depth`` given) is App. C.2.2, Algorithm 5 as restated in docs/methods/sequoia.md §2.4 with
    the erratum fixed (Algorithm 4's feasibility is the finiteness of T):

        T[1][l][0] = 1, T[1][l][b>=1] = -inf                     (root alone)
        T[m][l][1] = 1 + p_1 * best(m-1, l-1)
        T[m][l][b] = max_{1<=y<=m-1} T[y][l][b-1] + p_b * best(m-y, l-1)
        G(n, d)    = max_b T[n][d][b],  best(s, l) = max_j T[s][l][j]

    where y = size of (root + first b-1 branches) and m - y = size of the b-th branch (child position b).
    Unbounded depth (``max_depth=None``) is App. C.2.1 (docs/methods/sequoia.md §2.3): the same recurrence without
    the level index, c(n) = max_b h[n][b]. Both are exact for any p (monotone or not) because occupied
    child positions are consecutive by construction. K = len(acceptance_vector) bounds the branching.
    Cost O(n^2 K d) (bounded) or O(n^2 K) (unbounded), vectorised over the split.
    """
    p = _prob_vector(acceptance_vector)
    n_max = _check_int(max_size, "max_size", 1)
    k_max = min(p.size, max(n_max - 1, 1))
    if max_depth is None:
        values, split, best_branch = _dp_unbounded(p, n_max, k_max)
        return SequoiaTable(p, n_max, None, values, split, best_branch)
    d_max = _check_int(max_depth, "max_depth", 1)
    values, split, best_branch = _dp_bounded(p, n_max, d_max, k_max)
    return SequoiaTable(p, n_max, d_max, values, split, best_branch)


def _dp_unbounded(p: np.ndarray, n_max: int, k_max: int):
    neg = -np.inf
    h = np.full((n_max + 1, k_max + 1), neg)
    split = np.zeros((n_max + 1, k_max + 1), dtype=np.int64)
    c = np.full(n_max + 1, neg)
    best_branch = np.zeros(n_max + 1, dtype=np.int64)
    h[1, 0] = 1.0
    c[1] = 1.0
    for m in range(2, n_max + 1):
        h[m, 1] = 1.0 + p[0] * c[m - 1]
        bmax = min(k_max, m - 1)
        if bmax >= 2:
            ys = np.arange(1, m)
            sub = c[m - ys]                                   # all finite (unbounded: any size feasible)
            cand = h[ys, 1:bmax].T + p[1:bmax, None] * sub[None, :]   # rows: b = 2..bmax
            arg = np.argmax(cand, axis=1)                     # first max = smallest y (authors' tie rule)
            h[m, 2:bmax + 1] = cand[np.arange(bmax - 1), arg]
            split[m, 2:bmax + 1] = ys[arg]
        best_branch[m] = int(np.argmax(h[m]))
        c[m] = h[m, best_branch[m]]
    return c, split, best_branch


def _dp_bounded(p: np.ndarray, n_max: int, d_max: int, k_max: int):
    neg = -np.inf
    t = np.full((n_max + 1, d_max + 1, k_max + 1), neg)
    split = np.zeros((n_max + 1, d_max + 1, k_max + 1), dtype=np.int64)
    g = np.full((n_max + 1, d_max + 1), neg)
    best_branch = np.zeros((n_max + 1, d_max + 1), dtype=np.int64)
    t[1, 1:, 0] = 1.0
    g[1, 1:] = 1.0
    ms = np.arange(n_max + 1)[:, None]
    ys = np.arange(n_max + 1)[None, :]
    rest = ms - ys
    valid = (ys >= 1) & (rest >= 1)
    rest_idx = np.where(valid, rest, 0)
    for level in range(2, d_max + 1):
        below = g[:, level - 1]                              # best subtree of size s with depth <= level-1
        finite = np.isfinite(below)
        below0 = np.where(finite, below, 0.0)                # avoid 0 * -inf = nan when some p_b = 0
        t[2:, level, 1] = np.where(finite[1:n_max], 1.0 + p[0] * below0[1:n_max], neg)
        for b in range(2, k_max + 1):
            prev = t[:, level, b - 1]
            if not np.isfinite(prev).any():
                break
            branch = np.where(finite, p[b - 1] * below0, neg)
            cand = np.where(valid, prev[None, :] + branch[rest_idx], neg)
            arg = np.argmax(cand, axis=1)
            t[:, level, b] = cand[np.arange(n_max + 1), arg]
            split[:, level, b] = arg
        best_branch[:, level] = np.argmax(t[:, level, :], axis=1)
        g[:, level] = t[np.arange(n_max + 1), level, best_branch[:, level]]
        g[1, level] = 1.0
        best_branch[1, level] = 0
    return g, split, best_branch


def sequoia_tree(acceptance_vector, size: int, depth: int | None = None) -> tuple[list[int], float]:
    """Sequoia's optimal tree of exactly ``size`` nodes and depth <= ``depth``: (parents, expected tokens).

    Bounded-depth DP (App. C.2.2, Algorithms 4-5, erratum of Alg. 5 fixed, docs/methods/sequoia.md §2.4, §2.12);
    ``depth=None`` means unbounded (App. C.2.1). Size and depth count the root; the k-th child of a node has
    acceptance p_k. The expected tokens equal ``expected_tokens_positional(parents, acceptance_vector)``.
    Raises ValueError when no tree of that size fits in that depth with K = len(acceptance_vector) children
    per node. For many sizes at once use :func:`sequoia_table`.
    """
    size = _check_int(size, "size", 1)
    if depth is not None:
        depth = _check_int(depth, "depth", 1)
    table = sequoia_table(acceptance_vector, size, depth)
    return table.tree(size), table.expected_tokens(size)


# =====================================================================================================
# 3. power-law acceptance (Sequoia Def. 3.5, Thm 3.6 / C.3)
# =====================================================================================================

def power_law_acceptance(r1: float, b: float, num_positions: int) -> np.ndarray:
    """Positional vector of a power-law rejection r_k = r1 * k^(-b) (Def. 3.5; erratum 10: r1 < 1).

    p_1 = 1 - r_1 and p_k = r_{k-1} - r_k, truncated at ``num_positions`` (docs/methods/sequoia.md §3.6 uses
    r1 = 0.4, b = 0.5, K = 64).
    """
    if not 0.0 < r1 <= 1.0:
        raise ValueError(f"r1 must be in (0, 1], got {r1}")
    if b <= 0:
        raise ValueError(f"b must be > 0, got {b}")
    k = np.arange(1, _check_int(num_positions, "num_positions", 1) + 1, dtype=np.float64)
    return _positional_from_rejection(r1 * k ** (-b))


def geometric_acceptance(r1: float, ratio: float, num_positions: int) -> np.ndarray:
    """Positional vector of a geometric rejection r_k = r1 * ratio^(k-1): the decay a power law is told from
    (`power_law_fit`); p_1 = 1 - r_1 and p_k = r_{k-1} - r_k, truncated at ``num_positions``."""
    if not 0.0 < r1 <= 1.0:
        raise ValueError(f"r1 must be in (0, 1], got {r1}")
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"ratio must be in (0, 1), got {ratio}")
    k = np.arange(_check_int(num_positions, "num_positions", 1), dtype=np.float64)
    return _positional_from_rejection(r1 * ratio ** k)


def _positional_from_rejection(rejection: np.ndarray) -> np.ndarray:
    return np.concatenate([[1.0], rejection[:-1]]) - rejection


def power_law_fit(acceptance_vector, floor: float = 1e-12) -> dict[str, float]:
    """How well the rejection curve r_k = 1 - P_k (k = 1..K) of a positional vector follows a power law.

    Least squares of log r_k on log k (a power law r_k = c k^(-b) is a straight line there) and of log r_k
    on k (a geometric decay r_k = c a^k is a straight line there): ``b`` = minus the log-log slope,
    ``r2_power`` and ``r2_geometric`` the two fits' R^2, ``fit_gain`` = r2_power - r2_geometric (> 0: the
    power law describes the curve better than a geometric decay). r_k below ``floor`` is read as ``floor``.
    Needs K >= 3 and a curve that is not flat (R^2 undefined).
    """
    p = _prob_vector(acceptance_vector)
    if p.size < 3:
        raise ValueError(f"acceptance_vector needs at least 3 positions for a fit, got {p.size}")
    if not floor > 0:
        raise ValueError(f"floor must be > 0, got {floor!r}")
    log_r = np.log(np.maximum(1.0 - np.cumsum(p), floor))
    k = np.arange(1, p.size + 1, dtype=np.float64)
    if np.ptp(log_r) < 1e-12:
        return {"b": 0.0, "r2_power": math.nan, "r2_geometric": math.nan, "fit_gain": math.nan}

    def fit(x):
        slope, intercept = np.polyfit(x, log_r, 1)
        residual = log_r - (slope * x + intercept)
        return slope, 1.0 - float(residual @ residual) / float(((log_r - log_r.mean()) ** 2).sum())

    slope, r2_power = fit(np.log(k))
    _, r2_geometric = fit(k)
    return {"b": -float(slope), "r2_power": r2_power, "r2_geometric": r2_geometric,
            "fit_gain": r2_power - r2_geometric}


def power_law_construction(n: int, b: float) -> tuple[int, int, float]:
    """The tree in the proof of Thm C.3 for r_k = k^(-b): (k, D, G').

    k = floor((ln n)^(1/b)), D = the largest number of drafted levels with (k^(D+1) - 1)/(k - 1) <= n, and
    G' = (1 - a^(D+1)) / (1 - a) with a = 1 - k^(-b) (the full k-ary tree's expected tokens).
    docs/methods/sequoia.md §3.6: b=1, n=1e4 -> (9, 4, 4.0056).
    """
    n = _check_int(n, "n", 3)
    if b <= 0:
        raise ValueError(f"b must be > 0, got {b}")
    k = int(math.floor(math.log(n) ** (1.0 / b)))
    if k < 2:
        raise ValueError(f"n={n} is too small for the construction with b={b} (k = {k} < 2)")
    levels = 0
    while (k ** (levels + 2) - 1) // (k - 1) <= n:
        levels += 1
    a = 1.0 - k ** (-b)
    return k, levels, (1.0 - a ** (levels + 1)) / (1.0 - a)


def sequoia_growth_lower_bound(n: float, b: float) -> float:
    """Thm C.3's bound b ln n / (10 ln ln n), valid for n >= ``growth_threshold(b)`` (natural logs)."""
    return b * math.log(n) / (10.0 * math.log(math.log(n)))


def growth_threshold(b: float) -> float:
    """n_0 = exp((1 + exp(2^(b+1) / ln 1.9))^b) above which Thm C.3 holds (docs/methods/sequoia.md §3.6)."""
    return math.exp((1.0 + math.exp(2.0 ** (b + 1) / math.log(1.9))) ** b)
