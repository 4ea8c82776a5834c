"""One-level views of drafted stars (the first k children of the root), their rejection rates and
index laws, sampled accepted lengths and CCDFs."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from ..theory import optimal_multidraft
from ..theory import erss_first_acceptance, positional_acceptance, total_variation
from ..tree import DraftTree, restrict_to_shape
from ..drafting import draw_children
from ..exact import sample_tree
from ..verifiers import exact_law, verify
from ..verifiers.spectr import kseq_rho
from .collection import TreeRecord

def star_views(ks: Iterable[int]) -> dict[int, Callable[[DraftTree], DraftTree]]:
    """Views ``k -> the first k children of the root`` of a drafted star ``batch:Kx1``."""
    return {int(k): (lambda t, k=int(k): restrict_to_shape(t, [-1] + [0] * k)) for k in ks}


def star_rejection_from_rows(target_rows: torch.Tensor, draft_rows: torch.Tensor, ks: Sequence[int],
                             verifier: str = "spectr", sampling: str = "iid", seed: int = 0):
    """P(no child accepted) of ``verifier`` on a star of k children drawn from each matched draft row.

    ``target_rows`` / ``draft_rows``: [M, V] rows of `matched_rows` (target-sampled contexts, so every
    scheme is measured at the same contexts). One star of max(ks) children is drawn per row (`drafting.
    draw_children`) and its first k children are verified exactly for every k (a prefix of the children
    is a star of k children drawn the same way). Whether a child is accepted depends on the root's rows
    only, so the leaves get the root's target row as a placeholder (it would only shape the bonus token
    after an accepted child). For schemes with a closed form, `theory.positional_acceptance` needs no
    drafting at all; this is for verifiers without one (SpecTr). Returns a DataFrame: row, k, rejection.
    """
    if target_rows.shape != draft_rows.shape or target_rows.dim() != 2:
        raise ValueError(f"need matched [M, V] rows, got {tuple(target_rows.shape)} and {tuple(draft_rows.shape)}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive, got {ks}")
    kmax = ks[-1]
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for m in range(target_rows.shape[0]):
        p, q = target_rows[m].to(torch.float64), draft_rows[m].to(torch.float64)
        kids, _ = draw_children(q, kmax, sampling, generator)
        for k in ks:
            tokens = torch.cat([torch.zeros(1, dtype=torch.long), kids[:k]])
            draft = torch.zeros(k + 1, q.shape[0], dtype=torch.float64)
            draft[0] = q
            tree = DraftTree(tokens, torch.tensor([-1] + [0] * k), draft, p.expand(k + 1, -1).clone(),
                             sampling=sampling)
            rows.append({"row": m, "k": k, "rejection": float(exact_law(verifier, tree)[0].sum())})
    return pd.DataFrame(rows)


def kseq_rejection_from_rows(target_rows: torch.Tensor, draft_rows: torch.Tensor, ks: Sequence[int]):
    """SpecTr's K-SEQ rejection rate per matched context with the k i.i.d. drafts integrated out: exactly
    (1 - beta)^k with (rho, beta) = `verifiers.spectr.kseq_rho` (tests/test_optimal_multidraft.py checks
    1 - (1 - beta)^k against enumerated stars). Rows are renormalised in float64. Returns a DataFrame: row, k,
    rejection (the same frame as `star_rejection_from_rows`, without the noise of one drawn star per row)."""
    target_rows, draft_rows = torch.as_tensor(target_rows), torch.as_tensor(draft_rows)
    if target_rows.shape != draft_rows.shape or target_rows.dim() != 2:
        raise ValueError(f"need matched [M, V] rows, got {tuple(target_rows.shape)} and {tuple(draft_rows.shape)}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive numbers of drafts, got {ks}")
    rows = []
    for m in range(target_rows.shape[0]):
        p, q = _normalised(target_rows[m], draft_rows[m])
        rows += [{"row": m, "k": k, "rejection": (1.0 - kseq_rho(p, q, k)[1]) ** k} for k in ks]
    return pd.DataFrame(rows)


def star_index_law(records: Sequence[TreeRecord], verifier: str):
    """Per drafted star (``batch:Kx1``): the exact probability that the verifier accepts the i-th child.

    For verifiers that try the children in order and stop at the first accepted one (token-level
    recursive rejection sampling with or without replacement, ERSS races, top-k matching) this law does
    not depend on how many children follow, so its mean over stars at target-distributed contexts is the
    positional acceptance vector p_1..p_K (Sequoia Defs 3.1-3.2; ERSS's 0th-order index distribution r),
    and 1 + p_1 + ... + p_k is the expected tokens of batch(k). Not for SpecTr (its rule depends on k).
    Returns a DataFrame: prompt_id, category, step, p1..pK.
    """
    rows = []
    for rec in records:
        kids = rec.tree.children[0]
        if len(kids) != rec.tree.num_nodes - 1:
            raise ValueError("star_index_law needs star trees (batch:Kx1)")
        law = exact_law(verifier, rec.tree)
        rows.append({"prompt_id": rec.prompt_id, "category": rec.category, "step": rec.step,
                     **{f"p{i + 1}": float(law[c].sum()) for i, c in enumerate(kids)}})
    return pd.DataFrame(rows)


SINGLE_DRAFT_ACCEPTANCE = {  # verifier -> exact P(one draft accepted) from the context's rows (p, q)
    "token": lambda p, q: 1.0 - total_variation(p, q),  # sum_x min(p, q): GSS / SpS / RRS with one draft
    "erss": erss_first_acceptance,  # docs/methods/erss.md §3.6
}


def single_draft_acceptance(records: Sequence[TreeRecord], verifiers: Sequence[str] = ("token", "erss")):
    """Per drafted tree, the exact probability that ONE draft at its root is accepted, given the root's rows
    (target p, draft q): the drafted token is integrated out (Rao-Blackwell). Its mean over trees estimates
    r(1) (`star_index_law`'s p1 for batch(1)) with the drafting noise removed. ``verifiers``: keys of
    `SINGLE_DRAFT_ACCEPTANCE`. Returns a DataFrame: prompt_id, category, step, draw and one column per verifier."""
    unknown = [v for v in verifiers if v not in SINGLE_DRAFT_ACCEPTANCE]
    if unknown:
        raise ValueError(f"verifiers {unknown}: no closed form; known: {', '.join(SINGLE_DRAFT_ACCEPTANCE)}")
    rows = []
    for rec in records:
        p, q = _normalised(rec.tree.target_probs[0], rec.tree.draft_probs[0])
        rows.append({"prompt_id": rec.prompt_id, "category": rec.category, "step": rec.step, "draw": rec.draw,
                     **{v: float(SINGLE_DRAFT_ACCEPTANCE[v](p, q)) for v in verifiers}})
    return pd.DataFrame(rows)


INDEX_LAW_SCHEME = {"token": "without_replacement", "erss": "race"}
"""Verifier on race-drafted children -> the `theory.positional_acceptance` scheme that is its index law: a
race's children arrive in the order of sampling without replacement and the token verifier ignores the
race times, so GSS on them is Sequoia's scheme; ERSS is the race itself (docs/methods/erss.md §3.2)."""


def index_law_at_rows(target_rows: torch.Tensor, draft_rows: torch.Tensor, index, max_index: int, verifier: str,
                      num_samples: int = 64, seed: int = 0):
    """Per matched context (row of ``target_rows`` / ``draft_rows``, named by the ``index`` frame of
    `rows_at_shared_contexts(..., with_index=True)`): the probability that ``verifier`` accepts the i-th child
    of a star drafted there by a race, i = 1..``max_index``, with the star integrated out: Monte Carlo over
    ``num_samples`` stars per row (`theory.positional_acceptance`, `INDEX_LAW_SCHEME`; Rao-Blackwellised for GSS,
    whose acceptance given the rejected draws is exact, and for ERSS, whose race times are integrated out given
    the P-winner, enumerated over the row's likeliest tokens and sampled ``num_samples`` times beyond them, and
    the sampled arrival order of its rivals), and p1 in closed form
    (`SINGLE_DRAFT_ACCEPTANCE`). The same frame as `star_index_law` (its mean over rows is
    r, `positional_vector`; 1 + p1 + ... + pk is batch(k)'s expected tokens at that context), without the
    noise of one drafted star per context. Returns a DataFrame: the ``index`` columns, p1..pK. ``max_index`` = 1
    gives p1 alone, exactly and without the Monte Carlo (what a chain's 0th-order G reads).

    Each entry is an unbiased estimate, but a row need not sum to at most 1: later entries are Monte Carlo,
    so a row near acceptance 1 can meet an exact p1 of 0.99 with a p2 that overshoots its 0.01.
    Capping rows here would bias the tail down (only the overshooting rows would shrink); a consumer
    that needs a sub-distribution caps the mean vector instead (`capped_vector`)."""
    if verifier not in INDEX_LAW_SCHEME:
        raise ValueError(f"verifier {verifier!r}: no index-law scheme; known: {', '.join(INDEX_LAW_SCHEME)}")
    target_rows, draft_rows = torch.as_tensor(target_rows), torch.as_tensor(draft_rows)
    if target_rows.shape != draft_rows.shape or target_rows.dim() != 2:
        raise ValueError(f"need matched [M, V] rows, got {tuple(target_rows.shape)} and {tuple(draft_rows.shape)}")
    if not isinstance(index, pd.DataFrame):
        raise ValueError(f"index must be a DataFrame naming each row's context, got {type(index).__name__}")
    if len(index) != target_rows.shape[0]:
        raise ValueError(f"index has {len(index)} rows for {target_rows.shape[0]} contexts")
    if isinstance(max_index, bool) or not isinstance(max_index, int) or not 1 <= max_index < target_rows.shape[1]:
        raise ValueError(f"max_index must be an int in [1, V - 1], got {max_index!r}")
    if max_index == 1:  # p1 alone is a closed form: no Monte Carlo (``num_samples`` and ``seed`` play no part)
        law = np.zeros((target_rows.shape[0], 1))
    else:
        law = positional_acceptance(target_rows, draft_rows, max_index, INDEX_LAW_SCHEME[verifier],
                                    num_samples=num_samples, per_row=True,
                                    generator=torch.Generator().manual_seed(seed)).numpy().copy()
    law[:, 0] = [float(SINGLE_DRAFT_ACCEPTANCE[verifier](*_normalised(p, q))) for p, q in zip(target_rows, draft_rows)]
    out = index.reset_index(drop=True).copy()
    for i in range(max_index):
        out[f"p{i + 1}"] = law[:, i]
    return out


def batch_tokens_by_context(index_law, ks: Sequence[int]) -> pd.DataFrame:
    """batch(k)'s expected tokens per context with the star integrated out, from an index-law frame
    (`index_law_at_rows` or `star_index_law`): ``1 + p1 + ... + pk`` (a verifier that tries the children in
    order and stops at the first accepted one emits the accepted child and a bonus token, or one token when
    none is accepted). A k beyond the law's last index K uses p1..pK: exact when K = V - 1 (the star holds the
    whole vocabulary), otherwise it leaves out the tail mass beyond K. Returns a long DataFrame: the law's key
    columns (those that are not p1..pK), ``view`` = k, ``expected_tokens`` and ``p_accept_first`` (= p1).
    Per context, the formula of `theory.batch_expected_tokens` (which takes the mean vector r)."""
    cols = sorted((c for c in index_law.columns if c.startswith("p") and c[1:].isdigit()), key=lambda c: int(c[1:]))
    if not cols:
        raise ValueError("index_law has no p1..pK columns (an index-law frame of index_law_at_rows / star_index_law)")
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive numbers of children, got {ks!r}")
    keys = index_law.drop(columns=cols).reset_index(drop=True)
    cum = index_law[cols].cumsum(axis=1).reset_index(drop=True)
    first = index_law[cols[0]].reset_index(drop=True)
    return pd.concat([keys.assign(view=k, expected_tokens=1.0 + cum[cols[min(k, len(cols)) - 1]], p_accept_first=first)
                      for k in ks], ignore_index=True)


def positional_vector(index_law) -> np.ndarray:
    """Mean of the p1..pK columns of `star_index_law` (the measured positional acceptance vector)."""
    cols = [c for c in index_law.columns if c.startswith("p") and c[1:].isdigit()]
    return index_law[sorted(cols, key=lambda c: int(c[1:]))].mean().to_numpy()


def capped_vector(vector) -> np.ndarray:
    """A measured index / positional vector made a sub-distribution: when its entries sum to more than 1
    (possible near acceptance 1, where an exact first entry meets Monte Carlo later ones, e.g. in a
    bootstrap resample of `index_law_at_rows` rows, whose single rows may overshoot by design), the entries
    after the first are scaled down so that the sum is 1; otherwise it is returned unchanged. The first
    entry is never changed, so a chain's positional-model value (which reads p1 only) is the same either way."""
    v = np.asarray(vector, dtype=np.float64).copy()
    if v.ndim != 1 or v.size == 0 or np.any(v < 0) or not np.all(np.isfinite(v)):
        raise ValueError(f"vector must be a non-empty 1-D array of non-negative numbers, got {vector!r:.80}")
    if v[0] > 1.0 + 1e-9:
        raise ValueError(f"vector's first entry is a probability, got {v[0]}")
    tail = v[1:].sum()
    if v.sum() > 1.0 and tail > 0:
        v[1:] *= max(1.0 - min(v[0], 1.0), 0.0) / tail
    return v


def sampled_accepted_lengths(verifier: str, target, draft, prefix: Sequence[int], parents: Sequence[int],
                             sampling: str = "iid", n: int = 1000, seed: int = 0) -> np.ndarray:
    """Accepted draft tokens (tau) of ``n`` independent single steps on toy LMs: draw a tree
    (`exact.sample_tree`), verify it with the sampler. The sampled counterpart of
    `exact.accepted_length_law`."""
    generator = torch.Generator().manual_seed(seed)
    cache: dict = {}
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        tree = sample_tree(target, draft, prefix, parents, sampling, generator, cache=cache)
        out[i] = len(verify(verifier, tree, generator).path)
    return out


def ccdf(law_or_samples: Sequence[float] | np.ndarray, samples: bool = False) -> np.ndarray:
    """P(tau >= k) for k = 0..K from a law over tau = 0..K, or from samples of tau (``samples=True``)."""
    if samples:
        values = np.asarray(law_or_samples)
        top = int(values.max()) if values.size else 0
        return np.array([(values >= k).mean() for k in range(top + 1)])
    law = np.asarray(law_or_samples, dtype=float)
    return law[::-1].cumsum()[::-1]


def _normalised(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    p, q = p.double(), q.double()
    return p / p.sum(), q / q.sum()


def first_level_against_optimum(target_rows: torch.Tensor, draft_rows: torch.Tensor, ks: Sequence[int],
                                sampling: str, num_samples: int = 64, seed: int = 0) -> pd.DataFrame:
    """First-level acceptance of the lossless verifiers beside the optimum of ANY lossless verifier
    (Hu et al., `optimal_multidraft.optimal_acceptance`) at the same matched contexts, for stars of k
    drafts drawn ``sampling`` ("iid" or "without_replacement").

    Per context (``row``) and k, each an expectation over the drafted star: ``token`` is recursive
    rejection sampling (SpecInfer i.i.d., Sequoia without replacement; `theory.positional_acceptance`,
    exact for i.i.d., and without replacement while V!/(V-k+1)! <= 200,000, e.g. k <= 2 at V = 49,152;
    Rao-Blackwellised Monte Carlo beyond) and also
    Traversal's first level (Traversal Lemma A.2, tests/test_traversal_identity.py); ``spectr`` (i.i.d.
    only) is K-SEQ's exact 1 - (1 - beta)^k (`verifiers.spectr.kseq_rho`; tests/test_optimal_multidraft.py
    checks it against enumerated stars); ``optimal`` is the ceiling. One star of k drafts emits
    1 + acceptance tokens per target call, so ``optimal`` also bounds the tokens per step of every
    lossless verifier on such a star. Returns a long DataFrame: row, k, sampling, verifier, acceptance."""
    if sampling not in optimal_multidraft.SAMPLINGS:
        raise ValueError(f"sampling must be one of {optimal_multidraft.SAMPLINGS}, got {sampling!r}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive numbers of drafts, got {ks}")
    target_rows, draft_rows = torch.as_tensor(target_rows), torch.as_tensor(draft_rows)
    rrs = positional_acceptance(target_rows, draft_rows, ks[-1], sampling, num_samples=num_samples,
                                per_row=True, generator=torch.Generator().manual_seed(seed)).numpy()
    best = optimal_multidraft.optimal_acceptance_rows(target_rows, draft_rows, ks, sampling)
    rows = np.arange(target_rows.shape[0])
    parts = []
    for j, k in enumerate(ks):
        values = {"token": rrs[:, :k].sum(1), "optimal": best[:, j]}
        if sampling == "iid":  # rows renormalised in float64, as optimal_acceptance_rows does
            values["spectr"] = 1.0 - kseq_rejection_from_rows(target_rows, draft_rows, [k])["rejection"].to_numpy()
        parts += [pd.DataFrame({"row": rows, "k": k, "sampling": sampling, "verifier": name, "acceptance": v})
                  for name, v in values.items()]
    return pd.concat(parts, ignore_index=True)
