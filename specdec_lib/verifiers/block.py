"""Block verification (Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR'25,
Algorithm 2; docs/methods/block.md §2.2), on chains.

Notation (docs/methods/block.md): drafts ``x_1..x_g`` (g = gamma), draft rows ``Q[0..g-1]`` (``Q[i]`` is
the distribution ``x_{i+1}`` was drawn from), target rows ``P[0..g]``, ratios ``r_i = P[i-1][x_i] / Q[i-1][x_i]``.
The weights, one cumsum / cummax in log space:

    p_0 = 1,  p_i = min(1, p_{i-1} r_i) = exp(S_i - max_{j<=i} S_j),  S_i = sum_{k<=i} log r_k.

Sub-block i < g is accepted with ``h_i = R_i / (R_i + 1 - p_i)``, ``R_i = sum_x max(p_i P[i][x] - Q[i][x], 0)``
(Eq. 5; 0 when ``R_i = 0``), the whole block with ``h_g = p_g``; the LONGEST accepted sub-block is kept, so
``P(tau = t | x) = h_t * prod_{j=t+1..g} (1 - h_j)`` with ``h_0 = 1``. The extra token comes from ``P[g]``
when ``tau = g``, else from ``max(p_tau P[tau] - Q[tau], 0)`` (Eq. 4), or ``P[tau]`` if that has no mass.

The helpers (`chain_rows`, `chain_inputs`, `log_block_weights`, `residuals`, `tau_law`, `tau_probs`,
`law_from_weights`, `sample_from_weights`) are shared with `asps` and `greedy_block`.

Precision of the samplers and laws, edge cases, and why the paper's Appendix-A sketch is not ported:
docs/methods/block.md §2.9, "In the library".
"""

from __future__ import annotations

from typing import Any

import torch

from ..tree import DraftTree
from .base import Outcome, Verifier, accepted_pairs, require_chain, sample_categorical

CHAIN_SAMPLING = ("iid", "without_replacement", "race")  # one child per node: a draw from q
CHAIN_ACCEPTS = accepted_pairs(("chain",), CHAIN_SAMPLING)
"""What `check_chain` accepts: chains whose drafts are draws from the draft rows (no top-k)."""


def check_chain(tree: DraftTree, name: str) -> None:
    """ValueError unless ``tree`` is a chain whose drafts were sampled from its draft rows."""
    require_chain(tree, name)
    if tree.sampling not in CHAIN_SAMPLING:
        raise ValueError(f"verifier {name!r} needs drafts sampled from the draft rows "
                         f"(sampling in {CHAIN_SAMPLING}); got sampling={tree.sampling!r}")
    g = tree.num_nodes - 1
    if g:
        idx = torch.arange(g)
        qx = tree.draft_probs[idx, tree.tokens[1:]]
        bad = torch.nonzero(qx <= 0).flatten().tolist()
        if bad:
            raise ValueError(f"verifier {name!r}: drafted token at node {bad[0] + 1} has draft "
                             f"probability 0, so it was not sampled from the draft row")


def _normalised(rows: torch.Tensor) -> torch.Tensor:
    rows = rows.to(torch.float64)
    total = rows.sum(dim=-1, keepdim=True)
    return rows / torch.where(total > 0, total, torch.ones_like(total))


