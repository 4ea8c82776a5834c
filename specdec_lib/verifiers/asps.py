"""ASpS: accelerated speculative sampling based on Tree Monte Carlo (Hu & Huang, ICML'24,
Algorithm 1 with the typos fixed; docs/methods/asps.md §2.3.2), on chains only.

Notation (docs/methods/asps.md, 0-based rows here): drafts ``x_1..x_L``, draft rows ``Q[0..L-1]``,
target rows ``P[0..L]``. ``PN[j, y]`` is the probability that the step accepts the first j drafts
and emits ``y`` at position j+1. Algorithm 1 builds PN row by row; at step k (1-based):

* ``D = D_{k-1}`` is the "all k-1 drafts accepted" mass (``D_0 = 1``);
* ``C1 = max(0, Q[k-1] - D P[k-1])`` (draft coupling mass is the full ``q_k``: the one change
  from SpS), ``w_k = C1[x_k] / sum(C1) / Q[k-1][x_k]``, and ``w_k = 1`` when ``sum(C1) = 0``
  (corner case (i): then ``D = 1`` and ``Q = P``, and all older mass is 0);
* the older rows are rescaled by ``w_k`` (ASpS only), row k-1 becomes
  ``w_k max(0, D P[k-1] - Q[k-1])`` and its draft cell ``D_k = min(1, D P[k-1][x_k] / Q[k-1][x_k])``,
  which is zeroed again at step k+1.

Closed form used here (no loop over positions): ``D_k`` obeys ``D_k = min(1, D_{k-1} r_k)``, i.e. it
is exactly the block-verification weight ``p_k = exp(S_k - cummax S)``, and row j of the final PN is
``(prod_{k >= j+1} w_k) * max(0, D_j P[j] - Q[j])`` off the draft cell. The products of the ``w_k``
are suffix sums of ``log w_k`` (log space where it matters: ``w_k`` can be huge or 0, ``D`` can be 0,
case (iii), and ``log D = -inf`` propagates without NaN). The "all accepted" cell ``D_L`` is
followed by the bonus token from ``P[L]``, so ``law[L] = D_L P[L]`` (after EOS the target is a
point mass on EOS, so an EOS-terminated draft gets a harmless EOS bonus).

At L = 1 ASpS is exactly token-level speculative sampling (paper Sec. 6).
"""

from __future__ import annotations

from typing import Any

import torch

from ..tree import DraftTree
from .base import Outcome, Verifier, sample_categorical
from .block import CHAIN_ACCEPTS, chain_inputs, chain_rows, check_chain, log_block_weights


def pn_parts(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor):
    """``(log_d [L+1], log_scale [L], rows [L, V])`` with PN row j = ``exp(log_scale[j]) * rows[j]``
    (the draft cell of every row emptied) and the all-accepted mass ``D_L = exp(log_d[L])``.
    ``rows`` keeps the dtype of ``P``; the scalars are float64."""
    L = Q.shape[0]
    log_d = log_block_weights(P, Q, x)                       # log D_0 .. log D_L
    idx = torch.arange(L)
    excess = P[:L] * torch.exp(log_d[:L]).to(P.dtype)[:, None]
    excess.sub_(Q)                                           # D_{k-1} P[k-1] - Q[k-1]
    c1 = (-excess).clamp_(min=0)                             # (m_ref - m)_+
    s = c1.sum(dim=1).to(torch.float64)
    c1x = c1[idx, x].to(torch.float64)
    safe_s = torch.where(s > 0, s, torch.ones_like(s))
    log_w = torch.where(s > 0, torch.log(c1x) - torch.log(safe_s) - torch.log(Q[idx, x].to(torch.float64)),
                        torch.zeros_like(s))                 # corner case (i): w = 1
    log_scale = torch.flip(torch.cumsum(torch.flip(log_w, [0]), 0), [0])   # sum_{k >= j+1} log w_k
    rows = excess.clamp_(min=0)
    rows[idx, x] = 0.0
    return log_d, log_scale, rows


def pn_law(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Exact law ``[L+1, V]`` of ASpS given ``P [L+1, V]``, ``Q [L, V]``, drafts ``x [L]``:
    rows 0..L-1 are Algorithm 1's final ``PN`` with the "all accepted" cell removed, row L is
    ``D_L * P[L]`` (bonus)."""
    L = Q.shape[0]
    if L == 0:
        return P[:1].to(torch.float64).clone()
    log_d, log_scale, rows = pn_parts(P, Q, x)
    # where() instead of a plain product so that an empty row never turns into inf * 0 = NaN
    scaled = torch.where(rows > 0, torch.exp(log_scale).to(rows.dtype)[:, None] * rows, torch.zeros_like(rows))
    return torch.cat([scaled, torch.exp(log_d[L]).to(P.dtype) * P[L:L + 1]]).to(torch.float64)


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    """Exact law ``[N+1, V]`` of ASpS on a chain (law[j, y] = P(j drafts accepted, extra token y))."""
    P, Q, x = chain_inputs(tree)
    return pn_law(P, Q, x)


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    """Algorithm 1: one draw of a cell of ``PN`` (plus the bonus), done in two stages with the
    same law: the row j from the row masses, then the token within row j. Works on the rows as
    stored (float32 stays float32; the scalars are float64)."""
    P, Q, x = chain_rows(tree)
    L = Q.shape[0]
    if L == 0:
        return Outcome(path=(), token=sample_categorical(P[0], generator))
    log_d, log_scale, rows = pn_parts(P, Q, x)
    row_mass = rows.sum(dim=1).to(torch.float64)
    mass = torch.where(row_mass > 0, torch.exp(log_scale) * row_mass, torch.zeros_like(row_mass))
    j = sample_categorical(torch.cat([mass, torch.exp(log_d[L:L + 1])]), generator)
    y = sample_categorical(P[L] if j == L else rows[j], generator)
    return Outcome(path=tuple(range(1, j + 1)), token=y)


def check(tree: DraftTree) -> None:
    check_chain(tree, "asps")


VERIFIER = Verifier(
    name="asps",
    sample=sample,
    law=law,
    check=check,
    accepts=CHAIN_ACCEPTS,
    lossless=True,
    description="ASpS (Hu & Huang ICML'24, Alg. 1): Tree-Monte-Carlo chain verifier; the draft-side "
                "coupling mass is the full q_k, earlier residual outputs are rescaled. Chains only.",
)
