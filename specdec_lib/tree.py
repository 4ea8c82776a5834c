"""Draft trees: the one data structure every verifier reads (see docs/ARCHITECTURE.md, "Public contract").

A `DraftTree` holds N drafted nodes plus the root (node 0, the last fixed token of the prefix):

* ``tokens[i]``        token of node i (the root's token is the last prefix token),
* ``parents[i]``       parent of node i; ``parents[0] == -1`` and ``parents[i] < i``; siblings are
                       ordered by index, which is their sampling order,
* ``draft_probs[i]``   the draft distribution node i's children were drawn from,
* ``target_probs[i]``  the target distribution after the path root..i,
* ``sampling``         how children were drawn: ``"iid"`` (SpecInfer / naive), ``"without_replacement"``
                       (Sequoia, GSS), ``"topk"`` (deterministic top-k of the draft) or ``"race"`` (ERSS),
* ``race``             for ``"race"``: the Exp(1) arrival times ``[N+1, V]`` of each node's race, shared by
                       draft and target (ERSS Algorithm 5 as corrected in docs/methods/erss.md §2.6).

Rows are the distributions actually sampled from, after temperature / top-p processing. A leaf's
draft row is never read by any verifier; it may be a distribution or all zeros ("not computed").

Shape builders return parent lists (``list[int]``, root included) for the static shapes of the
papers: chain, batch, k-ary, SpecInfer k x L and binary trees. Size and depth count the root.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import torch

from .arguments import ArgumentTypeError, check_int

SAMPLING_MODES = ("iid", "without_replacement", "topk", "race")
# Modes whose drafted tokens are draws from the draft distribution and so must have q > 0.
_MODES_NEEDING_POSITIVE_DRAFT_PROB = ("iid", "race")
ROW_SUM_TOLERANCE = 1e-5


@dataclass(frozen=True, eq=False)
class DraftTree:
    tokens: torch.Tensor
    parents: torch.Tensor
    draft_probs: torch.Tensor
    target_probs: torch.Tensor
    sampling: str = "iid"
    race: torch.Tensor | None = field(default=None)

    def __post_init__(self) -> None:
        # plain sequences (lists, tuples, numpy arrays) become tensors; anything else is refused by name
        for name, kind in (("tokens", "ids"), ("parents", "ids"), ("draft_probs", "rows"),
                           ("target_probs", "rows"), ("race", "rows")):
            value = getattr(self, name)
            if value is not None and not isinstance(value, torch.Tensor):
                object.__setattr__(self, name, _as_tensor(name, value, kind))
        _validate(self)

    # ----- structure -------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Number of nodes including the root (Sequoia's "size")."""
        return int(self.tokens.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[1])

    @cached_property
    def parent_list(self) -> list[int]:
        return [int(p) for p in self.parents.tolist()]

    @cached_property
    def children(self) -> list[list[int]]:
        """children[i] = the children of node i in sampling order (ascending index)."""
        return parent_children(self.parent_list)

    @cached_property
    def depths(self) -> list[int]:
        """depths[i] = number of drafted tokens on the path root..i (root has depth 0)."""
        return parent_depths(self.parent_list)

    @property
    def depth(self) -> int:
        """Sequoia's depth: number of levels including the root (a chain of 8 drafts has depth 9)."""
        return max(self.depths) + 1

    def path_to(self, node: int) -> tuple[int, ...]:
        """Node indices root-excluded, in depth order, of the path root..node."""
        path = []
        while node > 0:
            path.append(node)
            node = self.parent_list[node]
        return tuple(reversed(path))

    @cached_property
    def is_chain(self) -> bool:
        return self.parent_list == list(range(-1, self.num_nodes - 1))

    def with_target_probs(self, target_probs: torch.Tensor) -> "DraftTree":
        """The same drafted tree scored by another target (e.g. a modified target distribution)."""
        return DraftTree(self.tokens, self.parents, self.draft_probs, target_probs, self.sampling, self.race)


def _as_tensor(name: str, value, kind: str) -> torch.Tensor:
    """A list / tuple / array argument of `DraftTree` as a tensor: ids keep their (integer) dtype, rows
    become float64; ValueError naming the argument when it is not numeric."""
    if isinstance(value, (str, bytes, dict, set)):
        raise ValueError(f"DraftTree {name} must be a tensor or a sequence of numbers, got {type(value).__name__}")
    try:
        if kind == "rows":
            return torch.as_tensor(value, dtype=torch.float64)
        out = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"DraftTree {name} must be a tensor or a sequence of numbers: {exc}") from None
    if out.numel() == 0 and out.is_floating_point():  # an empty list: no dtype to check
        out = out.long()
    return out


