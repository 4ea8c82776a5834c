"""Hierarchical Speculative Decoding (HSD; Zhou et al., "Overcoming Joint Intractability with Lossless
Hierarchical Speculative Decoding", arXiv 2601.05724; docs/papers/hsd.md), on chains.

Notation as in `block`: drafts ``x_1..x_g``, draft rows ``Q[0..g-1]``, target rows ``P[0..g]``, joint
ratios ``Lambda_i = prod_{k<=i} P[k-1][x_k] / Q[k-1][x_k]`` (``Lambda_0 = 1``). HSD compares, at every
prefix ``x_<=i``, the target's joint mass that is still "accessible" after the prefix, ``min(P(x_<=i),
Q(x_<=i)) P[i]``, with the draft's joint mass ``Q(x_<=i) Q[i]``. Divided by ``Q(x_<=i)`` that is

    w_i P[i] - Q[i],   w_i = min(1, Lambda_i),

so HSD is Block Verification's backward scan with the capped *joint* ratio ``w_i`` in place of Block's
recursively capped weight ``p_i = Lambda_i / max_{j<=i} Lambda_j``:

1. accept all g drafts with probability ``w_g``; the extra token is drawn from ``P[g]``;
2. otherwise scan ``t = g-1, ..., 0`` and stop at t with probability ``sigma_t``, where ``sigma_t = 1``
   when ``Lambda_{t+1} >= 1`` (HSD never steps back over a prefix whose joint ratio is at least one)
   and ``sigma_t = R_t / (R_t + 1 - w_t)`` otherwise, ``R_t = sum_y max(w_t P[t][y] - Q[t][y], 0)``
   (the ratio of the excess to the deficient mass at that level; ``sigma_0 = 1``);
3. at the stop t, emit ``x_1..x_t`` and a token from the residual ``max(w_t P[t] - Q[t], 0)``; when that
   residual has no mass (only possible where ``Lambda_{t+1} >= 1`` forced the stop) emit ``x_1..x_{t+1}``
   and no further token: here that is the verdict (path ``x_1..x_t``, token ``x_{t+1}``).

This reading of the published verification (the authors' ``algorithm_clean.py``: one step, no history
carried over, ``HSD=True``; docs/papers/hsd.md) is NOT lossless: exact enumeration finds output laws that
differ from the target's (tests/test_hsd.py, e.g. 0.03 on a context-free 3-token pair at g = 2), and its
expected tokens exceed Block Verification's, which Block's optimality theorem rules out for any lossless
chain verifier. It is therefore registered in `specdec_lib.verifiers.NOT_LOSSLESS`, not in ``VERIFIERS``:
``verify("hsd", tree, generator)`` and ``exact_law("hsd", tree)`` measure it, and decoding refuses it. With Block's recursively
capped weights ``p_i = Lambda_i / max_{j<=i} Lambda_j`` instead of ``min(1, Lambda_i)`` the same scan is
Block Verification itself.
"""

from __future__ import annotations

from typing import Any

import torch

from ..tree import DraftTree
from .base import Verdict, Verifier, sample_categorical
from .block import chain_inputs, chain_rows, check_chain, log_ratios, residuals, tau_probs

NAME = "hsd"


def log_joint_ratios(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``log Lambda_0 .. log Lambda_g`` (``Lambda_0 = 1``), float64."""
    return torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(log_ratios(P, Q, x), 0)])


def stop_probs(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sigma [g+1], W [g, V], log_lambda [g+1])``: the stop probability of each level of the backward
    scan (``sigma_g = w_g``: accepting the whole chain), the unnormalised residuals ``W[t] = max(w_t P[t] -
    Q[t], 0)`` and the joint log-ratios."""
    g = Q.shape[0]
    log_lam = log_joint_ratios(P, Q, x)
    log_w = log_lam.clamp_max(0)
    W = residuals(P, Q, log_w)
    R = W.sum(dim=1).to(torch.float64)
    den = R - torch.expm1(log_w[:g])                               # R_t + 1 - w_t
    sigma = torch.where(R > 0, R / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(R)).clamp(0, 1)
    sigma = torch.where(log_lam[1:] >= 0, torch.ones_like(sigma), sigma)
    sigma = torch.cat([sigma, torch.exp(log_w[g:])])
    sigma[0] = 1.0 if g > 0 else sigma[0]
    return sigma, W, log_lam


def _extra_row(P: torch.Tensor, W: torch.Tensor, x: torch.Tensor, t: int) -> torch.Tensor:
    """The extra token's law at stop t < g: the normalised residual, or the point mass on ``x_{t+1}``."""
    mass = float(W[t].sum())
    if mass > 0:
        return W[t].to(torch.float64) / mass
    row = torch.zeros(P.shape[1], dtype=torch.float64)
    row[int(x[t])] = 1.0
    return row


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    """Exact law ``[g+1, V]``: row t = P(stop at t) times the extra token's law."""
    P, Q, x = chain_inputs(tree)
    g = Q.shape[0]
    sigma, W, _ = stop_probs(P, Q, x)
    stop = tau_probs(sigma)
    rows = [_extra_row(P, W, x, t) for t in range(g)] + [P[g]]
    return stop[:, None] * torch.stack(rows)


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Verdict:
    """One verdict; ``generator`` is the only randomness (one uniform per level, then the extra token)."""
    P, Q, x = chain_rows(tree)
    g = Q.shape[0]
    sigma, W, _ = stop_probs(P, Q, x)
    eta = torch.rand(g, generator=generator, dtype=torch.float64)
    hits = torch.nonzero(eta <= sigma[1:]).flatten()
    t = int(hits[-1]) + 1 if hits.numel() else 0
    if t == g:
        return Verdict(tuple(range(1, g + 1)), sample_categorical(P[g], generator))
    if float(W[t].sum()) > 0:
        return Verdict(tuple(range(1, t + 1)), sample_categorical(W[t], generator))
    return Verdict(tuple(range(1, t + 1)), int(x[t]))


def check(tree: DraftTree) -> None:
    check_chain(tree, NAME)


VERIFIER = Verifier(
    name=NAME,
    sample=sample,
    law=law,
    check=check,
    description="Hierarchical Speculative Decoding as published (Zhou et al. 2026; NOT lossless: "
                "measured only): Block Verification's backward scan with min(1, Lambda_i) as weight; never "
                "steps back over a prefix with Lambda >= 1.",
)
