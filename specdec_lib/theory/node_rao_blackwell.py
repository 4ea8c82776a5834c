"""Token-level verification's expected tokens on a drafted tree with each node's children draw integrated out.

Two arms that draft different tree shapes at the same contexts (Sequoia's DP tree against SpecInfer's k x L
sequences) share no draws, so their paired difference keeps the drafting noise of both. Most of it is local to
each node's own draw, and this module removes it, exactly in expectation. With ``R_u`` the probability that the
accepted path reaches node u and ``Abar_u = E[A_u | p_u, q_u]`` the probability that one of u's children is
accepted once u is reached, averaged over u's own draw,

    E[tokens | context] = E[1 + sum_{u internal} R_u * Abar_u | context]        (`rao_blackwell_tokens`).

``Abar_u`` (`expected_node_acceptance`) is exact for i.i.d. children (`traversal_identity.first_level_acceptance_iid`)
and for one child (1 - TV), else `theory.positional_acceptance` (exact or unbiased Monte Carlo); top-k children are
not random. `path_reach` and `node_acceptance` give ``R_u`` and ``A_u`` from the exact law.

ERSS has the same structure (`rao_blackwell_erss`): ``Abar_u`` is the race index law's mass on the first k_u indices
(`expected_race_acceptance`), and `erss_reach` integrates each single-child node's race out of ``R_u`` given the
drafted tokens (`erss_drafted_acceptance`), so chains carry no race noise.

Derivation, cases, cost and measured variance reduction: docs/methods/sequoia.md §6, "Comparing trees of
different shapes". tests/test_node_rao_blackwell.py proves the identity by enumeration on toy pairs.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import torch

from . import erss_first_acceptance, erss_joint_acceptance, positional_acceptance
from .traversal_identity import first_level_acceptance_iid
from ..tree import DraftTree
from ..verifiers import erss, exact_law
from ..verifiers.token_level import draft_row, target_row

__all__ = ["path_reach", "node_acceptance", "expected_node_acceptance", "rao_blackwell_tokens",
           "expected_race_acceptance", "erss_drafted_acceptance", "erss_reach", "rao_blackwell_erss"]

SCHEME_OF_SAMPLING = {"iid": "iid", "without_replacement": "without_replacement", "race": "without_replacement",
                      "topk": "topk"}
"""Tree sampling -> how token-level verification sees its children (race order = sampling without replacement)."""


def path_reach(tree: DraftTree, verifier: str = "token") -> torch.Tensor:
    """``R_v`` for every node: the probability that ``verifier`` ("token" or "erss") accepts the path from the
    root to v (1 at the root), from the verifier's exact law (the mass of the accepted paths ending in v's
    subtree; 0 or 1 for ERSS, whose walk the tree's races decide)."""
    if verifier not in ("token", "erss"):
        raise ValueError(f"verifier must be 'token' or 'erss', got {verifier!r}")
    reach = exact_law(verifier, tree).sum(1).to(torch.float64)
    parents = tree.parents.tolist()
    for v in range(len(parents) - 1, 0, -1):  # level order: children come after their parent
        reach[parents[v]] += reach[v]
    return reach


def node_acceptance(tree: DraftTree, reach: torch.Tensor | None = None) -> dict[int, float]:
    """``A_u`` for every internal node u: the probability that one of u's drafted children is accepted once
    u is reached (``sum of R_c over u's children / R_u``; NaN where u is never reached)."""
    reach = path_reach(tree) if reach is None else reach
    out = {}
    for u, kids in enumerate(tree.children):
        if kids:
            below = float(sum(reach[c] for c in kids))
            out[u] = below / float(reach[u]) if float(reach[u]) > 0 else float("nan")
    return out


