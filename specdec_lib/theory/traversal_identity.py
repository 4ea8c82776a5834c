"""What exactly "Tra.V and Tok.V have the same P(tau >= 1)" says, and exact per-context quantities.

The identity (Traversal Verification, Lemma A.2 and the "same starting line" remark of §3.3;
docs/methods/traversal.md §3.4 P3) holds IN EXPECTATION OVER THE DRAFTING OF THE SUBTREES, not per
drafted tree (P5: per tree the two differ, by up to ~0.9 in P(tau >= 1) on the real pair):

* Lemma A.2 at one node: a node reached with rate ``rho`` lies on the accepted path with probability ``rho``
  on average over the drafting below it (`node_subtree_acceptance_iid_leaves`, `node_subtree_acceptance_enumerated`).
* Given the root's children, E[P_traversal(tau >= 1)] = P_token(tau >= 1) of the same tree. With k i.i.d.
  root children both are ``1 - prod_j (1 - beta_j)``, ``beta_j = sum_x min(r_{j-1}(x), q(x))``,
  ``r_0 = p``, ``r_j = norm([r_{j-1} - q]_+)`` (`first_level_acceptance_iid`, `first_level_acceptance`).
* Level by level, E[P^(D)(tau >= l) | levels <= l] = P^(l)(tau >= l), the tree cut after level l
  (`rao_blackwell_ccdf`; its sum is `rao_blackwell_expected_tokens`; `control_variate_ccdf` builds on it).

So the paired per-tree difference of P(tau >= 1) is drafting noise of mean zero (`first_level_decomposition`,
`first_level_frame`, `martingale_z`); `depth_trend_frame` gives the depth trend.

Proof, assumptions and what it means for the verdicts: docs/methods/traversal.md §6,
"Lemma A.2 in expectation: what the library relies on".
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from ..tree import DraftTree, restrict_depth
from ..verifiers import exact_law
from ..verifiers.token_level import draft_row, target_row

__all__ = ["first_level_acceptance_iid", "first_level_acceptance", "node_subtree_acceptance_iid_leaves",
           "node_subtree_acceptance_enumerated", "level_ccdf", "rao_blackwell_ccdf",
           "rao_blackwell_expected_tokens", "CONTROL_VARIATE_WEIGHT", "control_variate_ccdf",
           "first_level_decomposition", "first_level_frame", "martingale_z", "depth_trend_frame"]


def _norm(row) -> torch.Tensor:
    row = torch.as_tensor(row, dtype=torch.float64)
    s = float(row.sum())
    if not s > 0:
        raise ValueError("a distribution row has no mass")
    return row / s


def _pos(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(min=0.0)


def first_level_acceptance_iid(p, q, k: int) -> float:
    """Exact P(tau >= 1) of token-level RRS with ``k`` i.i.d. root children from ``q`` (target row
    ``p``), averaged over the children: ``1 - prod_j (1 - beta_j)`` (module docstring). By Lemma A.2 it
    is also traversal's P(tau >= 1) averaged over the drafting of the whole tree, for any tree whose
    root has ``k`` i.i.d. children."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    r, q = _norm(p), _norm(q)
    reject = 1.0
    for _ in range(k):
        beta = float(torch.minimum(r, q).sum())
        reject *= 1.0 - beta
        res = _pos(r - q)
        s = float(res.sum())
        if s <= 0.0:  # r <= q everywhere after this child: every later child is accepted surely
            return 1.0 - reject
        r = res / s
    return 1.0 - reject


def _ordered_children(q: torch.Tensor, k: int, sampling: str):
    """Every ordered k-tuple of children from ``q`` with its probability (small vocabularies)."""
    vocab = q.shape[0]
    ql = q.tolist()
    if sampling == "iid":
        support = [t for t in range(vocab) if ql[t] > 0]
        for combo in itertools.product(support, repeat=k):
            yield combo, math.prod(ql[t] for t in combo)
        return
    if sampling != "without_replacement":
        raise ValueError(f"sampling must be 'iid' or 'without_replacement', got {sampling!r}")
    if k > vocab:
        raise ValueError(f"{k} children cannot be drawn without replacement from {vocab} tokens")

    def rec(chosen, prob):
        if len(chosen) == k:
            yield tuple(chosen), prob
            return
        rest = [t for t in range(vocab) if t not in chosen]
        mass = sum(ql[t] for t in rest)
        for t in rest:
            w = ql[t] / mass if mass > 0 else 1.0 / len(rest)
            if w > 0:
                yield from rec(chosen + [t], prob * w)

    yield from rec([], 1.0)