def _check_integer(name: str, values: torch.Tensor) -> None:
    """ValueError unless ``values`` has an integer dtype: a float 1.5 is no token id or parent."""
    if values.dtype == torch.bool or values.is_floating_point() or values.is_complex():
        raise ValueError(f"DraftTree {name} must hold integers (an integer dtype), got dtype {values.dtype}")


def _validate(tree: DraftTree) -> None:
    tokens, parents, q, p = tree.tokens, tree.parents, tree.draft_probs, tree.target_probs
    if tree.sampling not in SAMPLING_MODES:
        raise ValueError(f"unknown sampling mode {tree.sampling!r}; expected one of {SAMPLING_MODES}")
    if tokens.dim() != 1 or parents.dim() != 1:
        raise ValueError("tokens and parents must be 1-D tensors of length N+1")
    n = tokens.shape[0]
    if n < 1:
        raise ValueError("a draft tree needs at least the root node")
    _check_integer("tokens", tokens)
    _check_integer("parents", parents)
    if parents.shape[0] != n:
        raise ValueError(f"parents has {parents.shape[0]} entries but tokens has {n}")
    for name, rows in (("draft_probs", q), ("target_probs", p)):
        if rows.dim() != 2 or rows.shape[0] != n:
            raise ValueError(f"{name} must have shape [N+1, V] = [{n}, V], got {tuple(rows.shape)}")
    if q.shape[1] != p.shape[1]:
        raise ValueError(f"draft vocabulary {q.shape[1]} differs from target vocabulary {p.shape[1]}")
    vocab = p.shape[1]
    par = parents.tolist()
    if par[0] != -1:
        raise ValueError(f"node 0 is the root and must have parent -1, got {par[0]}")
    for i in range(1, n):
        if not 0 <= par[i] < i:
            raise ValueError(f"node {i}: parent {par[i]} must satisfy 0 <= parent < {i}")
    tok = tokens.tolist()
    for i, t in enumerate(tok):
        if not 0 <= t < vocab:
            raise ValueError(f"node {i}: token id {t} out of range [0, {vocab})")
    has_children = torch.zeros(n, dtype=torch.bool)
    if n > 1:
        has_children[parents[1:].long()] = True
    _check_rows("target_probs", p, torch.ones(n, dtype=torch.bool))
    _check_rows("draft_probs", q, has_children)
    _check_rows("leaf draft_probs", q, ~has_children, allow_all_zero=True)
    if n > 1:
        drafted_q = q[parents[1:].long(), tokens[1:].long()]
        if tree.sampling in _MODES_NEEDING_POSITIVE_DRAFT_PROB and bool((drafted_q <= 0).any()):
            i = 1 + int(torch.nonzero(drafted_q <= 0)[0])
            raise ValueError(
                f"node {i}: drafted token {tok[i]} has draft probability 0 under its parent's row, "
                f"impossible for sampling={tree.sampling!r}")
    if tree.sampling in ("without_replacement", "topk", "race"):
        seen: dict[tuple[int, int], int] = {}
        for i in range(1, n):
            key = (par[i], tok[i])
            if key in seen:
                kids = [tok[c] for c in range(1, n) if par[c] == par[i]]
                raise ValueError(f"node {par[i]}: duplicate sibling tokens {kids} under sampling={tree.sampling!r}")
            seen[key] = i
    if tree.sampling == "race":
        if tree.race is None:
            raise ValueError("sampling='race' needs the race arrival times (race=[N+1, V])")
        if tuple(tree.race.shape) != (n, vocab):
            raise ValueError(f"race must have shape [{n}, {vocab}], got {tuple(tree.race.shape)}")
        if not bool((tree.race > 0).all()):
            raise ValueError("race arrival times must be positive (Exp(1) draws)")
    elif tree.race is not None:
        raise ValueError(f"race times given but sampling={tree.sampling!r}; only 'race' trees carry them")


