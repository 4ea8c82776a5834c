"""Theory of tree drafting: Sequoia's positional model and DP, ERSS's tau* tree and bounds, closed forms.

Everything here is a pure float64 function of acceptance statistics; nothing runs a model. The specs
with the corrected pseudo-code and the golden numbers the tests check are ``shared/specs/sequoia.md``
and ``shared/specs/erss.md``.

Conventions (ARCHITECTURE.md, specs/sequoia.md §2.0)
----------------------------------------------------
* A tree is a parents list in the ``DraftTree`` convention: ``parents[0] == -1``, ``parents[i] < i`` and
  siblings ordered by index, so the k-th child (by index) of a node is its k-th drafted child.
* Size and depth count the root: a chain of 8 drafted tokens has size 9 and depth 9.
* ``acceptance_vector[k-1] = p_k`` is Sequoia's *positional acceptance*: the marginal probability that the
  k-th child of an accepted node is *the* accepted child (children 1..k-1 rejected, child k accepted), so
  ``sum(p) <= 1`` (specs/sequoia.md §2.1, Defs 3.1-3.2). ERSS's 0th-order index distribution ``r(i)``
  (specs/erss.md §3.2) is the same object: the probability that the i-th draft at a node is accepted.
* Expected tokens per step count the bonus / correction token (the root contributes 1).

Sections
--------
1. Positional model: ``expected_tokens_positional`` (Prop. 3.4), closed forms for chains (Leviathan),
   k independent sequences, full k-ary trees, Sequoia's Table 1 bounds and the best baselines per size.
2. Sequoia's dynamic programme (App. C.2, Algorithms 4-5 with the erratum fixed): ``sequoia_table``,
   ``sequoia_tree``.
3. Power-law acceptance and Thm 3.6 / C.3.
4. ERSS: the optimal tree tau* (Algorithm 3), closed forms, entropy, Theorem 4.2 and Lemma 4.3 bounds.
5. Measuring acceptance from matched target / draft rows: ``positional_acceptance`` (Sequoia's p_k for
   several drafting/verification schemes) and ``erss_index_distribution`` (ERSS's r), divergences.
"""

from __future__ import annotations

import heapq
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .tree import validate_parents

__all__ = [
    # positional model
    "expected_tokens_positional", "chain_expected_tokens", "chain_speedup", "k_sequences_expected_tokens",
    "kary_expected_tokens", "best_k_sequences", "best_kary", "table1_bounds",
    "SEQUOIA_REPO_COUNTS", "SEQUOIA_REPO_NONE", "sequoia_repo_acceptance",
    # DP
    "SequoiaTable", "sequoia_table", "sequoia_tree",
    # power law
    "power_law_acceptance", "power_law_construction", "sequoia_growth_lower_bound", "growth_threshold",
    # ERSS
    "tau_star_tree", "tau_star_vertices", "batch_expected_tokens", "erss_specinfer_expected_tokens",
    "index_entropy", "tunstall_bound", "Lemma43Result", "lemma43_bound", "lemma43_fixed_curve",
    # measurement
    "ACCEPTANCE_SCHEMES", "positional_acceptance", "erss_index_distribution", "total_variation",
    "kl_divergence", "harmonic_mean_divergence", "erss_first_acceptance",
]

_TOL = 1e-9


# =====================================================================================================
# helpers
# =====================================================================================================