def first_level_acceptance(p, q, k: int, sampling: str = "iid") -> float:
    """Exact P(tau >= 1) of token-level RRS with ``k`` root children averaged over their drafting.

    ``iid``: the closed form `first_level_acceptance_iid` (any vocabulary). ``without_replacement``:
    enumeration of the ordered children (small vocabularies only: the residual's proposal depends on
    which tokens were drawn). Equal to traversal's P(tau >= 1) averaged over the whole tree's drafting
    (module docstring)."""
    if sampling == "iid":
        return first_level_acceptance_iid(p, q, k)
    p, q = _norm(p), _norm(q)
    if p.shape[0] ** k > 2_000_000:
        raise ValueError("without-replacement enumeration is for small vocabularies")
    total = 0.0
    for combo, prob in _ordered_children(q, k, sampling):
        tree = DraftTree(torch.tensor([0, *combo]), torch.tensor([-1] + [0] * k),
                         torch.cat([q[None], torch.zeros(k, q.shape[0], dtype=torch.float64)]),
                         p.expand(k + 1, -1).clone(), sampling=sampling)
        total += prob * (1.0 - float(exact_law("token", tree)[0].sum()))
    return total


def node_subtree_acceptance_iid_leaves(rho: float, r, q, k: int) -> float:
    """Lemma A.2 in closed form for a node with ``k`` i.i.d. LEAF children: the exact probability that
    traversal accepts a path through the node (the node or one of its children), averaged over the
    children drawn from ``q``, for a node reached with rate ``rho`` and current target row ``r``.

    The state updates after a rejected child (Eqs. 1 and 3; Eq. 2 is skipped for i.i.d. children) do
    not depend on the rejected token, so the average factorises: child j is accepted with mean
    ``a_j = sum_x min(q(x), rho_j r_j(x))``. Returns ``sum_j a_j prod_{i<j} (1 - a_i) +
    prod_j (1 - a_j) rho_k``; Lemma A.2 says this equals ``rho`` (tested, and checked on real rows)."""
    rho = float(rho)
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    r, q = _norm(r), _norm(q)
    out, survive = 0.0, 1.0
    for _ in range(k):
        if rho <= 0.0:
            return out
        a = float(torch.minimum(q, rho * r).sum())
        out += survive * a
        survive *= 1.0 - a
        res = _pos(rho * r - q)
        s = float(res.sum())
        rho = s / (s + (1.0 - rho)) if s + (1.0 - rho) > 0 else 0.0
        if s <= 0.0:
            return out
        r = res / s
    return out + survive * rho


def node_subtree_acceptance_enumerated(rho: float, r, q, child_rows: Sequence, k: int, grandchildren: int = 0,
                                       sampling: str = "iid") -> float:
    """The same average by brute force through the actual `traversal` verifier (small vocabularies):
    a tree whose root stands for the node, with the root's rate forced to ``rho`` by a pseudo-parent.

    Builds the tree pseudo-root -> u -> k children (-> ``grandchildren`` leaves each when > 0) where the
    pseudo-root's rows make ``rho(u) = rho`` (target ``rho * onehot`` plus the rest elsewhere,
    draft ``onehot``), ``u`` has target ``r`` and draft ``q``, and child with token x has draft row
    ``child_rows[x]`` (target rows are irrelevant for acceptance and set to ``r``). Returns the
    average over the drafting below ``u`` of P(accepted path passes through u)."""
    r, q = _norm(r), _norm(q)
    vocab = r.shape[0]
    u_tok = 0
    top_t = torch.full((vocab,), 0.0, dtype=torch.float64)
    top_t[u_tok] = rho
    if vocab > 1:
        top_t[1:] = (1.0 - rho) / (vocab - 1)
    else:
        raise ValueError("need a vocabulary of at least 2")
    top_q = torch.zeros(vocab, dtype=torch.float64)
    top_q[u_tok] = 1.0
    total = 0.0
    for combo, prob in _ordered_children(q, k, sampling):
        subs = [[((), 1.0)]] * k
        if grandchildren:
            subs = [list(_ordered_children(_norm(child_rows[x]), grandchildren, sampling)) for x in combo]
        for picks in itertools.product(*subs):
            pr = prob * math.prod(pp for _, pp in picks)
            if pr == 0.0:
                continue
            tokens, parents, drafts = [0, u_tok], [-1, 0], [top_q, q]
            kids = []
            for x in combo:
                tokens.append(x)
                parents.append(1)
                drafts.append(_norm(child_rows[x]) if grandchildren else torch.zeros(vocab, dtype=torch.float64))
                kids.append(len(tokens) - 1)
            for c, (gk, _) in zip(kids, picks):
                for y in gk:
                    tokens.append(y)
                    parents.append(c)
                    drafts.append(torch.zeros(vocab, dtype=torch.float64))
            n = len(tokens)
            targets = torch.stack([top_t] + [r] * (n - 1))
            tree = DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.stack(drafts), targets,
                             sampling=sampling)
            law = exact_law("traversal", tree)
            total += pr * float(law[1:].sum())
    return total