def _check_rows(name: str, rows: torch.Tensor, selected: torch.Tensor, allow_all_zero: bool = False) -> None:
    """Rows selected by the boolean mask must be finite, non-negative and sum to 1 (or be all zeros
    where ``allow_all_zero``: a leaf's draft row that was never computed)."""
    sub = rows if bool(selected.all()) else rows[selected]
    if sub.shape[0] == 0:
        return
    index = torch.nonzero(selected).flatten()
    # Two vectorised passes: a NaN/inf entry makes its row sum non-finite; the row minimum finds
    # negative entries. Sums are taken in float64 whatever the rows' dtype (a bfloat16 / float16 sum is
    # rounded to 8 / 11 bits, and a float16 sum can overflow). Summation error is ~1e-6 for 49k float32
    # entries, but a float32 softmax over 49k peaked logits can itself miss 1 by ~1e-5: build rows in
    # float64 (as `sampling.process_logits` does) when they must pass this check. Rows stored in a
    # dtype coarser than float32 may miss 1 by their own rounding (at most eps/2 of the sum when each
    # entry is rounded once), so their tolerance is that dtype's eps.
    sums = sub.to(torch.float64).sum(dim=1)
    tolerance = max(ROW_SUM_TOLERANCE, torch.finfo(rows.dtype).eps) if rows.is_floating_point() \
        else ROW_SUM_TOLERANCE
    problems = (
        (~torch.isfinite(sums), "has non-finite entries"),
        (sub.amin(dim=1) < 0, "has negative entries"),
    )
    for bad, what in problems:
        if bool(bad.any()):
            raise ValueError(f"node {int(index[int(torch.nonzero(bad)[0])])}: {name} row {what}")
    bad = (sums - 1).abs() > tolerance
    if allow_all_zero:
        bad &= sums != 0
    if bool(bad.any()):
        k = int(torch.nonzero(bad)[0])
        expected = "1 or all zeros" if allow_all_zero else "1"
        raise ValueError(f"node {int(index[k])}: {name} row sums to {float(sums[k])}, not {expected} "
                         f"(within {tolerance:g})")


# ----- shape builders (parent lists, root included) -------------------------------------------

MAX_SHAPE_NODES = 2 ** 20
"""The most nodes a shape builder (`chain_parents`, `batch`, `kary`, ... and so `parse_shape`) builds;
larger trees are refused from their size, computed from the arguments before anything is allocated
(decoding and the exact harness set tighter limits of their own)."""


_UNCOUNTED = 2 ** 64   # the size reported for a tree too large to be worth counting (at least this many nodes)


def check_shape_nodes(what: str, size: int) -> int:
    """``size`` (the nodes of the tree ``what`` describes), or a ValueError naming `MAX_SHAPE_NODES`."""
    if size > MAX_SHAPE_NODES:
        count = "at least 2^64" if size >= _UNCOUNTED else str(size)
        raise ValueError(f"{what} has {count} nodes, more than the limit MAX_SHAPE_NODES = {MAX_SHAPE_NODES}")
    return size


def chain_parents(length: int) -> list[int]:
    """A chain of ``length`` drafted tokens: size length+1, depth length+1."""
    length = check_int("chain length", length)
    if length < 0:
        raise ValueError(f"chain length must be >= 0, got {length}")
    check_shape_nodes(f"a chain of {length} tokens", length + 1)
    return list(range(-1, length))


# ----- more shape builders (level order: node ids grow with depth, siblings contiguous) -----------
#
# All builders below return parent lists in *level order* (every node of depth d comes before every
# node of depth d+1; the children of a node are consecutive and in sampling order), which is what
# `drafting.draw_tree` needs to draft one level per draft call. "depth" arguments count the root
# level (Sequoia's convention, docs/ARCHITECTURE.md); "length" arguments count drafted tokens per sequence.

def _require_int(name: str, value, minimum: int) -> int:
    out = check_int(name, value)  # a float (2.0 included) or a bool is no size
    if out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return out


def batch(k: int, length: int) -> list[int]:
    """k independent sequences of ``length`` drafted tokens each, sharing only the root
    (Sequoia's "k x L" / SpecInfer's k sequences; ERSS's batch(k) is ``batch(k, 1)``).
    Size k*length + 1, depth length + 1. Level order: node (d-1)*k + j is token d of sequence j."""
    k = _require_int("k", k, 1)
    length = _require_int("length", length, 0)
    check_shape_nodes(f"batch({k}, {length})", k * length + 1)
    parents = [-1]
    for d in range(1, length + 1):
        for j in range(1, k + 1):
            parents.append(0 if d == 1 else (d - 2) * k + j)
    return parents


