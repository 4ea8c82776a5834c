"""Hierarchical Speculative Decoding (Zhou et al., arXiv 2601.05724) as the paper states it, on chains.

With joint ratios ``Lambda_t = prod_{k<=t} P[k-1][x_k] / Q[k-1][x_k]`` (``Lambda_0 = 1``), level t weighs the
target row by the capped ratio ``w_t = Lambda_t / max(1, max_{i<=t} Lambda_i)`` (Defs. 4-6). At level t < g
the excess is ``E_t = sum max(w_t P[t] - Q[t], 0)``, the deficit ``D_t = sum max(Q[t] - w_t P[t], 0)``, and the
scan stops there with probability ``E_t / max(E_t, D_t)`` (Eqs. 19-20; level 0 always stops). Algorithm 2
accepts all g drafts with probability ``min(r*, 1)``, ``r* = Lambda_g / max(1, max_{i<g} Lambda_i)`` (bonus
token from ``P[g]``); otherwise it walks back from level g-1 and, at the first level that stops, keeps
``x_1..x_t`` and draws one token from the normalised excess. Theorem 6 claims it lossless.

``w_t`` is Block Verification's weight ``p_t`` and ``E_t / max(E_t, D_t) = R_t / (R_t + 1 - p_t)`` its ``h_t``,
so the law equals `block`'s (tests/test_hsd.py checks it to 1e-12, and losslessness over several steps).
The authors' released code accepts the whole chain with ``min(1, Lambda_g)`` instead: `hsd_released`.
"""

from __future__ import annotations


import torch

from ..tree import DraftTree
from .base import Outcome, Verifier, sample_categorical
from .block import CHAIN_ACCEPTS, chain_inputs, chain_rows, check_chain, log_ratios, residuals, tau_probs

NAME = "hsd"


def level_weights(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log Lambda [g+1], log w [g+1])``: the joint ratios and the capped ratios
    ``w_t = Lambda_t / max(1, max_{i<=t} Lambda_i)``, float64."""
    log_lam = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(log_ratios(P, Q, x), 0)])
    cap = torch.cummax(log_lam, 0).values.clamp_min(0)       # log max(1, max_{i<=t} Lambda_i)
    return log_lam, log_lam - cap


def stop_probs(P: torch.Tensor, Q: torch.Tensor, x: torch.Tensor,
               released: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sigma [g+1] float64, W [g, V])``: the probability that the backward scan stops at level t
    (``sigma_g``: all g drafts accepted; ``sigma_0 = 1``) and the unnormalised excess rows
    ``W[t] = max(w_t P[t] - Q[t], 0)``. ``sigma_g = min(r*, 1)`` (the paper), or ``min(1, Lambda_g)`` with
    ``released=True`` (the authors' code). The 0/0 case ``E_t = D_t = 0`` (``w_t P[t] == Q[t]``) never stops."""
    g = Q.shape[0]
    log_lam, log_w = level_weights(P, Q, x)
    W = residuals(P, Q, log_w)
    if g == 0:
        return torch.ones(1, dtype=torch.float64), W
    w = torch.exp(log_w[:g]).to(P.dtype)[:, None]
    excess = W.sum(dim=1).to(torch.float64)
    deficit = (Q - w * P[:g]).clamp_min(0).sum(dim=1).to(torch.float64)
    den = torch.maximum(excess, deficit)
    sigma = torch.where(den > 0, excess / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))
    sigma[0] = 1.0
    top = log_lam[g] if released else log_w[g]                 # log w_g = log min(r*, 1)
    return torch.cat([sigma.clamp(0, 1), torch.exp(top.clamp_max(0)).reshape(1)]), W


def law_of(tree: DraftTree, released: bool) -> torch.Tensor:
    """Exact law ``[g+1, V]``: row t = P(scan ends at t) times the extra token's law (the normalised excess,
    ``P[t]`` where the excess has no mass, a measure-zero event; ``P[g]`` after full acceptance)."""
    P, Q, x = chain_inputs(tree)
    g = Q.shape[0]
    sigma, W = stop_probs(P, Q, x, released)
    mass = W.sum(dim=1, keepdim=True)
    rows = torch.where(mass > 0, W / torch.where(mass > 0, mass, torch.ones_like(mass)), P[:g])
    return tau_probs(sigma)[:, None] * torch.cat([rows, P[g:g + 1]])


def sample_of(tree: DraftTree, generator: torch.Generator, released: bool) -> Outcome:
    """One verdict: one uniform per level (the full-acceptance test at level g, then the walk back), then the
    extra token; ``generator`` is the only randomness. Works on the rows as stored."""
    P, Q, x = chain_rows(tree)
    g = Q.shape[0]
    sigma, W = stop_probs(P, Q, x, released)
    eta = torch.rand(g, generator=generator, dtype=torch.float64)
    hits = torch.nonzero(eta <= sigma[1:]).flatten()
    t = int(hits[-1]) + 1 if hits.numel() else 0
    if t == g:
        row = P[g]
    else:
        row = W[t] if float(W[t].sum()) > 0 else P[t]
    return Outcome(path=tuple(range(1, t + 1)), token=sample_categorical(row, generator))


def chain_verifier(name: str, released: bool, lossless: bool, description: str) -> Verifier:
    """The `Verifier` of one HSD reading on chains: the paper's Algorithm 2 (``released=False``) or the
    authors' released code (``released=True``); the two share the scan and differ in the whole-chain test."""
    return Verifier(
        name=name,
        sample=lambda tree, generator, state=None: sample_of(tree, generator, released),
        law=lambda tree, state=None: law_of(tree, released),
        check=lambda tree: check_chain(tree, name),
        accepts=CHAIN_ACCEPTS,
        lossless=lossless,
        description=description,
    )


VERIFIER = chain_verifier(
    NAME, released=False, lossless=True,
    description="Hierarchical Speculative Decoding (Zhou et al. 2026), the paper's Algorithm 2: capped ratios "
                "Lambda_t / max(1, max Lambda_i), whole chain with min(r*, 1); its law is Block Verification's.",
)
law, sample, check = VERIFIER.law, VERIFIER.sample, VERIFIER.check