def _prob_vector(values, name: str = "acceptance_vector", allow_empty: bool = False) -> np.ndarray:
    """A 1-D float64 vector of probabilities with sum <= 1 (a sub-distribution over positions)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of probabilities, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty; it needs at least p_1")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has non-finite entries")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries: {arr[arr < 0][:5].tolist()}")
    total = float(arr.sum())
    if total > 1 + 1e-6:
        raise ValueError(
            f"{name} sums to {total:.6g} > 1; entries must be marginal probabilities that the k-th child is "
            "THE accepted one (not conditional acceptance rates), so they sum to at most 1")
    return arr


def _parents_list(parents) -> list[int]:
    """Validate a parents list (DraftTree convention); accepts a list, a tensor or a DraftTree."""
    if hasattr(parents, "parent_list"):
        parents = parents.parent_list
    if isinstance(parents, torch.Tensor):
        parents = parents.tolist()
    return validate_parents(parents)


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _is_non_increasing(r: np.ndarray) -> bool:
    return bool(np.all(np.diff(r) <= 1e-12))


def _monotone_check(r: np.ndarray, mode: str, what: str) -> None:
    if mode not in ("warn", "raise", "ignore"):
        raise ValueError(f"check_monotone must be 'warn', 'raise' or 'ignore', got {mode!r}")
    if mode == "ignore" or _is_non_increasing(r):
        return
    message = (f"r is not non-increasing in the index ({what}); Algorithm 3's greedy tree is then not "
               "guaranteed optimal (specs/erss.md §2.7 and test T3: r=(.5,.1,.4), k=3 gives the chain, "
               "G=1.875, while batch(3) gives 2.0)")
    if mode == "raise":
        raise ValueError(message)
    warnings.warn(message, UserWarning, stacklevel=3)


# =====================================================================================================
# 1. the positional model (Sequoia Def. 3.3, Prop. 3.4 / C.2) and closed forms
# =====================================================================================================

def expected_tokens_positional(parents, acceptance_vector) -> float:
    """F(T) of Sequoia Prop. 3.4: the expected tokens per step of a tree under the positional model.

    ``F(T) = sum_v f(v)`` with ``f(root) = 1`` and ``f(v) = f(parent(v)) * p[childpos(v)]`` (Def. 3.3), where
    childpos(v) is v's rank among its siblings by index (1-based). This is 1 (the bonus token) plus the
    expected number of accepted drafted nodes. Children at positions beyond ``len(acceptance_vector)`` have
    no measured acceptance and contribute 0. ``parents`` may also be a ``DraftTree``.
    """
    par = _parents_list(parents)
    p = _prob_vector(acceptance_vector)
    f = np.zeros(len(par))
    f[0] = 1.0
    seen = [0] * len(par)
    for i in range(1, len(par)):
        seen[par[i]] += 1
        k = seen[par[i]]
        f[i] = f[par[i]] * (p[k - 1] if k <= p.size else 0.0)
    return float(f.sum())


def chain_expected_tokens(alpha: float, gamma: int) -> float:
    """Leviathan et al. Eq. 1 (specs/sequoia.md §2.10): E[tokens] = (1 - alpha^(gamma+1)) / (1 - alpha).

    Expected tokens per step of a chain of ``gamma`` drafts with i.i.d. acceptance ``alpha`` (bonus token
    included). Equals a chain of gamma+1 nodes under the positional model with p_1 = alpha, and ERSS's
    ``sequence(k)`` with r_1 = alpha (specs/erss.md §3.2).
    """
    alpha = float(alpha)
    gamma = _check_int(gamma, "gamma", 0)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def chain_speedup(alpha: float, gamma: int, draft_cost: float) -> float:
    """Leviathan et al. (specs/sequoia.md §2.10): speed-up = (1 - a^(g+1)) / ((1 - a)(g c + 1)).

    ``draft_cost`` = c, one draft forward divided by one target forward; the target forward over gamma+1
    positions is assumed to cost the same as over one (t(n) = 1).
    """
    if draft_cost < 0:
        raise ValueError(f"draft_cost must be >= 0, got {draft_cost}")
    return chain_expected_tokens(alpha, gamma) / (gamma * float(draft_cost) + 1.0)


def _cumulative(p: np.ndarray, k: int) -> float:
    """P_k = sum_{i <= k} p_i (positions beyond the vector contribute 0)."""
    return float(p[:k].sum())


def k_sequences_expected_tokens(acceptance_vector, k: int, length: int) -> float:
    """k independent sequences of ``length`` drafts (SpecInfer k x L): F = 1 + P_k * sum_{i<L} p_1^i.

    specs/sequoia.md §2.2. Size k*L + 1, depth L + 1.
    """
    p = _prob_vector(acceptance_vector)
    k = _check_int(k, "k", 0)
    length = _check_int(length, "length", 0)
    if k == 0 or length == 0:
        return 1.0
    return 1.0 + _cumulative(p, k) * sum(p[0] ** i for i in range(length))


def kary_expected_tokens(acceptance_vector, k: int, levels: int) -> float:
    """Full k-ary tree with ``levels`` drafted levels: F = sum_{i=0}^{levels} P_k^i (specs/sequoia.md §2.2).

    Size (k^(levels+1) - 1)/(k - 1) (levels + 1 for k = 1), depth levels + 1.
    """
    p = _prob_vector(acceptance_vector)
    k = _check_int(k, "k", 1)
    levels = _check_int(levels, "levels", 0)
    pk = _cumulative(p, k)
    return float(sum(pk ** i for i in range(levels + 1)))


def best_k_sequences(acceptance_vector, size: int) -> tuple[float, int, int]:
    """The best k x L tree (k independent sequences) with k*L + 1 <= size: (F, k, L).

    Baseline column of specs/sequoia.md §3.4 ("best k x L"). Ties go to the smaller k.
    """
    p = _prob_vector(acceptance_vector)
    size = _check_int(size, "size", 1)
    best = (1.0, 0, 0)
    for k in range(1, size):
        length = (size - 1) // k
        value = float(k_sequences_expected_tokens(p, k, length))
        if value > best[0] + 1e-15:
            best = (value, k, length)
    return best


def best_kary(acceptance_vector, size: int) -> tuple[float, int, int]:
    """The best full k-ary tree (k >= 1; k = 1 is the chain) with at most ``size`` nodes: (F, k, levels).

    Baseline column of specs/sequoia.md §3.4 ("best full k-ary"); ``levels`` counts drafted levels.
    """
    p = _prob_vector(acceptance_vector)
    size = _check_int(size, "size", 1)
    best = (1.0, 1, 0)
    for k in range(1, size):
        levels, nodes = 0, 1
        while True:
            nxt = nodes + k ** (levels + 1)
            if nxt > size:
                break
            nodes, levels = nxt, levels + 1
        value = kary_expected_tokens(p, k, levels)
        if value > best[0] + 1e-15:
            best = (value, k, levels)
    return best


def table1_bounds(acceptance_vector, k: int | None = None) -> dict[str, float]:
    """Sequoia Table 1: limits of expected tokens per step as the tree size grows (specs/sequoia.md §3.5).

    With P_k = sum_{i<=k} p_i:

    * ``sequence``    1 / (1 - P_1)
    * ``k_sequences`` 1 + P_k / (1 - P_1)   (Table 2's looser "1 + 1/(1 - P_k)" is erratum 3)
    * ``binary``      1 / (1 - P_2)
    * ``kary``        1 / (1 - P_k)
    * ``sequoia``     unbounded when r_k -> 0; with a measured vector of K positions the DP trees have at
                      most K children per node, so they are bounded by the K-ary limit 1 / (1 - P_K).

    ``k`` defaults to K = len(acceptance_vector). A limit is ``inf`` when its P equals 1.
    """
    p = _prob_vector(acceptance_vector)
    k = p.size if k is None else _check_int(k, "k", 1)

    def inv(x: float) -> float:
        return math.inf if x >= 1.0 - 1e-15 else 1.0 / (1.0 - x)

    p1 = _cumulative(p, 1)
    return {
        "sequence": inv(p1),
        "k_sequences": (math.inf if p1 >= 1 - 1e-15 else 1.0 + _cumulative(p, k) / (1.0 - p1)),
        "binary": inv(_cumulative(p, 2)),
        "kary": inv(_cumulative(p, k)),
        "sequoia": inv(_cumulative(p, p.size)),
    }


#: Acceptance counts shipped in the Sequoia authors' repository (configuration unknown), k = 1..32, over 667
#: steps; ``SEQUOIA_REPO_NONE`` steps accepted none of the 32 children. specs/sequoia.md §2.1 ("REPO").
SEQUOIA_REPO_COUNTS = (423, 72, 38, 15, 13, 10, 3, 2, 8, 3, 5, 3, 4, 2, 1, 2,
                       1, 2, 0, 2, 2, 2, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1)
SEQUOIA_REPO_NONE = 49


def sequoia_repo_acceptance() -> np.ndarray:
    """The "REPO" acceptance vector p_k = counts[k] / 667 (input of Sequoia's demo configuration)."""
    total = sum(SEQUOIA_REPO_COUNTS) + SEQUOIA_REPO_NONE
    return np.asarray(SEQUOIA_REPO_COUNTS, dtype=np.float64) / total


# =====================================================================================================
# 2. Sequoia's dynamic programme (App. C.2.1 and C.2.2, Algorithms 4-5)
# =====================================================================================================

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
    unique: compare values, sizes and depths, never shapes (specs/sequoia.md §2.4).
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

    Bounded depth (``max_depth`` given) is App. C.2.2, Algorithm 5 as restated in specs/sequoia.md §2.4 with
    the erratum fixed (Algorithm 4's feasibility is the finiteness of T):

        T[1][l][0] = 1, T[1][l][b>=1] = -inf                     (root alone)
        T[m][l][1] = 1 + p_1 * best(m-1, l-1)
        T[m][l][b] = max_{1<=y<=m-1} T[y][l][b-1] + p_b * best(m-y, l-1)
        G(n, d)    = max_b T[n][d][b],  best(s, l) = max_j T[s][l][j]

    where y = size of (root + first b-1 branches) and m - y = size of the b-th branch (child position b).
    Unbounded depth (``max_depth=None``) is App. C.2.1 (specs/sequoia.md §2.3): the same recurrence without
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

    Bounded-depth DP (App. C.2.2, Algorithms 4-5, erratum of Alg. 5 fixed, specs/sequoia.md §2.4, §2.12);
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

    p_1 = 1 - r_1 and p_k = r_{k-1} - r_k, truncated at ``num_positions`` (specs/sequoia.md §3.6 uses
    r1 = 0.4, b = 0.5, K = 64).
    """
    if not 0.0 < r1 <= 1.0:
        raise ValueError(f"r1 must be in (0, 1], got {r1}")
    if b <= 0:
        raise ValueError(f"b must be > 0, got {b}")
    k = np.arange(1, _check_int(num_positions, "num_positions", 1) + 1, dtype=np.float64)
    rej = r1 * k ** (-b)
    prev = np.concatenate([[1.0], rej[:-1]])
    return prev - rej


def power_law_construction(n: int, b: float) -> tuple[int, int, float]:
    """The tree in the proof of Thm C.3 for r_k = k^(-b): (k, D, G').

    k = floor((ln n)^(1/b)), D = the largest number of drafted levels with (k^(D+1) - 1)/(k - 1) <= n, and
    G' = (1 - a^(D+1)) / (1 - a) with a = 1 - k^(-b) (the full k-ary tree's expected tokens).
    specs/sequoia.md §3.6: b=1, n=1e4 -> (9, 4, 4.0056).
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
    """n_0 = exp((1 + exp(2^(b+1) / ln 1.9))^b) above which Thm C.3 holds (specs/sequoia.md §3.6)."""
    return math.exp((1.0 + math.exp(2.0 ** (b + 1) / math.log(1.9))) ** b)


# =====================================================================================================
# 4. ERSS: the optimal tree tau* (Algorithm 3), closed forms and bounds (Thm 4.2, Lemma 4.3)
# =====================================================================================================

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
    """ERSS's optimal draft tree tau*_k (Algorithm 3, restated 1-based in specs/erss.md §2.7).

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
    k+1 nodes with p = r (specs/erss.md §2.7).
    """
    vertices, gains = _tau_star(r, k, max_index, check_monotone)
    position = {j: i for i, j in enumerate(vertices)}
    parents = [-1] + [position[j[:-1]] for j in vertices[1:]]
    return parents, 1.0 + float(sum(gains)), gains


def batch_expected_tokens(r, k: int) -> float:
    """ERSS ``batch(k)`` (k root children drawn without replacement): G = 1 + sum_{i<=k} r_i (§3.2)."""
    vec = _prob_vector(r, "r")
    return 1.0 + _cumulative(vec, _check_int(k, "k", 0))


def erss_specinfer_expected_tokens(r, branch_length: int) -> float:
    """ERSS's SpecInfer tree with k = 2 + 3L drafts (specs/erss.md §2.4, §3.2).

    A shared chain (1),(1,1), then three branches (1,1,b), each continued as a chain of L tokens:
    G = 1 + r1 + r1^2 + r1^2 (r1 + r2 + r3)(1 - r1^L)/(1 - r1).
    """
    vec = _prob_vector(r, "r")
    length = _check_int(branch_length, "branch_length", 0)
    r1 = float(vec[0])
    chain = float(sum(r1 ** i for i in range(length)))
    return 1.0 + r1 + r1 ** 2 + r1 ** 2 * _cumulative(vec, 3) * chain


def index_entropy(r) -> float:
    """H[R] in nats of an index distribution r (specs/erss.md eq. 3).

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
    """One evaluation of ERSS Lemma 4.3 (specs/erss.md §3.4).

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
    """ERSS Lemma 4.3, the bound for small k, computed as in specs/erss.md §3.4.

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
    """The fixed-m curve of ERSS Fig. 3/4 (specs/erss.md §3.4 step 5).

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


# =====================================================================================================
# 5. measuring acceptance from matched target / draft rows
# =====================================================================================================

#: Drafting + verification schemes whose per-position acceptance ``positional_acceptance`` measures.
ACCEPTANCE_SCHEMES = {
    "without_replacement": "Sequoia sampling + Algorithm 1 (= ERSS's GSS / recursive rejection sampling "
                           "without replacement, with Sequoia's uniform fallback)",
    "iid": "SpecInfer: children i.i.d. from the draft, multi-round rejection sampling (App. B.2, Alg. 3)",
    "topk": "Sequoia's top-k baseline: children = the draft's top-k, accept the child equal to y ~ P",
    "naive": "naive sampling: children i.i.d. from the draft, accept the first child equal to y ~ P",
    "race": "ERSS exponential races: children = first arrivals of the Q race, the P-race winner is accepted",
}


def _matched(target_rows, draft_rows) -> tuple[torch.Tensor, torch.Tensor]:
    """Shape checks of matched [M, V] target / draft rows (1-D inputs are one row)."""
    p = torch.as_tensor(target_rows)
    q = torch.as_tensor(draft_rows)
    if p.dim() == 1:
        p = p.unsqueeze(0)
    if q.dim() == 1:
        q = q.unsqueeze(0)
    if p.dim() != 2 or q.dim() != 2:
        raise ValueError(f"rows must be [M, V] tensors, got target {tuple(p.shape)} and draft {tuple(q.shape)}")
    if p.shape[1] != q.shape[1]:
        raise ValueError(f"target vocabulary {p.shape[1]} differs from draft vocabulary {q.shape[1]}")
    if p.shape[0] != q.shape[0]:
        raise ValueError(f"{p.shape[0]} target rows but {q.shape[0]} draft rows; rows must be matched contexts")
    if p.shape[0] == 0:
        raise ValueError("no rows given")
    return p, q


def _to_distributions(p: torch.Tensor, q: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a block of rows as distributions and return them in float64 on the CPU."""
    p = p.detach().to("cpu", torch.float64)
    q = q.detach().to("cpu", torch.float64)
    for name, rows in (("target", p), ("draft", q)):
        if not bool(torch.isfinite(rows).all()):
            raise ValueError(f"{name} rows have non-finite entries")
        if bool((rows < 0).any()):
            raise ValueError(f"{name} rows have negative entries")
        sums = rows.sum(-1)
        bad = (sums - 1).abs() > 1e-4
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"{name} row {offset + i} sums to {float(sums[i]):.6g}, not 1: rows must be "
                             "distributions (after temperature / top-p)")
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def _rows(target_rows, draft_rows) -> tuple[torch.Tensor, torch.Tensor]:
    return _to_distributions(*_matched(target_rows, draft_rows))


_BLOCK_ELEMENTS = 2_000_000


def _normalise_or_zero(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = x.sum(-1, keepdim=True)
    ok = s.squeeze(-1) > 1e-15
    return torch.where(s > 1e-15, x / s.clamp_min(1e-300), torch.zeros_like(x)), ok


def _without_replacement_exact_row(p: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Exact p_1..p_k of Algorithm 1 for one row, by enumerating rejected-draw sequences.

    Given the state (R, D) before child j: P(accept child j | state) = sum_x min(D, R); the rejected token
    has weight max(D - R, 0) (it leaves R's support) and R' = norm(max(R - D, 0)) does not depend on which
    token was rejected; only D' (the draft without the rejected token, uniform over unseen tokens once its
    support is used up) does.
    """
    out = np.zeros(k)
    vocab = p.size

    def visit(r: np.ndarray, d: np.ndarray, drawn: np.ndarray, reach: float, j: int) -> None:
        out[j] += reach * float(np.minimum(d, r).sum())
        if j + 1 >= k:
            return
        r_next = np.maximum(r - d, 0.0)
        total = r_next.sum()
        if total <= 1e-15:
            return
        r_next = r_next / total
        weights = np.maximum(d - r, 0.0)
        for x in np.nonzero(weights > 1e-15)[0]:
            d_next = d.copy()
            d_next[x] = 0.0
            now_drawn = drawn.copy()
            now_drawn[x] = True
            s = d_next.sum()
            if s <= 1e-15:
                d_next = (~now_drawn).astype(np.float64)
                s = d_next.sum()
                if s == 0:
                    continue
            visit(r_next, d_next / s, now_drawn, reach * float(weights[x]), j + 1)

    visit(p, q, np.zeros(vocab, dtype=bool), 1.0, 0)
    return out


def _sample_chunks(m: int, vocab: int, num_samples: int, budget: int = _BLOCK_ELEMENTS):
    """Split ``num_samples`` draws for ``m`` rows into chunks of about ``budget`` tensor elements."""
    per_chunk = max(1, budget // max(1, m * vocab))
    done = 0
    while done < num_samples:
        s = min(per_chunk, num_samples - done)
        yield s
        done += s


def _sample_rows(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row with probability proportional to ``weights`` (inverse CDF; faster than
    torch.multinomial on float64 rows of LLM vocabularies)."""
    cdf = weights.cumsum(-1)
    u = torch.rand(weights.shape[0], 1, dtype=weights.dtype, generator=generator) * cdf[:, -1:]
    idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    idx = idx.clamp_max(weights.shape[1] - 1)
    # never return a zero-weight index (u can land exactly on a flat stretch at the end through rounding)
    bad = weights.gather(1, idx[:, None]).squeeze(-1) <= 0
    if bool(bad.any()):
        idx[bad] = weights[bad].argmax(-1)
    return idx


def _without_replacement_mc(p: torch.Tensor, q: torch.Tensor, k: int, num_samples: int,
                            generator: torch.Generator) -> torch.Tensor:
    """Rao-Blackwellised Monte Carlo of Algorithm 1 (specs/sequoia.md §2.1 "static" measurement, improved).

    Per sample: the acceptance of child j is integrated exactly given the state (sum min(D, R)); only the
    rejected token is drawn, from its exact conditional law max(D - R, 0) / (1 - accept). Unbiased.
    Samples are processed in batches (rows repeated).
    """
    m, vocab = p.shape
    total = torch.zeros(m, k, dtype=torch.float64)
    for s in _sample_chunks(m, vocab, num_samples):
        r, d = p.repeat(s, 1), q.repeat(s, 1)              # row i of sample t sits at t * m + i
        rows = torch.arange(r.shape[0])
        drawn = torch.zeros_like(r, dtype=torch.bool)
        reach = torch.ones(r.shape[0], dtype=torch.float64)
        acc = torch.zeros(r.shape[0], k, dtype=torch.float64)
        for j in range(k):
            diff = d - r
            weights = diff.clamp_min(0.0)                  # rejected-token weights max(D - R, 0)
            reject = weights.sum(-1).clamp(0.0, 1.0)       # = 1 - sum min(D, R) since D and R sum to 1
            acc[:, j] = reach * (1.0 - reject)
            if j + 1 >= k:
                break
            alive = reject > 1e-15
            reach = reach * reject * alive
            if not bool((reach > 0).any()):
                break
            # R' = max(R - D, 0) / (its sum = the same rejection mass)
            r = torch.where(alive[:, None], (-diff).clamp_min(0.0) / reject.clamp_min(1e-300)[:, None], r)
            safe = torch.where(alive[:, None], weights, d)
            x = _sample_rows(safe, generator)
            removed = d[rows, x]
            d[rows, x] = 0.0
            drawn[rows, x] = True
            left = (1.0 - removed).clamp_min(0.0)
            exhausted = left <= 1e-12                      # draft support used up: uniform over unseen tokens
            d = d / torch.where(exhausted, torch.ones_like(left), left)[:, None]
            if bool(exhausted.any()):
                unseen = (~drawn[exhausted]).to(torch.float64)
                d[exhausted] = unseen / unseen.sum(-1, keepdim=True).clamp_min(1.0)
        total += acc.view(s, m, k).sum(0)
    return total / num_samples


def _iid_exact(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """SpecInfer (App. B.2, Alg. 3): D never changes and R' = norm(max(R - D, 0)) is deterministic, so
    alpha_j = sum min(D, R_j) and p_j = prod_{i<j}(1 - alpha_i) alpha_j exactly."""
    out = torch.zeros(p.shape[0], k, dtype=torch.float64)
    r = p.clone()
    reach = torch.ones(p.shape[0], dtype=torch.float64)
    for j in range(k):
        accept = torch.minimum(q, r).sum(-1).clamp(0.0, 1.0)
        out[:, j] = reach * accept
        reach = reach * (1.0 - accept)
        r, ok = _normalise_or_zero((r - q).clamp_min(0.0))
        reach = reach * ok
    return out


def _topk_exact(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k baseline (specs/sequoia.md §2.9): p_j = P(j-th most likely draft token); ties by token id."""
    order = torch.sort(q, dim=-1, descending=True, stable=True).indices[:, : min(k, q.shape[1])]
    out = torch.zeros(p.shape[0], k, dtype=torch.float64)
    out[:, : order.shape[1]] = torch.gather(p, 1, order)
    return out


def _naive_exact(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """Naive sampling (specs/sequoia.md §2.9): p_j = sum_y P(y) (1 - Q(y))^(j-1) Q(y)."""
    out = torch.zeros(p.shape[0], k, dtype=torch.float64)
    pq = p * q
    power = torch.ones_like(q)
    for j in range(k):
        out[:, j] = (pq * power).sum(-1)
        power = power * (1.0 - q)
    return out


def _race_exact_row(p: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Exact r_ERSS(1..k) for one row (inclusion-exclusion; cost about V 3^V, small vocabularies only).

    Condition on the P-winner y and its arrival time e_y = t. Every other x must arrive later under P
    (e_x > t a_x, a_x = p_x/p_y); it precedes y in the Q race iff e_x < t b_x (b_x = q_x/q_y), possible only
    if b_x > a_x. So r(i) = sum_y int_0^inf e^-t [z^(i-1)] prod_x (e^(-t max(a_x,b_x)) + z (e^(-t a_x) -
    e^(-t b_x))) dt, and each exponential term e^(-t c) integrates against e^-t to 1/(1+c).
    """
    out = np.zeros(k)
    vocab = p.size
    for y in range(vocab):
        if p[y] <= 0 or q[y] <= 0:
            continue
        degree = np.zeros(1, dtype=np.int64)
        rate = np.zeros(1)
        coef = np.ones(1)
        for x in range(vocab):
            if x == y:
                continue
            a = p[x] / p[y]
            b = q[x] / q[y]
            if b > a:
                degree = np.concatenate([degree, degree + 1, degree + 1])
                rate = np.concatenate([rate + b, rate + a, rate + b])
                coef = np.concatenate([coef, coef, -coef])
                keep = degree < k
                degree, rate, coef = degree[keep], rate[keep], coef[keep]
            else:
                rate = rate + a
        np.add.at(out, degree, coef / (1.0 + rate))
    return out


def _race_mc(p: torch.Tensor, q: torch.Tensor, k: int, num_samples: int,
             generator: torch.Generator) -> torch.Tensor:
    """Monte Carlo of the race index: rank of the P-winner among the Q arrivals (specs/erss.md §5.1)."""
    m, vocab = p.shape
    counts = torch.zeros(m, k, dtype=torch.float64)
    inf = torch.tensor(math.inf, dtype=torch.float64)
    for s in _sample_chunks(m, vocab, num_samples):
        pp, qq = p.repeat(s, 1), q.repeat(s, 1)
        rows = torch.arange(pp.shape[0])
        e = -torch.log1p(-torch.rand(pp.shape, dtype=torch.float64, generator=generator))
        e = e.clamp_min(1e-300)
        under_p = torch.where(pp > 0, e / pp.clamp_min(1e-300), inf)
        under_q = torch.where(qq > 0, e / qq.clamp_min(1e-300), inf)
        winner = under_p.argmin(-1)
        own = under_q[rows, winner]
        rank = (under_q < own[:, None]).sum(-1)          # 0-based position in the Q race
        hit = torch.isfinite(own) & (rank < k)
        onehot = torch.zeros(pp.shape[0], k, dtype=torch.float64)
        onehot[rows[hit], rank[hit]] = 1.0
        counts += onehot.view(s, m, k).sum(0)
    return counts / num_samples


def positional_acceptance(target_rows, draft_rows, max_children: int, sampling: str = "without_replacement",
                          *, method: str = "auto", num_samples: int = 64,
                          generator: torch.Generator | None = None, per_row: bool = False,
                          exact_limit: int = 200_000) -> torch.Tensor:
    """Sequoia's positional acceptance p_1..p_K measured on matched (target, draft) rows.

    ``target_rows`` and ``draft_rows`` are [M, V] (or [V]) distributions P(.|x_m) and Q(.|x_m) at M sampled
    contexts (after temperature / top-p), so the measurement is model independent. p_k is the probability
    that the k-th child drawn at a node is THE accepted one (marginal, not conditional; specs/sequoia.md
    §2.1), averaged over rows; with ``per_row=True`` the [M, K] per-context values are returned instead.
    1 - sum(p) is the probability that none of the K children is accepted. The same numbers are ERSS's
    0th-order index distribution r (specs/erss.md §3.2): "race" gives r_ERSS, "without_replacement" r_GSS.

    ``sampling`` (see ``ACCEPTANCE_SCHEMES``):

    * ``"without_replacement"`` Sequoia / GSS (Algorithm 1). Exact by enumerating the rejected-draw
      sequences (closed form for k = 1: 1 - TV) when V!/(V-K+1)! <= ``exact_limit``; otherwise the
      Rao-Blackwellised Monte Carlo of the authors' static measurement (``num_samples`` draw sequences per
      row; the acceptance given the state is integrated exactly, only rejected tokens are sampled).
    * ``"iid"``   SpecInfer; exact closed form (the residual sequence is deterministic).
    * ``"topk"``  top-k children + target-sample match; exact: p_j = P(j-th top draft token).
    * ``"naive"`` i.i.d. children + target-sample match; exact: p_j = sum_y P(y)(1-Q(y))^(j-1) Q(y).
    * ``"race"``  ERSS; exact by inclusion-exclusion when V * 3^(V-1) <= ``exact_limit`` (tiny V), else Monte
      Carlo with ``num_samples`` races per row.

    ``method`` is "auto", "exact" (ValueError if too large) or "monte_carlo". ``generator`` is the only
    randomness (default: a fresh generator seeded 0).
    """
    if sampling not in ACCEPTANCE_SCHEMES:
        raise ValueError(f"unknown sampling scheme {sampling!r}; expected one of {sorted(ACCEPTANCE_SCHEMES)}")
    if method not in ("auto", "exact", "monte_carlo"):
        raise ValueError(f"method must be 'auto', 'exact' or 'monte_carlo', got {method!r}")
    k = _check_int(max_children, "max_children", 1)
    num_samples = _check_int(num_samples, "num_samples", 1)
    p_all, q_all = _matched(target_rows, draft_rows)
    m, vocab = p_all.shape
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    effective = min(k, vocab) if sampling in ("without_replacement", "race", "topk") else k

    if sampling in ("iid", "topk", "naive"):
        if method == "monte_carlo":
            raise ValueError(f"sampling={sampling!r} has an exact closed form; use method='auto' or 'exact'")
        fn = {"iid": _iid_exact, "topk": _topk_exact, "naive": _naive_exact}[sampling]
    elif sampling == "without_replacement":
        cost = math.perm(vocab, max(effective - 1, 0))
        if method == "exact" and cost > exact_limit:
            raise ValueError(f"exact enumeration needs about {cost} branches per row (> exact_limit="
                             f"{exact_limit}); use method='monte_carlo' or raise exact_limit")
        if method == "exact" or effective == 1 or (method == "auto" and cost <= exact_limit):
            fn = _per_row(_without_replacement_exact_row)
        else:
            fn = lambda pp, qq, kk: _without_replacement_mc(pp, qq, kk, num_samples, generator)
    else:  # race
        cost = vocab * 3 ** (vocab - 1) if vocab < 40 else math.inf
        if method == "exact" and cost > exact_limit:
            raise ValueError(f"exact race enumeration needs about {cost} terms per row (> exact_limit="
                             f"{exact_limit}); use method='monte_carlo'")
        if method == "exact" or (method == "auto" and cost <= exact_limit):
            fn = _per_row(_race_exact_row)
        else:
            fn = lambda pp, qq, kk: _race_mc(pp, qq, kk, num_samples, generator)

    # rows are converted and processed in blocks so that LLM-sized vocabularies fit in memory
    block = max(1, _BLOCK_ELEMENTS // vocab)
    result = torch.zeros(m, k, dtype=torch.float64)
    for start in range(0, m, block):
        p, q = _to_distributions(p_all[start:start + block], q_all[start:start + block], start)
        result[start:start + p.shape[0], :effective] = fn(p, q, effective)
    return result if per_row else result.mean(0)


def _per_row(row_fn):
    def run(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
        return torch.stack([torch.from_numpy(row_fn(p[i].numpy(), q[i].numpy(), k)) for i in range(p.shape[0])])
    return run


def erss_index_distribution(target_rows, draft_rows, max_index: int, coupling: str = "erss",
                            **kwargs) -> torch.Tensor:
    """ERSS's 0th-order accepted-index distribution r(1..max_index) pooled over rows (specs/erss.md §3.2).

    ``coupling="erss"``: r(i) = Pr(the P-race winner is the i-th arrival of the Q race); ``"gss"``:
    Pr(recursive rejection sampling without replacement accepts draft i). 1 - sum(r) is the mass of
    indices > max_index (and of never-draftable tokens when supp P is not inside supp Q); keep it, it is
    the tail that :func:`index_entropy` and :func:`lemma43_bound` account for. Extra keyword arguments go
    to :func:`positional_acceptance` (method, num_samples, generator, per_row, exact_limit).
    """
    schemes = {"erss": "race", "gss": "without_replacement"}
    if coupling not in schemes:
        raise ValueError(f"coupling must be 'erss' or 'gss', got {coupling!r}")
    return positional_acceptance(target_rows, draft_rows, max_index, schemes[coupling], **kwargs)


def _pair(p, q) -> tuple[torch.Tensor, torch.Tensor, bool]:
    single = torch.as_tensor(p).dim() == 1
    pp, qq = _rows(p, q)
    return pp, qq, single


def _out(values: torch.Tensor, single: bool):
    return float(values[0]) if single else values


def total_variation(p, q):
    """TV(P, Q) = 1/2 ||P - Q||_1; 1 - TV is the single-draft acceptance of GSS/Sequoia (optimal transport)."""
    pp, qq, single = _pair(p, q)
    return _out(0.5 * (pp - qq).abs().sum(-1), single)


def kl_divergence(p, q):
    """D_KL(P || Q) in nats (inf where P puts mass outside Q's support); specs/erss.md eq. 6."""
    pp, qq, single = _pair(p, q)
    pos = pp > 0
    ratio = torch.where(pos, pp / qq.clamp_min(1e-300), torch.ones_like(pp))
    terms = torch.where(pos, pp * torch.log(ratio), torch.zeros_like(pp))
    terms = torch.where(pos & (qq == 0), torch.full_like(pp, math.inf), terms)
    return _out(terms.sum(-1), single)


def harmonic_mean_divergence(p, q):
    """D_HM[P, Q] = sum_i p_i q_i / (p_i + q_i), ERSS Lemma C.1's lower bound on the first acceptance."""
    pp, qq, single = _pair(p, q)
    den = pp + qq
    terms = torch.where(den > 0, pp * qq / den.clamp_min(1e-300), torch.zeros_like(pp))
    return _out(terms.sum(-1), single)


def erss_first_acceptance(p, q):
    """Exact ERSS single-draft acceptance, specs/erss.md §3.6 [derived]: sum_y 1 / sum_x max(p_x/p_y, q_x/q_y).

    The sum runs over y with p_y, q_y > 0. Computed in O(V log V) per row: with rho = p/q,
    sum_x max(.) = P(rho >= rho_y)/p_y + Q(rho < rho_y)/q_y. Lemma C.1: D_HM <= this <= 1 - TV.
    """
    pp, qq, single = _pair(p, q)
    inf = torch.tensor(math.inf, dtype=torch.float64)
    zero = torch.zeros((), dtype=torch.float64)
    rho = torch.where(qq > 0, pp / qq.clamp_min(1e-300), torch.where(pp > 0, inf, zero))
    sorted_rho, order = torch.sort(rho, dim=-1)
    cum_p = torch.cat([torch.zeros(pp.shape[0], 1, dtype=torch.float64),
                       torch.gather(pp, 1, order).cumsum(-1)], dim=-1)
    cum_q = torch.cat([torch.zeros(pp.shape[0], 1, dtype=torch.float64),
                       torch.gather(qq, 1, order).cumsum(-1)], dim=-1)
    below = torch.searchsorted(sorted_rho.contiguous(), rho.contiguous(), right=False)  # #{rho_x < rho_y}
    p_at_or_above = cum_p[:, -1:] - torch.gather(cum_p, 1, below)
    q_below = torch.gather(cum_q, 1, below)
    valid = (pp > 0) & (qq > 0)
    denom = p_at_or_above / pp.clamp_min(1e-300) + q_below / qq.clamp_min(1e-300)
    terms = torch.where(valid, 1.0 / denom.clamp_min(1e-300), torch.zeros_like(pp))
    return _out(terms.sum(-1), single)
