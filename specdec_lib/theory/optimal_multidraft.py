"""The best acceptance any lossless verifier can reach at one tree level: the ceiling of every verifier.

Setting (Hu et al., "Towards Optimal Multi-Draft Speculative Decoding", ICLR 2025, Section 3): k draft
tokens X_1..X_k are drawn from the draft row q, i.i.d. or without replacement; a lossless verifier
outputs Y with law exactly p; it "accepts" when Y is one of the drafts. Every such verifier is a
coupling of the draft tuple and Y, so the best acceptance is the optimal-transport linear program

    alpha* = max over couplings pi of (X, Y) with the two laws as marginals of P_pi(Y in {X_1..X_k}).

**Dual (max-flow / min-cut).** The LP is a bipartite transport problem whose edges join a draft tuple
to each token it contains, so by the max-flow min-cut theorem

    alpha* = min over token sets H of [ p(V minus H) + P(some draft lands in H) ].

For i.i.d. drafts P(some draft lands in H) = 1 - (1 - q(H))^k, a function of q(H) alone (Hu et al.'s
Theorem 3.2 in our notation). Without replacement it depends on the individual q(x) in and out of H.

**Sorted prefixes.** Hu et al. show that the minimising H can be taken among the sets
{x : p(x)/q(x) >= t}: sort the tokens by p/q (tokens with q = 0 first) and scan the prefixes. That
makes the i.i.d. case O(V log V) at V = 49,152. `optimal_acceptance` uses the prefix scan for both
schemes and `exhaustive_acceptance` minimises over every subset; tests/test_optimal_multidraft.py
checks that the two agree on random small instances and that both equal the linear program
(`brute_force_lp_acceptance`, solved with scipy) for V <= 5, k <= 3.

What is exact: the subset minimisation and the LP, always; the prefix scan, for i.i.d. drafts (proved
by Hu et al., and checked here) and for drafts without replacement wherever the tests check it (the
prefix family is a restriction of the minimisation, so where it were not exact its value would be an
UPPER bound of alpha*). Without replacement the probability of avoiding H needs the individual
probabilities: it is closed form for k <= 2 (any V) and enumerated for larger k (small V only).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

SAMPLINGS = ("iid", "without_replacement")
_ENUMERATION_LIMIT = 200_000
"""The most ordered draft tuples `_avoid_probability` enumerates (without replacement, k > 2)."""

__all__ = ["SAMPLINGS", "optimal_acceptance", "optimal_acceptance_rows", "exhaustive_acceptance",
           "brute_force_lp_acceptance", "draft_tuples"]


def _distribution(x, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to(torch.float64).cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D probability vector, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or (arr < 0).any():
        raise ValueError(f"{name} must be finite and non-negative")
    total = arr.sum()
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1 (got {total:.6g})")
    return arr / total


def _check(p, q, num_drafts: int, sampling: str) -> tuple[np.ndarray, np.ndarray, int]:
    p, q = _distribution(p, "p"), _distribution(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same length, got {p.shape[0]} and {q.shape[0]}")
    if isinstance(num_drafts, bool) or int(num_drafts) != num_drafts or num_drafts < 1:
        raise ValueError(f"num_drafts must be an integer >= 1, got {num_drafts!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    support = int((q > 0).sum())
    if sampling == "without_replacement" and num_drafts > support:
        raise ValueError(f"num_drafts = {num_drafts} drafts cannot be drawn without replacement from the "
                         f"{support} tokens with q > 0")
    return p, q, int(num_drafts)


def draft_tuples(q: np.ndarray, k: int, sampling: str):
    """Every ordered k-tuple of drafts with its probability (small vocabularies)."""
    support = [t for t in range(q.shape[0]) if q[t] > 0]
    if sampling == "iid":
        for combo in itertools.product(support, repeat=k):
            yield combo, math.prod(q[t] for t in combo)
        return

    def extend(chosen: tuple[int, ...], prob: float, rest_mass: float):
        if len(chosen) == k:
            yield chosen, prob
            return
        for t in support:
            if t not in chosen:
                yield from extend(chosen + (t,), prob * q[t] / rest_mass, rest_mass - q[t])

    yield from extend((), 1.0, 1.0)


def _avoid_probability(q: np.ndarray, outside: np.ndarray, k: int, sampling: str) -> float:
    """P(no draft lands in H), H = the complement of the boolean mask ``outside``."""
    q_out = float(q[outside].sum())
    if sampling == "iid":
        return q_out ** k
    if k == 1:
        return q_out
    if k == 2:  # first draw x outside H, then the second from the rest of the outside mass
        qo = q[outside & (q < 1.0)]
        return float((qo * (q_out - qo) / (1.0 - qo)).sum())
    if math.perm(int((q > 0).sum()), k) > _ENUMERATION_LIMIT:
        raise ValueError("without replacement and num_drafts > 2 the exact value needs a small vocabulary "
                         f"(at most {_ENUMERATION_LIMIT} ordered draft tuples)")
    return float(sum(prob for combo, prob in draft_tuples(q, k, sampling) if all(outside[t] for t in combo)))


def _outside_sums(values: np.ndarray, candidates: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """[m] = the sum of ``values`` outside the prefix H = candidates[:m] (candidates[m:] and ``rest``)."""
    return np.concatenate([np.cumsum(values[candidates][::-1])[::-1], [0.0]]) + values[rest].sum()


def _without_replacement_pair_scan(p: np.ndarray, q: np.ndarray, candidates: np.ndarray, rest: np.ndarray) -> float:
    """The prefix scan for two drafts without replacement in O(V). With O the tokens outside H,

        P(avoid H) = sum_{x in O} q(x) (q(O) - q(x)) / (1 - q(x)),

    summed by suffix sums. 1 - q(x) is only formed for tokens other than the most likely one (there it is
    >= 1/2); the most likely token's term uses the sum of the other tokens instead, which stays accurate
    when the draft row is peaked (1 - q_max near 1e-14 at low temperature would lose every digit)."""
    top = int(np.argmax(q))
    q_rest = q.copy()
    q_rest[top] = 0.0
    w = q_rest / (1.0 - q_rest)
    top_only = np.zeros_like(q)
    top_only[top] = 1.0
    q_out_rest, s1, s2, top_out = (_outside_sums(v, candidates, rest) for v in (q_rest, w, q_rest * w, top_only))
    q_out = q_out_rest + q[top] * top_out
    avoid = q_out * s1 - s2 + top_out * q[top] * q_out_rest / q_rest.sum()
    p_in = np.concatenate([[0.0], np.cumsum(p[candidates])])
    return float(min(((1.0 - p_in) + 1.0 - avoid).min(), 1.0))


def _cut_value(p: np.ndarray, q: np.ndarray, in_h: np.ndarray, k: int, sampling: str) -> float:
    return float(p[~in_h].sum()) + 1.0 - _avoid_probability(q, ~in_h, k, sampling)


def optimal_acceptance(p, q, num_drafts: int, sampling: str = "iid") -> float:
    """The best first-level acceptance of any lossless verifier with ``num_drafts`` drafts from ``q`` and
    target row ``p`` (module docstring): the minimum of the cut value over the prefixes of the tokens
    sorted by p/q. Exact for i.i.d. drafts; without replacement exact where the tests check it, else an
    upper bound (module docstring). Equals 1 - TV(p, q) at ``num_drafts = 1``."""
    p, q, k = _check(p, q, num_drafts, sampling)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    order = np.argsort(-ratio, kind="stable")
    keep = p[order] > 0  # a token with p = 0 never helps in H
    candidates = order[keep]
    if sampling == "iid" or k == 1:
        p_in = np.concatenate([[0.0], np.cumsum(p[candidates])])
        q_in = np.concatenate([[0.0], np.cumsum(q[candidates])])
        values = (1.0 - p_in) + 1.0 - np.clip(1.0 - q_in, 0.0, 1.0) ** k
        return float(min(values.min(), 1.0))
    if k == 2:
        return _without_replacement_pair_scan(p, q, candidates, order[~keep])
    best = 1.0
    in_h = np.zeros(p.shape[0], dtype=bool)
    for m in range(candidates.shape[0] + 1):
        if m:
            in_h[candidates[m - 1]] = True
        best = min(best, _cut_value(p, q, in_h, k, sampling))
    return float(best)


def optimal_acceptance_rows(target_rows, draft_rows, ks, sampling: str = "iid") -> np.ndarray:
    """`optimal_acceptance` at every matched context: ``[M, len(ks)]`` for [M, V] target and draft rows
    (e.g. `experiments.matched_rows`); compare with a verifier's first-level acceptance at the same rows."""
    target_rows, draft_rows = torch.as_tensor(target_rows), torch.as_tensor(draft_rows)
    if target_rows.ndim != 2 or target_rows.shape != draft_rows.shape:
        raise ValueError(f"target_rows and draft_rows must be matched [M, V] tensors, got "
                         f"{tuple(target_rows.shape)} and {tuple(draft_rows.shape)}")
    ks = list(ks)
    if not ks:
        raise ValueError("ks must name at least one number of drafts")
    out = np.zeros((target_rows.shape[0], len(ks)))
    for m in range(target_rows.shape[0]):
        p, q = target_rows[m].double(), draft_rows[m].double()
        p, q = p / p.sum(), q / q.sum()
        for j, k in enumerate(ks):
            out[m, j] = optimal_acceptance(p, q, k, sampling)
    return out


