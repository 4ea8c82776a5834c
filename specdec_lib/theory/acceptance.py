"""Measuring acceptance from matched target / draft rows: Sequoia's positional acceptance p_k for
several drafting / verification schemes (``positional_acceptance``, exact or Monte Carlo) and ERSS's
0th-order index distribution r (``erss_index_distribution``)."""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import torch

from .checks import _check_int, _matched, _to_distributions


#: Drafting + verification schemes whose per-position acceptance ``positional_acceptance`` measures.
ACCEPTANCE_SCHEMES = {
    "without_replacement": "Sequoia sampling + Algorithm 1 (= ERSS's GSS / recursive rejection sampling "
                           "without replacement, with Sequoia's uniform fallback)",
    "iid": "SpecInfer: children i.i.d. from the draft, multi-round rejection sampling (App. B.2, Alg. 3)",
    "topk": "Sequoia's top-k baseline: children = the draft's top-k, accept the child equal to y ~ P",
    "naive": "naive sampling: children i.i.d. from the draft, accept the first child equal to y ~ P",
    "race": "ERSS exponential races: children = first arrivals of the Q race, the P-race winner is accepted",
}


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


def _without_replacement_two_row(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """`_without_replacement_exact_row` for k = 2 in O(V log V) instead of O(V^2).

    The second child is accepted with sum_x w(x) f(1 - q(x)), w = max(q - p, 0), where
    f(c) = sum_y min(q(y) / c, r(y)) and r = norm(max(p - q, 0)) (the y = x term is 0: r(x) = 0 where w(x) > 0).
    With t = r / q sorted, min(q / c, r) is r below t = 1 / c and q / c above it, so each f(c) is two prefix
    sums found by a binary search. A draft row whose rejected token takes all its mass (1 - q(x) <= 1e-15)
    goes to the enumeration, which then drafts uniformly over the unseen tokens."""
    out = np.array([float(np.minimum(q, p).sum()), 0.0])
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    if total <= 1e-15:
        return out
    r = r / total
    w = np.maximum(q - p, 0.0)
    rejected = np.nonzero(w > 1e-15)[0]
    if rejected.size == 0:
        return out
    rest = q.sum() - q[rejected]  # the draft's mass left after x, as the enumeration renormalises it
    if (rest <= 1e-15).any():
        return _without_replacement_exact_row(p, q, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(q > 0, r / np.where(q > 0, q, 1.0), np.inf)
    order = np.argsort(t, kind="stable")
    t_sorted = t[order]
    r_below = np.concatenate([[0.0], np.cumsum(r[order])])            # sum of r over the first m tokens
    q_above = np.concatenate([np.cumsum(q[order][::-1])[::-1], [0.0]])  # sum of q from the m-th token on
    m = np.searchsorted(t_sorted, 1.0 / rest, side="left")             # tokens with t < 1 / c
    out[1] = float((w[rejected] * (r_below[m] + q_above[m] / rest)).sum())
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
    """Rao-Blackwellised Monte Carlo of Algorithm 1 (docs/methods/sequoia.md §2.1 "static" measurement, improved).

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
    """Top-k baseline (docs/methods/sequoia.md §2.9): p_j = P(j-th most likely draft token); ties by token id."""
    order = torch.sort(q, dim=-1, descending=True, stable=True).indices[:, : min(k, q.shape[1])]
    out = torch.zeros(p.shape[0], k, dtype=torch.float64)
    out[:, : order.shape[1]] = torch.gather(p, 1, order)
    return out


def _naive_exact(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """Naive sampling (docs/methods/sequoia.md §2.9): p_j = sum_y P(y) (1 - Q(y))^(j-1) Q(y)."""
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


RACE_HEAD = 32
"""`_race_mc` enumerates the P-winner over a row's RACE_HEAD most likely tokens and samples it beyond them."""


def _race_mc(p: torch.Tensor, q: torch.Tensor, k: int, num_samples: int, generator: torch.Generator,
             head: int = RACE_HEAD) -> torch.Tensor:
    """Monte Carlo of the race index law (the Q-rank of the P-winner, docs/methods/erss.md §5.4) with the
    winner's race time and every arrival time integrated out; only the order of arrivals is sampled.

    Condition on the P-winner x (probability p_x) and its P-time t ~ Exp(1) (independent of x). Every other
    token y then has e_y = t p_y + E_y with E_y ~ Exp(1) (memorylessness), so it arrives under Q before x
    (at Q-time t p_x / q_x) with probability 1 - exp(-t c_y), c_y = max(rho_x q_y - p_y, 0), rho_x = p_x / q_x:
    the competitors form a race with rates c, and rank(x) <= j exactly when the j-th arrival of that race
    comes after t. Averaging over t ~ Exp(1) and over the gaps of the c race (the gap before its i-th arrival
    is Exp(C_i), C_i the rate not yet arrived), P(rank > j | x, order) = prod_{i <= j} C_i / (1 + C_i). Only the
    order of the c race's arrivals is sampled. x is enumerated, with its weight p_x, over the ``head`` most
    likely tokens (max(1, ``num_samples`` // ``head``) sampled orders each, so that a row whose support fits in
    the head still gains precision from ``num_samples``) and sampled ``num_samples`` times from the rest (one
    order each; weight: the rest's mass / ``num_samples``). x with q_x = 0 never arrives, so it is never
    accepted. Unbiased; the first index is exact for enumerated winners (1 / (1 + C), `erss_first_acceptance`'s
    formula). tests/test_theory.py checks the law against exact enumeration (and that the without-replacement
    law, a different one, fails the same test).
    """
    m, vocab = p.shape
    out = torch.zeros(m, k, dtype=torch.float64)
    inf = torch.tensor(math.inf, dtype=torch.float64)
    repeats = max(1, num_samples // max(head, 1))  # rival orders per enumerated winner
    for r in range(m):
        pr, qr = p[r], q[r]
        ranked = torch.argsort(pr, descending=True)[: int((pr > 0).sum())]
        winners, weights = ranked[:head].repeat(repeats), pr[ranked[:head]].repeat(repeats) / repeats
        tail = ranked[head:]
        if tail.numel():  # inverse CDF, one cumulative sum for all draws (every tail weight is > 0)
            cdf = pr[tail].cumsum(0)
            u = torch.rand(num_samples, 1, dtype=torch.float64, generator=generator).squeeze(-1) * cdf[-1]
            drawn = tail[torch.searchsorted(cdf, u, right=True).clamp_max(tail.numel() - 1)]
            winners = torch.cat([winners, drawn])
            weights = torch.cat([weights, torch.full((num_samples,), float(pr[tail].sum()) / num_samples,
                                                     dtype=torch.float64)])
        arrives = qr[winners] > 0
        rho = torch.where(arrives, pr[winners] / qr[winners].clamp_min(1e-300), torch.zeros_like(weights))
        rates = (rho[:, None] * qr[None, :] - pr[None, :]).clamp_min(0.0)  # [X, V]
        rates[torch.arange(len(winners)), winners] = 0.0  # x is not its own rival (zero up to rounding)
        total = rates.sum(-1)
        e = -torch.log1p(-torch.rand(rates.shape, dtype=torch.float64, generator=generator))
        times, order = torch.topk(torch.where(rates > 0, e / rates.clamp_min(1e-300), inf), k, dim=-1, largest=False)
        arrived = torch.where(torch.isfinite(times), rates.gather(-1, order), torch.zeros_like(times))
        before = (total[:, None] - arrived.cumsum(-1) + arrived).clamp_min(0.0)  # C_i: the rate not yet arrived
        beyond = torch.cumprod(before / (1.0 + before), -1)  # P(rank > j | x, order), j = 1..k
        cdf = (1.0 - beyond) * arrives[:, None]
        law = torch.diff(cdf, dim=-1, prepend=torch.zeros(len(winners), 1, dtype=torch.float64))
        out[r] = weights @ law
    return out


def acceptance_by_scheme(target_rows, draft_rows, max_children: int, schemes: Mapping[str, str],
                         num_samples: int = 64, seed: int = 1) -> dict[str, np.ndarray]:
    """`positional_acceptance` per context ([M, K] arrays) for several sampling schemes at the same matched
    rows: ``schemes`` maps a label to a scheme of ``ACCEPTANCE_SCHEMES``. Each scheme gets its own generator
    seeded ``seed``, so its numbers do not depend on which other schemes are asked for."""
    if not schemes:
        raise ValueError("schemes must name at least one sampling scheme")
    return {name: positional_acceptance(target_rows, draft_rows, max_children, sampling, num_samples=num_samples,
                                        per_row=True, generator=torch.Generator().manual_seed(seed)).numpy()
            for name, sampling in schemes.items()}


def positional_acceptance(target_rows, draft_rows, max_children: int, sampling: str = "without_replacement",
                          *, method: str = "auto", num_samples: int = 64,
                          generator: torch.Generator | None = None, per_row: bool = False,
                          exact_limit: int = 200_000) -> torch.Tensor:
    """Sequoia's positional acceptance p_1..p_K measured on matched (target, draft) rows.

    ``target_rows`` and ``draft_rows`` are [M, V] (or [V]) distributions P(.|x_m) and Q(.|x_m) at M sampled
    contexts (after temperature / top-p), so the measurement is model independent. p_k is the probability
    that the k-th child drawn at a node is THE accepted one (marginal, not conditional; docs/methods/sequoia.md
    §2.1), averaged over rows; with ``per_row=True`` the [M, K] per-context values are returned instead.
    1 - sum(p) is the probability that none of the K children is accepted. The same numbers are ERSS's
    0th-order index distribution r (docs/methods/erss.md §3.2): "race" gives r_ERSS, "without_replacement" r_GSS.

    ``sampling`` (see ``ACCEPTANCE_SCHEMES``):

    * ``"without_replacement"`` Sequoia / GSS (Algorithm 1). Exact by enumerating the rejected-draw
      sequences (closed form for k = 1: 1 - TV) when V!/(V-K+1)! <= ``exact_limit``; otherwise the
      Rao-Blackwellised Monte Carlo of the authors' static measurement (``num_samples`` draw sequences per
      row; the acceptance given the state is integrated exactly, only rejected tokens are sampled).
    * ``"iid"``   SpecInfer; exact closed form (the residual sequence is deterministic).
    * ``"topk"``  top-k children + target-sample match; exact: p_j = P(j-th top draft token).
    * ``"naive"`` i.i.d. children + target-sample match; exact: p_j = sum_y P(y)(1-Q(y))^(j-1) Q(y).
    * ``"race"``  ERSS; exact by inclusion-exclusion when V * 3^(V-1) <= ``exact_limit`` (tiny V), else
      Rao-Blackwellised Monte Carlo (`_race_mc`): the P-winner is enumerated over the row's `RACE_HEAD` most
      likely tokens and sampled ``num_samples`` times beyond them; every race time is integrated out and only
      the order of the competing arrivals is sampled.

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
        if effective == 2 and method != "monte_carlo":  # the enumeration's values by prefix sums (tests/test_theory.py)
            fn = _per_row(lambda pp, qq, _k: _without_replacement_two_row(pp, qq))
        elif method == "exact" or effective == 1 or (method == "auto" and cost <= exact_limit):
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
    """ERSS's 0th-order accepted-index distribution r(1..max_index) pooled over rows (docs/methods/erss.md §3.2).

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