def level_ccdf(verifier: str, tree: DraftTree, state=None) -> np.ndarray:
    """P(tau >= l) for l = 0..depth of ``verifier`` on ``tree`` (exact, from its law)."""
    law = exact_law(verifier, tree, state).sum(1).numpy()
    depth = np.asarray(tree.depths)
    per = np.bincount(depth, weights=law, minlength=int(depth.max()) + 1)
    return per[::-1].cumsum()[::-1]


def rao_blackwell_ccdf(tree: DraftTree, verifier: str = "traversal") -> np.ndarray:
    """E[P(tau >= l) | levels <= l] for l = 0..depth: P(tau >= l) of ``verifier`` on the tree restricted
    to its first l drafted levels (module docstring). For traversal, l = 1 is token-level's
    P(tau >= 1) of the same tree; for token-level every entry equals `level_ccdf`."""
    depth = max(tree.depths)
    out = np.ones(depth + 1)
    for level in range(1, depth + 1):
        out[level] = level_ccdf(verifier, restrict_depth(tree, level + 1))[level]
    return out


def rao_blackwell_expected_tokens(tree: DraftTree, verifier: str = "traversal") -> float:
    """1 + sum_l E[P(tau >= l) | levels <= l]: an unbiased estimate of the verifier's expected tokens
    at this context with the drafting noise of every level below l integrated out of term l."""
    return float(rao_blackwell_ccdf(tree, verifier).sum())


CONTROL_VARIATE_WEIGHT = 0.5
"""The fixed weight of `control_variate_ccdf`, chosen before use from stored 07 data (data/results/07_regime/): over its ten
(regime, chain / binary) cells the weight minimising the prompt-clustered variance of traversal minus token was
0.30-1.05 (0.49-0.70 in eight), and 1/2 lowered the standard error of that difference in all ten, by 6-50%.
Being fixed, not fitted per run, it keeps the estimate exactly unbiased (those data share their first trees with
later runs of the same seed; the seed-stability check of the verdicts reruns them under another seed). Checked
out of sample on 02's stored steps (another draft and machine, not used to choose it): it lowered the standard
error in 17 of 20 (shape, temperature, depth) cells and raised it in 3 (chains at T = 0.2, depth >= 4, by up
to 23%)."""