def exhaustive_acceptance(p, q, num_drafts: int, sampling: str = "iid") -> float:
    """alpha* by minimising the cut value over EVERY token set H (2^V sets; V <= 16)."""
    p, q, k = _check(p, q, num_drafts, sampling)
    vocab = p.shape[0]
    if vocab > 16:
        raise ValueError(f"exhaustive_acceptance enumerates 2^V sets: V must be <= 16, got {vocab}")
    best = 1.0
    for bits in range(1 << vocab):
        in_h = np.array([(bits >> t) & 1 == 1 for t in range(vocab)])
        best = min(best, _cut_value(p, q, in_h, k, sampling))
    return float(best)


def brute_force_lp_acceptance(p, q, num_drafts: int, sampling: str = "iid") -> float:
    """alpha* as the primal linear program over couplings of (ordered draft tuple, output token), solved
    by scipy's HiGHS (V <= 6, num_drafts <= 3): the definition itself, with no duality used."""
    from scipy.optimize import linprog  # scipy is a dependency only of this check (and of verdicts' power)

    p, q, k = _check(p, q, num_drafts, sampling)
    vocab = p.shape[0]
    if vocab > 6 or k > 3:
        raise ValueError(f"the brute-force LP is for V <= 6 and num_drafts <= 3, got V = {vocab}, k = {k}")
    tuples = list(draft_tuples(q, k, sampling))
    n_t = len(tuples)
    n_var = n_t * vocab  # pi[t, y], flattened t-major
    gain = np.zeros(n_var)
    for i, (combo, _) in enumerate(tuples):
        for y in set(combo):
            gain[i * vocab + y] = 1.0
    rows, rhs = [], []
    for i, (_, prob) in enumerate(tuples):  # the draft marginal
        row = np.zeros(n_var)
        row[i * vocab:(i + 1) * vocab] = 1.0
        rows.append(row)
        rhs.append(prob)
    for y in range(vocab):  # the output marginal: exactly p (lossless)
        row = np.zeros(n_var)
        row[y::vocab] = 1.0
        rows.append(row)
        rhs.append(p[y])
    res = linprog(-gain, A_eq=np.array(rows), b_eq=np.array(rhs), bounds=(0, None), method="highs")
    if not res.success:
        raise RuntimeError(f"linear program failed: {res.message}")
    return float(-res.fun)