def specinfer(k: int, length: int) -> list[int]:
    """SpecInfer's k x L tree as used by Sequoia's baselines (5x8, 8x8, 16x48): k independent
    sequences of L drafted tokens, i.e. the same shape as `batch`."""
    return batch(k, length)


def kary(k: int, depth: int) -> list[int]:
    """The full k-ary tree with ``depth`` levels counting the root: (k^depth - 1)/(k - 1) nodes."""
    k = _require_int("k", k, 1)
    depth = _require_int("depth", depth, 1)
    check_shape_nodes(f"kary({k}, {depth})", _kary_size(k, depth))
    parents, frontier = [-1], [0]
    for _ in range(depth - 1):
        nxt = []
        for u in frontier:
            for _ in range(k):
                parents.append(u)
                nxt.append(len(parents) - 1)
        frontier = nxt
    return parents


def _kary_size(k: int, depth: int) -> int:
    """Nodes of the full k-ary tree of ``depth`` levels (k, depth >= 1), without building it; past 64 levels of
    k >= 2 (beyond any limit) `_UNCOUNTED`, so that an absurd depth costs nothing to count."""
    if k == 1:
        return depth
    return _UNCOUNTED if depth > 64 else (k ** depth - 1) // (k - 1)


def binary(depth: int) -> list[int]:
    """The full binary tree with ``depth`` levels counting the root (2^depth - 1 nodes). Traversal
    Verification's "binary tree of depth d" (d draft layers, 2^(d+1) - 1 nodes) is ``binary(d + 1)``."""
    return kary(2, depth)


def erss_specinfer(k: int) -> list[int]:
    """ERSS's "SpecInfer tree" with k drafted tokens (docs/methods/erss.md §2.4): a shared chain of two
    tokens, then three branches below it grown round-robin; it equals a chain for k <= 3."""
    k = _require_int("k", k, 0)
    check_shape_nodes(f"erss_specinfer({k})", k + 1)
    parents = [-1, 0, 1][: k + 1]
    for i in range(max(0, k - 2)):
        parents.append(2 if i < 3 else i)  # extra i continues the branch of extra i-3 (node id i)
    return parents


# EAGLE-1's sparse tree (Spec-Bench `mc_sim_7b_63`, 25 drafted tokens, depth 5 below the root), as
# listed in docs/methods/traversal.md §2.7: entry [a, b, ...] is the b-th child of the a-th root child ...
_EAGLE_CHOICES = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)


def eagle_sparse() -> list[int]:
    """EAGLE's sparse tree used by Traversal Verification's experiments (26 nodes, depth 6)."""
    ids = {(): 0}
    parents = [-1]
    for choice in _EAGLE_CHOICES:
        ids[choice] = len(parents)
        parents.append(ids[choice[:-1]])
    return parents