def control_variate_ccdf(tree: DraftTree, weight: float = CONTROL_VARIATE_WEIGHT,
                         rb: np.ndarray | None = None) -> np.ndarray:
    """Traversal's P(tau >= l) for l = 0..depth, Rao-Blackwellised and corrected by a control variate:
    ``rb + weight * (rb - raw)``, with ``rb`` = `rao_blackwell_ccdf` and ``raw`` = `level_ccdf` of the tree.

    ``raw - rb`` has mean 0 at every context (term l of ``rb`` is the mean of term l of ``raw`` over the
    drafting below level l, module docstring), so the estimate has traversal's mean for any fixed ``weight``.
    It is not 0 given the tree's other levels, though: the subtree noise that ``rb`` removes from term l is
    correlated with the deeper levels' terms of ``rb`` and of token-level's CCDF on the same tree. Moving
    away from ``raw`` by ``weight`` cancels part of that correlation, so the paired difference to token-level
    on the same trees is less noisy than with ``rb`` alone (`CONTROL_VARIATE_WEIGHT`). ``rb``: the tree's
    `rao_blackwell_ccdf` when the caller has it already (its depth exact laws are the bulk of the cost)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise ValueError(f"weight must be a finite number, got {weight!r}")
    rb = rao_blackwell_ccdf(tree, "traversal") if rb is None else rb
    return rb + float(weight) * (rb - level_ccdf("traversal", tree))


def first_level_decomposition(tree: DraftTree) -> dict[str, float]:
    """Per drafted tree: token's and traversal's P(tau >= 1), their difference (drafting noise of mean
    0 given the root's children) and, for i.i.d. trees of depth 2 (leaf grandchildren), traversal's
    P(tau >= 1) with the grandchildren integrated out exactly (`node_subtree_acceptance_iid_leaves`
    at every root child, then the root's RRS) -- which must equal token's."""
    tok = float(level_ccdf("token", tree)[1])
    tra = float(level_ccdf("traversal", tree)[1])
    out = {"token": tok, "traversal": tra, "difference": tra - tok, "traversal_rb": float("nan")}
    kids = tree.children
    if tree.sampling == "iid" and max(tree.depths) == 2:
        r, q = target_row(tree, 0), draft_row(tree, 0)
        reach, total = 1.0, 0.0
        for c in kids[0]:
            x = int(tree.tokens[c])
            rho_c = min(1.0, float(r[x]) / float(q[x]))
            if kids[c]:
                a = node_subtree_acceptance_iid_leaves(rho_c, target_row(tree, c), draft_row(tree, c), len(kids[c]))
            else:
                a = rho_c
            total += reach * a
            reach *= 1.0 - a
            res = _pos(r - q)
            s = float(res.sum())
            if s <= 0.0:
                break
            r = res / s
        out["traversal_rb"] = total
    return out


def first_level_frame(records) -> "pd.DataFrame":
    """Per drafted tree of `experiments.collect_trees` records: `first_level_decomposition` plus the
    context's exact P(tau >= 1) averaged over ALL drafting (`first_level_acceptance_iid` on the
    root rows; i.i.d. trees only), keyed by prompt, step and draw.

    At each context the means over independent draws of ``token`` and ``traversal`` both estimate
    ``exact``; ``traversal_rb`` (depth-2 trees) must equal ``token`` tree by tree."""
    rows = []
    for rec in records:
        tree = rec.tree
        d = first_level_decomposition(tree)
        exact = float("nan")
        if tree.sampling == "iid":
            exact = first_level_acceptance_iid(target_row(tree, 0), draft_row(tree, 0), len(tree.children[0]))
        rows.append({"prompt_id": rec.prompt_id, "category": rec.category, "step": rec.step, "draw": rec.draw,
                     **d, "exact": exact})
    return pd.DataFrame(rows)


def martingale_z(frame, column: str = "difference", context=("prompt_id", "step")) -> dict[str, float]:
    """Mean of a per-tree quantity whose conditional mean given the context is 0 (the sampled
    P(tau >= 1) difference), its standard error and z. Given each context the draws are independent,
    and the contexts of a run form a martingale-difference sequence, so the SE is the plain one over
    trees; the mean of each context's draws is used as the unit (draws at one context share it)."""
    per = frame.groupby(list(context))[column].mean()
    n = len(per)
    mean = float(per.mean())
    se = float(per.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return {"mean": mean, "se": se, "z": mean / se if se and se > 0 else float("nan"), "contexts": n,
            "trees": int(len(frame))}


def depth_trend_frame(records, depths: Sequence[int]) -> "pd.DataFrame":
    """Per drafted tree and drafted depth d (the tree restricted to its first d levels): token's and
    traversal's exact expected tokens, traversal's Rao-Blackwellised expected tokens
    (`rao_blackwell_expected_tokens`) and both P(tau >= 1). One pass computes every depth: the
    restricted trees are nested, so the level-l terms of the RB sum are shared across depths."""
    rows = []
    for rec in records:
        top = max(depths)
        full = restrict_depth(rec.tree, top + 1)
        rb_terms = rao_blackwell_ccdf(full)  # term l depends on levels <= l only
        for d in depths:
            tree = restrict_depth(full, d + 1)
            tok, tra = level_ccdf("token", tree), level_ccdf("traversal", tree)
            rows.append({"prompt_id": rec.prompt_id, "category": rec.category, "step": rec.step,
                         "draw": rec.draw, "depth": d, "token": float(tok.sum()), "traversal": float(tra.sum()),
                         "traversal_rb": float(rb_terms[: d + 1].sum()), "p1_token": float(tok[1]),
                         "p1_traversal": float(tra[1])})
    return pd.DataFrame(rows)
