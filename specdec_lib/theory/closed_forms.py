"""The positional model (Sequoia Def. 3.3, Prop. 3.4 / C.2) and its closed forms.

``expected_tokens_positional`` (Prop. 3.4), closed forms for chains (Leviathan et al.), k independent
sequences and full k-ary trees, Sequoia's Table 1 limits, the best baselines per size, and the
acceptance vector shipped in the Sequoia authors' repository. ERSS's ``sequence(k)`` is the chain form.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import _check_int, _cumulative, _parents_list, _prob_vector


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
    """Leviathan et al. Eq. 1 (docs/methods/sequoia.md §2.10): E[tokens] = (1 - alpha^(gamma+1)) / (1 - alpha).

    Expected tokens per step of a chain of ``gamma`` drafts with i.i.d. acceptance ``alpha`` (bonus token
    included). Equals a chain of gamma+1 nodes under the positional model with p_1 = alpha, and ERSS's
    ``sequence(k)`` with r_1 = alpha (docs/methods/erss.md §3.2).
    """
    alpha = float(alpha)
    gamma = _check_int(gamma, "gamma", 0)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def chain_speedup(alpha: float, gamma: int, draft_cost: float) -> float:
    """Leviathan et al. (docs/methods/sequoia.md §2.10): speed-up = (1 - a^(g+1)) / ((1 - a)(g c + 1)).

    ``draft_cost`` = c, one draft forward divided by one target forward; the target forward over gamma+1
    positions is assumed to cost the same as over one (t(n) = 1).
    """
    if draft_cost < 0:
        raise ValueError(f"draft_cost must be >= 0, got {draft_cost}")
    return chain_expected_tokens(alpha, gamma) / (gamma * float(draft_cost) + 1.0)


def k_sequences_expected_tokens(acceptance_vector, k: int, length: int) -> float:
    """k independent sequences of ``length`` drafts (SpecInfer k x L): F = 1 + P_k * sum_{i<L} p_1^i.

    docs/methods/sequoia.md §2.2. Size k*L + 1, depth L + 1.
    """
    p = _prob_vector(acceptance_vector)
    k = _check_int(k, "k", 0)
    length = _check_int(length, "length", 0)
    if k == 0 or length == 0:
        return 1.0
    return 1.0 + _cumulative(p, k) * sum(p[0] ** i for i in range(length))


def kary_expected_tokens(acceptance_vector, k: int, levels: int) -> float:
    """Full k-ary tree with ``levels`` drafted levels: F = sum_{i=0}^{levels} P_k^i (docs/methods/sequoia.md §2.2).

    Size (k^(levels+1) - 1)/(k - 1) (levels + 1 for k = 1), depth levels + 1.
    """
    p = _prob_vector(acceptance_vector)
    k = _check_int(k, "k", 1)
    levels = _check_int(levels, "levels", 0)
    pk = _cumulative(p, k)
    return float(sum(pk ** i for i in range(levels + 1)))


def _depth_budget(depth, size: int) -> int:
    """Drafted levels a baseline may use: ``depth`` counts the root (as in `sequoia_tree`); None: no bound."""
    if depth is None:
        return size - 1
    return _check_int(depth, "depth", 1) - 1


def best_k_sequences(acceptance_vector, size: int, depth: int | None = None) -> tuple[float, int, int]:
    """The best k x L tree (k independent sequences) with k*L + 1 <= size and, when ``depth`` is given,
    L + 1 <= depth (depth counts the root, as in `sequoia_tree`): (F, k, L).

    Baseline column of docs/methods/sequoia.md §3.4 ("best k x L"). Ties go to the smaller k. The same
    ``depth`` as Sequoia's DP compares trees of one size and one number of sequential draft forwards.
    """
    p = _prob_vector(acceptance_vector)
    size = _check_int(size, "size", 1)
    levels = _depth_budget(depth, size)
    best = (1.0, 0, 0)
    for k in range(1, size):
        length = min((size - 1) // k, levels)
        value = float(k_sequences_expected_tokens(p, k, length))
        if value > best[0] + 1e-15:
            best = (value, k, length)
    return best


def best_kary(acceptance_vector, size: int, depth: int | None = None,
              min_branching: int = 1) -> tuple[float, int, int]:
    """The best full k-ary tree (k >= ``min_branching``; k = 1 is the chain) with at most ``size`` nodes and,
    when ``depth`` is given, at most ``depth`` levels counting the root: (F, k, levels).

    Baseline column of docs/methods/sequoia.md §3.4 ("best full k-ary"); ``levels`` counts drafted levels.
    ``min_branching = 2`` keeps the baseline a tree (Medusa's full k-ary tree) where the chain would win.
    """
    p = _prob_vector(acceptance_vector)
    size = _check_int(size, "size", 1)
    budget = _depth_budget(depth, size)
    min_branching = _check_int(min_branching, "min_branching", 1)
    if size > 1 and min_branching >= size:
        raise ValueError(f"min_branching must be below size ({size}): a full {min_branching}-ary level does not fit")
    best = (1.0, min_branching, 0)
    for k in range(min_branching, size):
        levels, nodes = 0, 1
        while levels < budget:
            nxt = nodes + k ** (levels + 1)
            if nxt > size:
                break
            nodes, levels = nxt, levels + 1
        value = kary_expected_tokens(p, k, levels)
        if value > best[0] + 1e-15:
            best = (value, k, levels)
    return best


def table1_bounds(acceptance_vector, k: int | None = None) -> dict[str, float]:
    """Sequoia Table 1: limits of expected tokens per step as the tree size grows (docs/methods/sequoia.md §3.5).

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
#: steps; ``SEQUOIA_REPO_NONE`` steps accepted none of the 32 children. docs/methods/sequoia.md §2.1 ("REPO").
SEQUOIA_REPO_COUNTS = (423, 72, 38, 15, 13, 10, 3, 2, 8, 3, 5, 3, 4, 2, 1, 2,
                       1, 2, 0, 2, 2, 2, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1)
SEQUOIA_REPO_NONE = 49


def sequoia_repo_acceptance() -> np.ndarray:
    """The "REPO" acceptance vector p_k = counts[k] / 667 (input of Sequoia's demo configuration)."""
    total = sum(SEQUOIA_REPO_COUNTS) + SEQUOIA_REPO_NONE
    return np.asarray(SEQUOIA_REPO_COUNTS, dtype=np.float64) / total