def expected_node_acceptance(p: torch.Tensor, q: torch.Tensor, k: int, sampling: str, num_samples: int = 8,
                             generator: torch.Generator | None = None) -> float:
    """``Abar``: the probability that token-level verification accepts one of ``k`` children drawn from ``q``
    by ``sampling`` (i.i.d., without replacement or race) at a node with target row ``p``, the draw
    integrated out (module docstring; Monte Carlo with ``num_samples`` draw sequences only without
    replacement, for k >= 3 at large vocabularies)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    scheme = SCHEME_OF_SAMPLING.get(sampling)
    if scheme is None or scheme == "topk":
        raise ValueError(f"sampling must be one of iid, without_replacement, race (drawn children), got {sampling!r}")
    if scheme == "iid" and k > 1:
        return first_level_acceptance_iid(p, q, k)
    p = torch.as_tensor(p, dtype=torch.float64)
    q = torch.as_tensor(q, dtype=torch.float64)
    if k == 1:  # one child, under any scheme: accepted with probability sum_x min(p_x, q_x) = 1 - TV
        return float(torch.minimum(p / p.sum(), q / q.sum()).sum())
    law = positional_acceptance(p[None] / p.sum(), q[None] / q.sum(), k, scheme, num_samples=num_samples,
                                generator=generator)
    return float(law.sum())


def rao_blackwell_tokens(tree: DraftTree, num_samples: int = 8, generator: torch.Generator | None = None) -> float:
    """``1 + sum_u R_u * Abar_u``: an unbiased estimate of token-level verification's expected tokens at the
    tree's context with every node's own children draw integrated out (module docstring). ``generator``: the
    Monte Carlo of `expected_node_acceptance` only (independent of the tree's draws)."""
    if tree.sampling not in SCHEME_OF_SAMPLING:
        raise ValueError(f"tree.sampling {tree.sampling!r} has no token-level scheme; "
                         f"known: {', '.join(SCHEME_OF_SAMPLING)}")
    reach = path_reach(tree)
    if tree.sampling == "topk":  # top-k children are not random: 1 + sum_u R_u A_u = sum_v R_v, the exact value
        return float(reach.sum())
    total = 1.0
    for u, kids in enumerate(tree.children):
        if kids and float(reach[u]) > 0.0:
            total += float(reach[u]) * expected_node_acceptance(target_row(tree, u), draft_row(tree, u), len(kids),
                                                                tree.sampling, num_samples, generator)
    return total


def expected_race_acceptance(p: torch.Tensor, q: torch.Tensor, k: int, num_samples: int = 8,
                             generator: torch.Generator | None = None) -> float:
    """ERSS's ``Abar``: the probability that the target's race winner at a node (rows ``p``, ``q``) is among the
    first ``k`` arrivals of the same race under the draft, the race integrated out (module docstring)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    p = torch.as_tensor(p, dtype=torch.float64)
    q = torch.as_tensor(q, dtype=torch.float64)
    p, q = p / p.sum(), q / q.sum()
    if k == 1:
        return float(erss_first_acceptance(p, q))
    law = positional_acceptance(p[None], q[None], k, "race", num_samples=num_samples, generator=generator)
    return float(law.sum())


def erss_drafted_acceptance(p: torch.Tensor, q: torch.Tensor, token: int) -> float:
    """The probability that ERSS accepts the single child ``token`` drafted at a node with rows ``p``, ``q``,
    given that it was drafted: its race's winner under q is ``token``, and the same race's winner under p is
    ``token`` too with probability ``erss_joint_acceptance(p, q)[token] / q[token]`` (module docstring)."""
    p = torch.as_tensor(p, dtype=torch.float64)
    q = torch.as_tensor(q, dtype=torch.float64)
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < q.shape[-1]:
        raise ValueError(f"token must be an int index into the rows, got {token!r}")
    return _single_child_terms(p, q / q.sum(), token)[0]


_SINGLE_CHILD_TERMS: "OrderedDict[tuple[bytes, int], tuple[float, float]]" = OrderedDict()


def _single_child_terms(p: torch.Tensor, q: torch.Tensor, token: int) -> tuple[float, float]:
    """(`erss_drafted_acceptance` of ``token``, ERSS's first acceptance) at a node with rows ``p`` (float64) and
    ``q`` (normalised), from one `erss_joint_acceptance` (a sort of V entries: 16 ms at V = 49,152). Memoised by
    the rows' content: nested views of one tree (03's sequences of k = 1, 2, ..., 12) copy the same rows, and a
    digest of them costs a small fraction of the sort. A drafted token has q > 0: ValueError otherwise."""
    if float(q[token]) <= 0.0:
        raise ValueError(f"token {token} has draft probability 0: it cannot have been drafted")
    digest = hashlib.blake2b(digest_size=16)
    digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    digest.update(q.detach().cpu().contiguous().numpy().tobytes())
    key = (digest.digest(), int(token))
    if key not in _SINGLE_CHILD_TERMS:
        joint = erss_joint_acceptance(p / p.sum(), q)
        _SINGLE_CHILD_TERMS[key] = (float(joint[token] / q[token]), float(joint.sum()))
        if len(_SINGLE_CHILD_TERMS) > 4096:
            _SINGLE_CHILD_TERMS.popitem(last=False)
    return _SINGLE_CHILD_TERMS[key]


def _erss_walk(tree: DraftTree, acceptance: bool, num_samples: int = 8,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict[int, float]]:
    """`erss_reach` and, with ``acceptance``, ``Abar_u`` of every reached internal node (one sort per
    single-child node serves both: the joint's entry at the drafted token and its total)."""
    erss.check(tree)
    reach = torch.zeros(tree.num_nodes, dtype=torch.float64)
    reach[0] = 1.0
    abar: dict[int, float] = {}
    tokens = tree.tokens.tolist()
    for u, kids in enumerate(tree.children):  # level order: a parent's reach is final before its children's
        if not kids or float(reach[u]) == 0.0:
            continue
        p, q = erss.verification_row(tree, u).to(torch.float64), draft_row(tree, u)
        if len(kids) == 1:
            drafted, abar[u] = _single_child_terms(p, q, tokens[kids[0]])
            reach[kids[0]] = reach[u] * drafted
        else:
            winner = erss.race_winner(tree.race[u], p)
            for c in kids:
                reach[c] = reach[u] if tokens[c] == winner else 0.0
            if acceptance:
                abar[u] = expected_race_acceptance(p, q, len(kids), num_samples, generator)
    return reach, abar


def erss_reach(tree: DraftTree) -> torch.Tensor:
    """``R_v`` for ERSS on a race-drafted tree, with each single-child node's race integrated out given the
    drafted tokens: along an edge from a node with one child, `erss_drafted_acceptance`; from a node with
    several children, the realised 0/1 of its race (whether its winner under p is that child). The same
    expectation as `path_reach(tree, "erss")` given the tokens (module docstring)."""
    return _erss_walk(tree, acceptance=False)[0]


def rao_blackwell_erss(tree: DraftTree, num_samples: int = 8, generator: torch.Generator | None = None) -> float:
    """``1 + sum_u R_u * Abar_u`` for ERSS on a race-drafted tree: an unbiased estimate of its expected tokens at
    the tree's context with every node's own race integrated out (module docstring; ``R_u`` from `erss_reach`:
    on chains a product of drafted-token acceptances, below a node with several children its 0/1).
    ``generator``: the Monte Carlo of `expected_race_acceptance` only."""
    reach, abar = _erss_walk(tree, True, num_samples, generator)
    return 1.0 + sum(float(reach[u]) * a for u, a in abar.items())
