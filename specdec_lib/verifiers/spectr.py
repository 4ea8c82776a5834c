"""``spectr``: k-sequential selection (SpecTr, Sun et al. 2023, Algorithm 3 "K-SEQ"), the SpecTr baseline
of Sequoia's Figure 3 (docs/methods/sequoia.md §2.8), applied node by node down the tree.

At a node with target row ``P``, draft row ``Q`` and ``k`` children drawn i.i.d. from ``Q``, fix
``rho`` in ``[1, k]`` and let

    beta(rho) = sum_x min(Q(x), P(x) / rho),      S(rho) = (1 - (1 - beta)^k) / beta.

The children are tested in order; child ``j`` (token ``x``) is accepted with probability
``min(1, P(x) / (rho Q(x)))``. If all ``k`` are rejected the extra token is drawn from

    p_res(x) = [P(x) - min(Q(x), P(x)/rho) S(rho)] / (1 - beta)^k.

Then P(output x) = S min(Q, P/rho)(x) + (1-beta)^k p_res(x) = P(x): lossless whenever ``p_res >= 0``,
which holds iff ``S(rho) <= rho``. We use the smallest feasible ``rho`` (the largest acceptance
``1 - (1 - beta)^k``), found on a grid of [1, k] refined by bisection (`kseq_rho`); ``rho = k`` is
always feasible and ``k = 1`` gives ``rho = 1``, i.e. Leviathan/Chen. After an accepted child the
same selection runs at that child with its own children (they are i.i.d. from the child's draft row,
independently of everything above), so the walk is lossless on any tree whose children are i.i.d.

Trees covered: ``iid`` trees (SpecInfer sampling, duplicates allowed), and trees of any other
stochastic sampling mode in which no node has more than one child (one draw without replacement or
one race arrival is one i.i.d. draw). Not covered (ValueError): ``topk`` trees (children not drawn
from ``Q``) and branching without-replacement / race trees (children not i.i.d.). SpecTr's own
merging of identical draft prefixes across sequences is not done: each node selects among its own
children. Exact law given the tree: the same recursion as ``token`` with these acceptance
probabilities and ``p_res``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..tree import DraftTree
from .base import SHAPE_KINDS, Outcome, Verifier, accepted_pairs, sample_categorical, sequential_law, uniform
from .token_level import check_consistent_draws, draft_row, target_row

NAME = "spectr"
_GRID = 257
_BISECTIONS = 60


def _s_of(beta: float, k: int) -> float:
    """S = sum_{i<k} (1 - beta)^i."""
    one_minus = min(max(1.0 - beta, 0.0), 1.0)
    return sum(one_minus ** i for i in range(k))


def kseq_rho(p: torch.Tensor, q: torch.Tensor, k: int) -> tuple[float, float]:
    """Smallest feasible rho in [1, k] (S(rho) <= rho) and beta(rho), for K-SEQ with k i.i.d. drafts.

    beta(rho) = Q(r >= rho) + P(r < rho) / rho with r = P/Q is evaluated for a grid of [1, k] plus
    every breakpoint r_x in it (prefix sums over the sorted ratios); the first feasible point is
    refined by bisection on its interval, where beta = A + B / rho has fixed A and B.
    """
    if k < 1:
        raise ValueError(f"K-SEQ needs k >= 1 drafts, got {k}")
    p_np = p.detach().to(torch.float64).cpu().numpy()
    q_np = q.detach().to(torch.float64).cpu().numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q_np > 0, p_np / np.where(q_np > 0, q_np, 1.0), np.inf)
    order = np.argsort(ratio, kind="stable")
    r_sorted = ratio[order]
    p_cum = np.concatenate([[0.0], np.cumsum(p_np[order])])
    q_cum = np.concatenate([[0.0], np.cumsum(q_np[order])])
    q_total = float(q_cum[-1])

    def beta_at(rho: np.ndarray) -> np.ndarray:
        below = np.searchsorted(r_sorted, rho, side="left")  # tokens with r < rho
        return (q_total - q_cum[below]) + p_cum[below] / rho

    if k == 1:
        return 1.0, float(beta_at(np.array([1.0]))[0])
    inside = r_sorted[(r_sorted > 1.0) & (r_sorted < k)]
    points = np.unique(np.concatenate([np.linspace(1.0, float(k), _GRID), inside]))
    one_minus = np.clip(1.0 - beta_at(points), 0.0, 1.0)
    s_values = sum(one_minus ** i for i in range(k))
    first = int(np.flatnonzero(s_values <= points)[0])  # rho = k is always feasible
    if first == 0:
        return 1.0, float(beta_at(points[:1])[0])
    lo, hi = float(points[first - 1]), float(points[first])
    # On (lo, hi] the tokens with r < rho are those with r <= lo: beta = a + b / rho.
    below = int(np.searchsorted(r_sorted, lo, side="right"))
    a, b = q_total - float(q_cum[below]), float(p_cum[below])
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if _s_of(a + b / mid, k) <= mid:
            hi = mid
        else:
            lo = mid
    return hi, a + b / hi


def kseq_residual(p: torch.Tensor, q: torch.Tensor, k: int, rho: float, beta: float) -> torch.Tensor:
    """p_res = [P - min(Q, P/rho) S(rho)] / (1 - beta)^k, normalised by its explicit sum."""
    s = sum((1.0 - beta) ** i for i in range(k))
    r = (p - torch.minimum(q, p / rho) * s).clamp_min(0.0)
    total = float(r.sum())
    return r / total if total > 0.0 else p  # (1 - beta)^k == 0: never used


class _Selection:
    """K-SEQ state at one node: rho, the per-child acceptance rule and the residual."""

    def __init__(self, tree: DraftTree, node: int):
        self.p = target_row(tree, node)
        self.k = len(tree.children[node])
        if self.k:
            self.q = draft_row(tree, node)
            self.rho, self.beta = kseq_rho(self.p, self.q, self.k)

    def accept_prob(self, x: int) -> float:
        return min(1.0, float(self.p[x]) / (self.rho * float(self.q[x])))

    def final(self) -> torch.Tensor:
        return kseq_residual(self.p, self.q, self.k, self.rho, self.beta) if self.k else self.p


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    node, path = 0, []
    tokens = tree.tokens.tolist()
    while True:
        sel = _Selection(tree, node)
        accepted = None
        for child in tree.children[node]:
            if uniform(generator) < sel.accept_prob(tokens[child]):
                accepted = child
                break
        if accepted is None:
            return Outcome(tuple(path), sample_categorical(sel.final(), generator))
        path.append(accepted)
        node = accepted


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    tokens = tree.tokens.tolist()

    def trials(node: int):
        sel = _Selection(tree, node)
        for child in tree.children[node]:
            yield child, sel.accept_prob(tokens[child])
        return sel.final()

    return sequential_law(tree, trials)


def check(tree: DraftTree) -> None:
    if tree.sampling == "iid":
        return
    if tree.sampling == "topk":
        raise ValueError("verifier 'spectr' needs children drawn i.i.d. from the draft; top-k children are "
                         "deterministic (use 'match' or 'token')")
    branching = [i for i, kids in enumerate(tree.children) if len(kids) > 1]
    if branching:
        raise ValueError(f"verifier 'spectr' (k-sequential selection) needs i.i.d. children; node "
                         f"{branching[0]} has {len(tree.children[branching[0]])} children drawn with "
                         f"sampling={tree.sampling!r} (not i.i.d.)")
    check_consistent_draws(tree, NAME)


VERIFIER = Verifier(
    name=NAME,
    sample=sample,
    law=law,
    check=check,
    accepts=accepted_pairs(SHAPE_KINDS, ("iid",)) | accepted_pairs(("chain",), ("without_replacement", "race")),
    lossless=True,
    description="SpecTr k-sequential selection (K-SEQ) at each node of an i.i.d. tree (Sequoia's SpecTr "
                "baseline)",
)
