"""Greedy block verification with the distribution modification (Sun et al., ICLR'25, Appendix C,
Algorithms 4-6; docs/methods/block.md §2.4-2.6), on chains.

Algorithm 4 is block verification with the UNCLIPPED joint ratio ``p~_i = M_b(x^i|c) / M_s(x^i|c)``
as weight, the extra token from ``max(p~_tau P[tau] - Q[tau], 0)`` (Eq. 30). It reaches the maximal
coupling of every prefix in one iteration (Lemma 9) but is lossless only with Algorithm 5: after a step
from block start c emitted ``A = (x^tau, Y)``, the next ``H = g - tau - 1`` positions become

    M_new(x | c, A, z) ∝ max(rho * M(x | c, A, z) - M_s(x | c, A, z), 0),
    rho = M(A, z | c) / M_s(A, z | c)   (joint probabilities since the block start c),

with ``M`` the target that verified that step (modifications compose, Algorithm 6).

The modifications pending for the next block travel in ``Outcome.state`` (a `GreedyBlockState` of
`PendingModification`: the two log joints and the positions left; ``None`` when nothing is pending).
`verify(tree, gen, state)` applies them to the tree's rows (`modified_targets`), runs Algorithm 4 and
returns the next state (`next_state`); ``law(tree, state)`` is the exact law of (tau, Y) given both.

The state, its update and the edge cases: docs/methods/block.md §2.9, "In the library".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..tree import DraftTree
from .base import Outcome, Verifier
from .block import CHAIN_ACCEPTS, _normalised, check_chain, law_from_weights, log_ratios, sample_from_weights


@dataclass(frozen=True)
class PendingModification:
    """One earlier step's target modification (Algorithm 5) that still reaches the next block."""

    log_target: float
    log_draft: float
    remaining: int


@dataclass(frozen=True)
class GreedyBlockState:
    """The modifications pending for the next block, oldest first."""

    pending: tuple[PendingModification, ...]


def _check_state(state: Any) -> tuple[PendingModification, ...]:
    if state is None:
        return ()
    if not isinstance(state, GreedyBlockState):
        raise ValueError(f"greedy_block state must be None or GreedyBlockState, got {type(state).__name__}")
    return state.pending


def _rows(rows: torch.Tensor, exact: bool) -> torch.Tensor:
    return _normalised(rows) if exact else rows


def _draft_rows(tree: DraftTree, rows_needed: int, exact: bool) -> torch.Tensor:
    """Draft rows ``[max(g, rows_needed), V]``; the leaf row is only read when a modification
    outlives the chain (the draft length shrank), and must then be a distribution."""
    g = tree.num_nodes - 1
    if rows_needed > g:
        if not float(tree.draft_probs[g].sum()) > 0.0:
            raise ValueError("greedy_block: a pending target modification reaches past this chain's "
                             "last draft, so the draft row at the leaf is needed but is all zeros "
                             "(keep gamma fixed, or give the leaf's draft row)")
        return _rows(tree.draft_probs[:g + 1], exact)
    return _rows(tree.draft_probs[:g], exact)


