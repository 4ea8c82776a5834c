"""Divergences between target and draft rows (one row or [M, V]): total variation, KL, ERSS's
harmonic-mean divergence and the exact single-draft ERSS acceptance (Lemma C.1's bracket)."""

from __future__ import annotations

import math

import torch

from .checks import _rows


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
    """D_KL(P || Q) in nats (inf where P puts mass outside Q's support); docs/methods/erss.md eq. 6."""
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


def erss_joint_acceptance(p, q):
    """Per token y, the probability that ERSS's single draft is y AND is accepted: the race winner under q and
    the winner of the same race under p are both y, docs/methods/erss.md §3.6 [derived]:
    1 / sum_x max(p_x/p_y, q_x/q_y) (0 where p_y = 0 or q_y = 0). Same shape as the rows.

    Computed in O(V log V) per row: with rho = p/q, sum_x max(.) = P(rho >= rho_y)/p_y + Q(rho < rho_y)/q_y.
    Divided by q_y it is the acceptance of a drafted y (`node_rao_blackwell.erss_drafted_acceptance`)."""
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
    return terms[0] if single else terms


def erss_first_acceptance(p, q):
    """Exact ERSS single-draft acceptance, docs/methods/erss.md §3.6 [derived]: sum_y 1 / sum_x max(p_x/p_y, q_x/q_y),
    the total of `erss_joint_acceptance`. Lemma C.1: D_HM <= this <= 1 - TV."""
    terms = erss_joint_acceptance(p, q)
    return float(terms.sum()) if terms.dim() == 1 else terms.sum(-1)