def validate_parents(parents) -> list[int]:
    """A parent list as ints, checked: parents[0] == -1 and 0 <= parents[i] < i. Entries must be
    integers (a float such as 0.7 is no node index and is refused, never truncated)."""
    if isinstance(parents, (str, bytes)) or not hasattr(parents, "__len__"):
        raise ArgumentTypeError(f"parents must be a sequence of integer node indices, got {parents!r:.60}")
    if isinstance(parents, torch.Tensor):
        _check_integer("parents", parents)
        parents = parents.reshape(-1).tolist()
    out = [p if type(p) is int else check_int(f"parents[{i}]", p) for i, p in enumerate(parents)]
    if not out or out[0] != -1:
        raise ValueError("a parent list must start with -1 (the root)")
    for i, p in enumerate(out[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"node {i}: parent {p} must satisfy 0 <= parent < {i}")
    return out


def parent_children(parents) -> list[list[int]]:
    """children[i] = the children of node i in sampling order (ascending index), for a parent list."""
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        kids[p].append(i)
    return kids


def parent_depths(parents) -> list[int]:
    """depths[i] = drafted tokens on the path root..i (root 0) for a parent list."""
    d = [0] * len(parents)
    for i in range(1, len(parents)):
        d[i] = d[parents[i]] + 1
    return d


def is_level_order(parents) -> bool:
    """True if node depths never decrease with the node index (one draft call per level works)."""
    d = parent_depths(validate_parents(parents))
    return all(a <= b for a, b in zip(d, d[1:]))


def level_order(parents) -> list[int]:
    """The same tree relabelled in level order (breadth first, siblings kept in sampling order)."""
    parents = validate_parents(parents)
    kids = parent_children(parents)
    order, new_id, out = [0], {0: 0}, [-1]
    for u in order:
        for c in kids[u]:
            new_id[c] = len(out)
            out.append(new_id[u])
            order.append(c)
    return out


SHAPE_FORMS = ("chain:L", "batch:KxL", "specinfer:KxL", "kary:KxD", "binary:D", "erss_specinfer:K",
               "eagle", "parents:-1,0,0,1")
_SHAPE_ARITY = {"chain": 1, "batch": 2, "specinfer": 2, "kary": 2, "binary": 1, "erss_specinfer": 1}


def _parse_spec(spec: str) -> tuple[str, list[int] | None]:
    """``(kind, integer arguments)`` of a shape spec (``None`` for ``eagle`` and ``parents:``)."""
    if not isinstance(spec, str):
        raise ArgumentTypeError(f"a shape spec must be a string like 'chain:8'; got {spec!r:.60}")
    kind, _, arg = spec.strip().lower().partition(":")
    if kind in _SHAPE_ARITY:
        parts = arg.split("x")
        expected = _SHAPE_ARITY[kind]
        if len(parts) != expected or not all(p.strip().lstrip("-").isdigit() for p in parts):
            form = {1: "N", 2: "KxN"}[expected]
            raise ValueError(f"shape {spec!r}: expected '{kind}:{form}' with integers")
        return kind, [int(p) for p in parts]
    if (kind == "eagle" and not arg) or kind == "parents":
        return kind, None
    raise ValueError(f"unknown shape {spec!r}; known forms: {', '.join(SHAPE_FORMS)}")


def shape_size(spec: str) -> int:
    """Number of nodes (root included) of the shape spec ``spec``, computed from its arguments without
    building it (``binary:40`` is 2^40 - 1 nodes, counted at once). ValueError for a spec whose form
    `parse_shape` refuses; arguments below their minimum count as the smallest tree."""
    kind, args = _parse_spec(spec)
    if kind == "eagle":
        return len(_EAGLE_CHOICES) + 1
    if kind == "parents":
        return spec.count(",") + 1
    if kind in ("chain", "erss_specinfer"):
        return max(args[0], 0) + 1
    if kind in ("batch", "specinfer"):
        return max(args[0], 1) * max(args[1], 0) + 1
    k, depth = (2, args[0]) if kind == "binary" else args
    return _kary_size(max(k, 1), max(depth, 1))


def parse_shape(spec: str) -> list[int]:
    """Parent list of a shape spec.

    ``chain:L`` (L drafted tokens), ``batch:KxL`` and ``specinfer:KxL`` (K independent sequences of L
    tokens), ``kary:KxD`` and ``binary:D`` (full trees with D levels counting the root),
    ``erss_specinfer:K`` (ERSS's SpecInfer tree with K drafted tokens), ``eagle`` (EAGLE's sparse
    tree) and ``parents:-1,0,0,1`` (an explicit parent list). Unknown specs raise ValueError, and so
    do specs of more than `MAX_SHAPE_NODES` nodes (refused from `shape_size`, before any list is built).
    """
    kind, args = _parse_spec(spec)
    check_shape_nodes(f"shape {spec!r}", shape_size(spec))
    try:
        if kind == "chain":
            return chain_parents(args[0])
        if kind in ("batch", "specinfer"):
            return batch(*args)
        if kind == "kary":
            return kary(*args)
        if kind == "binary":
            return binary(args[0])
        if kind == "erss_specinfer":
            return erss_specinfer(args[0])
        if kind == "eagle":
            return eagle_sparse()
        try:
            values = [int(v) for v in spec.strip().partition(":")[2].split(",")]
        except ValueError:
            raise ValueError("parents must be comma-separated integers") from None
        return validate_parents(values)
    except ValueError as err:
        raise ValueError(f"shape {spec!r}: {err}") from None


# ----------------------------------------------------------------------------------------- subtrees

def restrict_depth(tree: DraftTree, depth: int) -> DraftTree:
    """The subtree of the nodes at most ``depth - 1`` edges below the root (``depth`` counts the root,
    Sequoia's convention): a tree of that depth drawn exactly as the original's first levels were."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1 (it counts the root), got {depth}")
    keep = [i for i, d in enumerate(tree.depths) if d < depth]
    return subtree(tree, keep)


def truncate_chain(tree: DraftTree, n: int) -> DraftTree:
    """The first ``n`` drafted tokens of a chain (a chain of ``n`` drafted tokens)."""
    if not tree.is_chain:
        raise ValueError("truncate_chain needs a chain")
    if not 0 <= n <= tree.num_nodes - 1:
        raise ValueError(f"cannot truncate a chain of {tree.num_nodes - 1} drafted tokens to {n}")
    return restrict_depth(tree, n + 1)


def index_tuples(parents: Sequence[int]) -> list[tuple[int, ...]]:
    """Each node's index path: the 1-based ranks among its siblings from the root down (root: ``()``)."""
    parents = [int(p) for p in parents]
    seen: dict[int, int] = {}
    out: list[tuple[int, ...]] = [()]
    for i in range(1, len(parents)):
        seen[parents[i]] = seen.get(parents[i], 0) + 1
        out.append(out[parents[i]] + (seen[parents[i]],))
    return out


def _index_paths(shape: str | Sequence[int]) -> set[tuple[int, ...]]:
    """The index paths of a shape given as a spec string or a parents list."""
    return set(index_tuples(parse_shape(shape) if isinstance(shape, str) else list(shape)))


def contains_shape(big: str | Sequence[int], small: str | Sequence[int]) -> bool:
    """Whether every index path of the shape ``small`` is one of ``big``'s, so `restrict_to_shape` cuts a tree
    of shape ``small`` out of every tree of shape ``big`` (e.g. ``chain:12`` inside ``erss_specinfer:32``)."""
    return _index_paths(small) <= _index_paths(big)


def union_shape(*shapes: str | Sequence[int]) -> list[int]:
    """The parents list of the smallest shape containing every one of ``shapes``: the union of their index
    paths, level by level, siblings in rank order. A tree drafted in it holds a tree of each shape
    (`restrict_to_shape`), all drawn with the same random numbers where they overlap."""
    if not shapes:
        raise ValueError("union_shape needs at least one shape")
    paths = sorted(set().union(*map(_index_paths, shapes)), key=lambda path: (len(path), path))
    ids = {path: i for i, path in enumerate(paths)}
    return [-1] + [ids[path[:-1]] for path in paths[1:]]


def restrict_to_shape(tree: DraftTree, shape: str | Sequence[int]) -> DraftTree:
    """The nodes of ``tree`` whose index paths (`index_tuples`) form the smaller ``shape``.

    Children are drawn one after another (iid, without replacement, races: the first c of C children are
    drawn exactly as c children), so when the shape's index paths are a subset of the tree's, the restricted
    tree is distributed as a tree of that shape drawn at the same context. Examples: a chain inside a longer
    chain, batch(k) inside batch(K), tau*_k inside tau*_K, a SpecInfer tree inside a longer one.
    """
    want = _index_paths(shape)
    have = index_tuples(tree.parent_list)
    keep = [i for i, t in enumerate(have) if t in want]
    if len(keep) != len(want):
        raise ValueError(f"shape with {len(want)} nodes is not contained in the drafted tree "
                         f"({len(keep)} matching nodes)")
    return subtree(tree, keep)


def subtree(tree: DraftTree, keep: Sequence[int]) -> DraftTree:
    """The nodes ``keep`` of ``tree`` (root first, each node after its parent) as a tree of their own."""
    index = {old: new for new, old in enumerate(keep)}
    parents = [-1 if old == 0 else index[int(tree.parents[old])] for old in keep]
    idx = torch.as_tensor(list(keep), dtype=torch.long)
    race = tree.race.index_select(0, idx) if tree.race is not None else None
    return DraftTree(tree.tokens.index_select(0, idx), torch.as_tensor(parents, dtype=torch.long),
                     tree.draft_probs.index_select(0, idx), tree.target_probs.index_select(0, idx),
                     sampling=tree.sampling, race=race)