def _path_logs(rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``[0, log rows[0][x_1], log rows[0][x_1] + log rows[1][x_2], ...]`` in float64."""
    idx = torch.arange(x.shape[0])
    logs = torch.log(rows[idx, x].to(torch.float64))
    return torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(logs, 0)])


def modified_targets(tree: DraftTree, state: Any, exact: bool = True) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``(levels, Q)``: ``levels[0]`` the tree's target rows, ``levels[m+1]`` after applying the
    m-th pending modification (oldest first); ``levels[-1]`` is the target this step verifies.
    ``exact``: rows in float64 renormalised (laws); otherwise the stored rows (the sampler)."""
    pending = _check_state(state)
    x = tree.tokens[1:]
    g = x.shape[0]
    P = _rows(tree.target_probs, exact)
    need = max([0] + [min(m.remaining, g + 1) for m in pending])
    Q = _draft_rows(tree, need, exact)
    levels = [P]
    for mod in pending:
        pre = levels[-1]
        r = min(mod.remaining, g + 1)
        lt = mod.log_target + _path_logs(pre, x)[:r]          # log M(A, z | c) before this modification
        ld = mod.log_draft + _path_logs(Q[:g], x)[:r]         # log M_s(A, z | c)
        top = torch.maximum(lt, ld)
        reach = torch.isfinite(top)
        safe_top = torch.where(reach, top, torch.zeros_like(top))
        scale_p = torch.exp(lt - safe_top).to(pre.dtype)[:, None]
        scale_q = torch.exp(ld - safe_top).to(pre.dtype)[:, None]
        res = (pre[:r] * scale_p).sub_(Q[:r] * scale_q).clamp_(min=0)
        mass = res.sum(dim=1, keepdim=True)
        ok = (mass > 0) & reach[:, None]
        rows = torch.where(ok, res / torch.where(mass > 0, mass, torch.ones_like(mass)), pre[:r])
        levels.append(torch.cat([rows, pre[r:]]))
    return levels, Q


def _log_joint_weights(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``log p~_0..log p~_g``: the joint ratio M_b(x^i)/M_s(x^i), no clipping (Alg. 4)."""
    return torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(log_ratios(P, Q, x), 0)])


def _advance(levels: list[torch.Tensor], Q: torch.Tensor, x: torch.Tensor, state: Any, tau: int,
             y: int) -> GreedyBlockState | None:
    pending = _check_state(state)
    g = x.shape[0]
    emitted = torch.cat([x[:tau], torch.tensor([y])])

    def joint(rows: torch.Tensor) -> float:
        idx = torch.arange(tau + 1)
        return float(torch.log(rows[idx, emitted].to(torch.float64)).sum())

    out = []
    for m, mod in enumerate(pending):
        left = mod.remaining - (tau + 1)
        if left > 0:  # then Q holds the leaf row too (see _draft_rows)
            out.append(PendingModification(mod.log_target + joint(levels[m]),
                                           mod.log_draft + joint(Q), left))
    horizon = g - tau - 1
    if horizon > 0:
        out.append(PendingModification(joint(levels[-1]), joint(Q), horizon))
    return GreedyBlockState(tuple(out)) if out else None


def next_state(tree: DraftTree, state: Any, path: tuple[int, ...], token: int) -> GreedyBlockState | None:
    """State after the step on ``tree`` accepted ``path`` and emitted ``token`` (Algorithm 6 line 6)."""
    levels, Q = modified_targets(tree, state)
    return _advance(levels, Q, tree.tokens[1:], state, len(path), int(token))


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    """Exact law ``[N+1, V]`` of Algorithm 4 on the tree's target modified by ``state``."""
    levels, Q = modified_targets(tree, state)
    P, x = levels[-1], tree.tokens[1:]
    g = x.shape[0]
    return law_from_weights(P, Q[:g], _log_joint_weights(P, Q[:g], x))


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    """Algorithms 4 + 5: verdict of this step, carrying the modification state of the next ones."""
    levels, Q = modified_targets(tree, state, exact=False)
    P, x = levels[-1], tree.tokens[1:]
    g = x.shape[0]
    tau, y = sample_from_weights(P, Q[:g], _log_joint_weights(P, Q[:g], x), generator)
    return Outcome(path=tuple(range(1, tau + 1)), token=y, state=_advance(levels, Q, x, state, tau, y))


def check(tree: DraftTree) -> None:
    check_chain(tree, "greedy_block")


VERIFIER = Verifier(
    name="greedy_block",
    sample=sample,
    law=law,
    check=check,
    next_state=next_state,
    accepts=CHAIN_ACCEPTS,
    lossless=True,
    description="Greedy block verification (Sun et al. ICLR'25, Algs. 4-6): maximal coupling of every "
                "prefix in one step, lossless across steps through the target modification carried "
                "in Outcome.state.",
)