def chain_rows(tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(P [g+1, V], Q [g, V], x [g])`` of a chain as stored (no copy; the samplers' fast path)."""
    g = tree.num_nodes - 1
    return tree.target_probs, tree.draft_probs[:g], tree.tokens[1:]


def chain_inputs(tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(P [g+1, V], Q [g, V], x [g])`` of a chain in float64, rows renormalised (exact laws)."""
    g = tree.num_nodes - 1
    return _normalised(tree.target_probs), _normalised(tree.draft_probs[:g]), tree.tokens[1:]


def log_ratios(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``log r_i = log P[i-1][x_i] - log Q[i-1][x_i]``, i = 1..g, in float64 (``-inf`` where the
    target is 0)."""
    idx = torch.arange(x.shape[0])
    return torch.log(P[idx, x].to(torch.float64)) - torch.log(Q[idx, x].to(torch.float64))


def log_block_weights(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``log p_0..log p_g`` of Algorithm 2: ``S_i - cummax_{j<=i} S_j`` with ``S_0 = 0``."""
    S = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(log_ratios(P, Q, x), 0)])
    return S - torch.cummax(S, 0).values


def residuals(P: torch.Tensor, Q: torch.Tensor, log_w: torch.Tensor) -> torch.Tensor:
    """``W [g, V]``, ``W[t] ∝ max(w_t P[t] - Q[t], 0)`` in the rows' dtype; rows with ``w_t > 1``
    are scaled by ``1/w_t`` (so no overflow; only their direction and sign pattern matter)."""
    g = Q.shape[0]
    lw = log_w[:g]
    big = lw > 0
    scale_p = torch.exp(lw.clamp_max(0)).to(P.dtype)[:, None]
    W = P[:g] * scale_p
    if bool(big.any()):
        W.sub_(Q * torch.exp(-lw.clamp_min(0)).to(P.dtype)[:, None])
    else:
        W.sub_(Q)
    return W.clamp_(min=0)


def tau_law(P: torch.Tensor, Q: torch.Tensor, log_w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h [g+1] float64, W [g, V])`` for the weights ``log_w`` (``log p`` of block verification,
    or the unclipped joint ratio ``log p~`` of greedy block verification), ``W`` = `residuals`.

    ``h_0 = 1``; for 0 < i < g, ``h_i = 1`` if ``w_i > 1``, else ``R_i / (R_i + 1 - w_i)`` with
    ``R_i = sum(W[i])`` (0 when ``R_i = 0``, the 0/0 case); ``h_g = min(1, w_g)``.
    """
    g = Q.shape[0]
    W = residuals(P, Q, log_w)
    h = torch.ones(g + 1, dtype=torch.float64)
    if g > 1:
        R = W[1:].sum(dim=1).to(torch.float64)
        den = R - torch.expm1(log_w[1:g].clamp_max(0))          # R_i + 1 - w_i
        hi = torch.where(R > 0, R / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(R))
        h[1:g] = torch.where(log_w[1:g] > 0, torch.ones_like(hi), hi.clamp(0, 1))
    if g > 0:
        h[g] = torch.exp(log_w[g].clamp_max(0))
    return h, W


def tau_probs(h: torch.Tensor) -> torch.Tensor:
    """``P(tau = t) = h_t prod_{j>t} (1 - h_j)`` for t = 0..g (h_0 = 1)."""
    surv = torch.flip(torch.cumprod(torch.flip(1.0 - h[1:], [0]), 0), [0])
    return h * torch.cat([surv, torch.ones(1, dtype=torch.float64)])


def law_from_weights(P: torch.Tensor, Q: torch.Tensor, log_w: torch.Tensor) -> torch.Tensor:
    """Exact law ``[g+1, V]`` (float64 inputs): row t = P(tau = t) times the extra token's law."""
    h, W = tau_law(P, Q, log_w)
    g = Q.shape[0]
    mass = W.sum(dim=1, keepdim=True)
    rows = torch.where(mass > 0, W / torch.where(mass > 0, mass, torch.ones_like(mass)), P[:g])
    return tau_probs(h)[:, None] * torch.cat([rows, P[g:g + 1]])


def sample_from_weights(P: torch.Tensor, Q: torch.Tensor, log_w: torch.Tensor,
                        generator: torch.Generator) -> tuple[int, int]:
    """``(tau, Y)``: tau = the largest i with eta_i <= h_i (0 if none), Y from its residual row
    (``P[tau]`` if that residual has no mass, a measure-zero event)."""
    h, W = tau_law(P, Q, log_w)
    g = Q.shape[0]
    eta = torch.rand(g, generator=generator, dtype=torch.float64)
    hits = torch.nonzero(eta <= h[1:]).flatten()
    tau = int(hits[-1]) + 1 if hits.numel() else 0
    if tau == g:
        row = P[g]
    else:
        row = W[tau] if float(W[tau].sum()) > 0 else P[tau]
    return tau, sample_categorical(row, generator)


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    """Exact law ``[N+1, V]`` of block verification on a chain (law[t, y] = P(tau = t, Y = y))."""
    P, Q, x = chain_inputs(tree)
    return law_from_weights(P, Q, log_block_weights(P, Q, x))


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    """Algorithm 2: one verdict; ``generator`` is the only randomness. Works on the rows as stored
    (float32 rows stay float32: one [g, V] residual pass, weights in float64)."""
    P, Q, x = chain_rows(tree)
    tau, y = sample_from_weights(P, Q, log_block_weights(P, Q, x), generator)
    return Outcome(path=tuple(range(1, tau + 1)), token=y)


def check(tree: DraftTree) -> None:
    check_chain(tree, "block")


VERIFIER = Verifier(
    name="block",
    sample=sample,
    law=law,
    check=check,
    accepts=CHAIN_ACCEPTS,
    lossless=True,
    description="Block verification (Sun et al. ICLR'25, Alg. 2): optimal lossless chain verifier; "
                "weights p_i = exp(S_i - cummax S), keeps the longest accepted sub-block.",
)
