"""Drawing a draft tree from a draft model, one level per draft call.

`draw_tree(shape_parents, root_token, draft_fn, sampling, generator)` grows the tree of a fixed shape (a
parent list in level order, see `tree.level_order`) level by level: at level d it calls ``draft_fn`` once
for all internal nodes of depth d (one tree-attention forward of a real model) and draws each node's
children from its draft row (`draw_children`) by ``sampling``:

* ``iid``: i.i.d. draws with replacement (SpecInfer, naive sampling); duplicate siblings may occur.
* ``without_replacement``: an ordered sample without replacement (Sequoia, GSS), one uniform per child,
  uniform over the undrawn tokens once the draft's support is used up (Sequoia's fallback).
* ``topk``: the k most probable draft tokens, ties to the lower token id (deterministic).
* ``race``: ERSS's exponential race (Gumbel-top-k), the arrival times stored in ``DraftTree.race``.

`draw_forest(arms, root_token, draft_fn)` drafts several trees at one root in lockstep (one ``draft_fn`` call
per level for all, each tree exactly its `draw_tree` draws); `forest_draws` yields the same draft requests
for a caller that serves several forests with one forward.
Every random number comes from ``generator`` (None is a ValueError). Leaf draft rows stay zero ("not computed").

The modes in full and the proposals the verifiers test them against: docs/ARCHITECTURE.md, "Drafting and
sampling modes".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generator, Sequence

import torch

from .arguments import ArgumentTypeError, check_int
from .tree import SAMPLING_MODES, DraftTree, parent_children, parent_depths, validate_parents
from .verifiers.base import check_generator

DraftFn = Callable[[torch.Tensor, list[int], list[int]], torch.Tensor]
"""``draft_fn(tokens, parents, nodes) -> [len(nodes), V]``: ``tokens`` (LongTensor [n]) and
``parents`` (list, root included) describe the tree drawn so far; ``nodes`` are node indices, all at
the same depth; row r is the draft distribution after the path root..nodes[r]."""

TargetFn = Callable[[torch.Tensor, list[int]], torch.Tensor]
"""``target_fn(tokens, parents) -> [N+1, V]``: the target distribution after every node's path."""

ROW_TOLERANCE = 1e-5


@dataclass(frozen=True)
class DraftPieces:
    """A drafted tree before the target has scored it."""

    tokens: torch.Tensor
    parents: torch.Tensor
    draft_probs: torch.Tensor
    sampling: str
    race: torch.Tensor | None = None

    def with_target(self, target_probs: torch.Tensor) -> DraftTree:
        """The complete tree, given the target's rows ``[N+1, V]`` after every node's path."""
        return DraftTree(self.tokens, self.parents, self.draft_probs, target_probs, self.sampling, self.race)

    def scored_by(self, target_fn: TargetFn) -> DraftTree:
        """The complete tree, scored by ``target_fn(tokens, parents)`` (one target call for the whole tree)."""
        return self.with_target(target_fn(self.tokens.clone(), self.parents.tolist()))


def _check_rows(rows: torch.Tensor, nodes: list[int], vocab: int | None) -> None:
    if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[0] != len(nodes):
        shape = tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
        raise ValueError(f"draft_fn must return a [{len(nodes)}, V] tensor for nodes {nodes}, got {shape}")
    if vocab is not None and rows.shape[1] != vocab:
        raise ValueError(f"draft_fn returned vocabulary {rows.shape[1]}, earlier levels had {vocab}")
    sums = rows.sum(dim=1)  # a non-finite entry makes its row's sum non-finite
    if not bool(torch.isfinite(sums).all()) or bool((rows.amin(dim=1) < 0).any()):
        raise ValueError(f"draft_fn returned rows with negative or non-finite entries for nodes {nodes}")
    bad = (sums - 1.0).abs() > ROW_TOLERANCE
    if bool(bad.any()):
        r = int(bad.nonzero()[0])
        raise ValueError(f"draft distribution of node {nodes[r]} sums to {float(sums[r])}, not 1 "
                         f"(zero draft support cannot propose children)")


_EXHAUSTED = 1e-12  # remaining draft mass below this fraction of the row: recount the support


def _uniforms(count: int, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(count, generator=generator, dtype=torch.float64)


def _search(cdf: torch.Tensor, value: float) -> int:
    """Smallest index i with cdf[i] > value (cdf non-decreasing; zero-probability tokens are flat)."""
    i = int(torch.searchsorted(cdf, torch.tensor([value], dtype=cdf.dtype), right=True)[0])
    return min(i, cdf.shape[0] - 1)


def _last_positive(q: torch.Tensor) -> int:
    return int((q > 0).nonzero()[-1])


def _iid(q: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """k independent draws from q (inverse CDF: one uniform per child)."""
    cdf = torch.cumsum(q.to(torch.float64), 0)
    idx = torch.searchsorted(cdf, _uniforms(k, generator) * cdf[-1], right=True)
    if bool((idx >= q.shape[0]).any()):  # u * total rounded up to total (probability ~1e-16)
        idx = idx.clamp(max=_last_positive(q))
    return idx


def _without_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """k successive draws from q restricted to the tokens not drawn yet (inverse CDF on the
    cumulative sums with the drawn tokens' mass skipped: one uniform per child); once the draft
    support is used up, the rest are uniform without replacement over the remaining tokens."""
    q64 = q.to(torch.float64)
    cdf = torch.cumsum(q64, 0)
    total = float(cdf[-1])
    chosen: list[int] = []
    mass: dict[int, float] = {}
    remaining = total
    while len(chosen) < k:
        if remaining <= _EXHAUSTED * total:
            support = int((q64 > 0).sum())
            if len(chosen) >= support:  # support used up: uniform over the tokens never drawn
                unused = (q64 <= 0).nonzero().flatten()
                pick = torch.randperm(unused.shape[0], generator=generator)[: k - len(chosen)]
                return torch.cat([torch.tensor(chosen, dtype=torch.long), unused[pick]])
            remaining = total - sum(mass.values())
        u = float(_uniforms(1, generator)[0]) * remaining
        # smallest i with cdf[i] - (mass drawn at indices <= i) > u, by fixed-point iteration
        i = _search(cdf, u)
        while True:
            shift = sum(m for t, m in mass.items() if t <= i)
            j = _search(cdf, u + shift)
            if j == i:
                break
            i = j
        if i in mass or float(q64[i]) <= 0.0:  # rounding at a boundary (probability ~1e-16): redraw
            continue
        chosen.append(i)
        mass[i] = float(q64[i])
        remaining -= mass[i]
    return torch.tensor(chosen, dtype=torch.long)


def _topk(q: torch.Tensor, k: int) -> torch.Tensor:
    """The k most probable tokens, by decreasing probability, ties to the lower token id."""
    values = torch.topk(q, k).values
    threshold = float(values[-1])
    above = (q > threshold).nonzero().flatten().tolist()
    ties = (q == threshold).nonzero().flatten().tolist()[: k - len(above)]
    qs = q.tolist() if q.shape[0] <= 64 else {t: float(q[t]) for t in above + ties}
    return torch.tensor(sorted(above + ties, key=lambda t: (-qs[t], t)), dtype=torch.long)


def _first_arrivals(race: torch.Tensor, q: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` smallest arrival times race / q (tokens with q == 0 arrive at +inf)."""
    return torch.topk(race / q, count, largest=False, sorted=True).indices


def draw_children(q: torch.Tensor, k: int, sampling: str, generator: torch.Generator,
                  node: int = 0, race_out: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draw ``k`` ordered children from the draft row ``q`` (module docstring); returns the tokens
    (LongTensor [k]) and, for ``race``, the node's arrival times (float64 [V], written into
    ``race_out`` when given)."""
    _check_sampling(sampling)
    k = check_int("k", k, 0)
    check_generator(generator)
    vocab = q.shape[0]
    if sampling == "iid":
        return _iid(q, k, generator), None
    if k > vocab:
        raise ValueError(f"node {node}: {k} distinct children cannot be drawn from {vocab} tokens "
                         f"(sampling={sampling!r})")
    if sampling == "topk":
        return _topk(q, k), None
    if sampling == "without_replacement":
        return _without_replacement(q, k, generator), None
    support = int((q > 0).sum())
    if k > support:
        raise ValueError(f"node {node}: a race cannot draft {k} children from a draft with "
                         f"{support} tokens of positive probability (q = 0 never arrives)")
    race = race_out if race_out is not None else torch.empty(vocab, dtype=torch.float64)
    race.uniform_(generator=generator).log_().neg_()  # Exp(1) = -log U (3x faster than exponential_)
    return _first_arrivals(race, q, k), race


def draw_tree(shape_parents: Sequence[int], root_token: int, draft_fn: DraftFn, sampling: str,
              generator: torch.Generator) -> DraftPieces:
    """Draft a tree of the given shape (module docstring): the `DraftPieces` (tokens, parents, draft
    rows, race). Drafting never calls the target; score the pieces afterwards with
    ``pieces.scored_by(target_fn)`` or ``pieces.with_target(target_probs)``.
    """
    return draw_forest([(shape_parents, sampling, generator)], root_token, draft_fn).pieces[0]


@dataclass(frozen=True)
class Forest:
    """Trees drafted in lockstep at one root (`draw_forest`): each tree's `DraftPieces` and the merged
    tree they form (``tokens`` / ``parents``: root 0 shared, then every tree's nodes by depth, tree, index;
    ``index[a][i]``: the merged node of tree a's node i)."""

    pieces: list[DraftPieces]
    tokens: torch.Tensor
    parents: list[int]
    index: list[list[int]]

    def scored_by(self, target_fn: TargetFn) -> list[DraftTree]:
        """Every tree, complete: one ``target_fn`` call on the merged tree."""
        return self.with_target(target_fn(self.tokens.clone(), list(self.parents)))

    def with_target(self, target_probs: torch.Tensor) -> list[DraftTree]:
        """Every tree, complete, given the target rows ``[len(tokens), V]`` of the merged tree."""
        return [p.with_target(target_probs[idx]) for p, idx in zip(self.pieces, self.index)]


def _check_sampling(sampling) -> None:
    if not isinstance(sampling, str):
        raise ArgumentTypeError(f"sampling must be a mode name, got {sampling!r:.60}; one of {SAMPLING_MODES}")
    if sampling not in SAMPLING_MODES:
        raise ValueError(f"unknown sampling mode {sampling!r}; expected one of {SAMPLING_MODES}")


def _checked_shape(shape_parents: Sequence[int], sampling: str, generator: torch.Generator) -> list[int]:
    _check_sampling(sampling)
    check_generator(generator)
    parents = validate_parents(shape_parents)
    depths = parent_depths(parents)
    if any(a > b for a, b in zip(depths, depths[1:])):
        raise ValueError("draw_tree needs a shape in level order (node depths non-decreasing with the "
                         "index); relabel it with specdec_lib.tree.level_order(parents)")
    return parents


def draw_forest(arms: Sequence[tuple[Sequence[int], str, torch.Generator]], root_token: int,
                draft_fn: DraftFn) -> Forest:
    """Several trees at the same root, drafted in lockstep: ``arms`` = (shape parents in level order,
    sampling, generator) per tree. One ``draft_fn`` call per level serves the nodes of every tree (the
    merged tree of `Forest`), so a real model runs max(depth) forwards instead of the sum.

    Each tree draws its children with its own sampling scheme and generator, node by node in the order
    `draw_tree` uses, and a row depends only on its node's path: every tree has exactly its `draw_tree`
    law, and the same draws as `draw_tree` with the same generator (the root's row is shared)."""
    steps = forest_draws(arms, root_token)
    request = next(steps)
    while True:
        try:
            request = steps.send(draft_fn(*request))
        except StopIteration as done:
            return done.value


def forest_draws(arms: Sequence[tuple[Sequence[int], str, torch.Generator]], root_token: int
                 ) -> Generator[tuple[torch.Tensor, list[int], list[int]], torch.Tensor, Forest]:
    """`draw_forest` as a generator, for a caller that serves the draft requests of several forests
    with one forward (`experiments.shared_contexts` drafts many contexts of one text together): it
    yields each request ``(tokens, parents, nodes)`` of ``draft_fn``, takes the rows with ``send`` and
    returns the `Forest` (``StopIteration.value``). The draws are `draw_forest`'s."""
    if not arms:
        raise ValueError("arms must hold at least one (shape parents, sampling, generator)")
    root_token = check_int("root_token", root_token, 0)
    shapes = [_checked_shape(*arm) for arm in arms]
    depths = [parent_depths(parents) for parents in shapes]
    children = [parent_children(parents) for parents in shapes]
    order = sorted((d[i], a, i) for a, d in enumerate(depths) for i in range(1, len(d)))
    index = [[0] * len(parents) for parents in shapes]
    for pos, (_, a, i) in enumerate(order, start=1):
        index[a][i] = pos
    merged_parents = [-1] + [index[a][shapes[a][i]] for _, a, i in order]
    merged_depths = [0] + [d for d, _, _ in order]
    tokens = torch.zeros(len(merged_parents), dtype=torch.long)
    tokens[0] = int(root_token)
    arm_tokens = [torch.zeros(len(parents), dtype=torch.long) for parents in shapes]
    for t in arm_tokens:
        t[0] = int(root_token)
    draft_probs: list[torch.Tensor | None] = [None] * len(shapes)
    race: list[torch.Tensor | None] = [None] * len(shapes)
    root_row = None
    for level in range(max(merged_depths)):
        wanted = [(a, i) for a in range(len(shapes)) for i in range(len(shapes[a]))
                  if depths[a][i] == level and children[a][i]]
        nodes = sorted({index[a][i] for a, i in wanted})
        known = sum(1 for d in merged_depths if d <= level)  # level order: nodes 0..known-1 are drawn
        rows = yield tokens[:known].clone(), merged_parents[:known], nodes
        _check_rows(rows, nodes, root_row.shape[0] if root_row is not None else None)
        row_of = dict(zip(nodes, rows))
        if level == 0:
            root_row = rows[0]
        for a, i in wanted:  # per tree, in draw_tree's node order
            row, kids = row_of[index[a][i]], children[a][i]
            if draft_probs[a] is None:
                draft_probs[a] = torch.zeros(len(shapes[a]), rows.shape[1], dtype=rows.dtype)
                if arms[a][1] == "race":  # leaf rows stay 1.0: ERSS draws a fresh race at a leaf
                    race[a] = torch.ones(len(shapes[a]), rows.shape[1], dtype=torch.float64)
            toks, _ = draw_children(row, len(kids), arms[a][1], arms[a][2], i,
                                    race_out=race[a][i] if race[a] is not None else None)
            arm_tokens[a][kids] = toks
            tokens[[index[a][k] for k in kids]] = toks
            draft_probs[a][i] = row
    for a in range(len(shapes)):
        if draft_probs[a] is None:  # a root-only tree: its row only tells the vocabulary
            if root_row is None:
                root_row = yield tokens[:1].clone(), [-1], [0]
                _check_rows(root_row, [0], None)
                root_row = root_row[0]
            draft_probs[a] = root_row.unsqueeze(0).clone()
            if arms[a][1] == "race":
                race[a] = torch.ones(1, root_row.shape[0], dtype=torch.float64)
    pieces = [DraftPieces(arm_tokens[a], torch.tensor(shapes[a], dtype=torch.long), draft_probs[a], arms[a][1], race[a])
              for a in range(len(shapes))]
    return Forest(pieces, tokens, merged_parents, index)


def paths(tokens: torch.Tensor, parents: Sequence[int], prefix: Sequence[int] = ()) -> list[tuple[int, ...]]:
    """The context of every node: ``prefix`` followed by the drafted tokens root..node (the root's
    token is the last prefix token and is not repeated)."""
    toks = tokens.tolist()
    out: list[tuple[int, ...]] = []
    for i, p in enumerate(parents):
        out.append(tuple(prefix) if p < 0 else out[p] + (toks[i],))
    return out


def context_draft_fn(probs: Callable[[tuple[int, ...]], torch.Tensor], prefix: Sequence[int]) -> DraftFn:
    """A `DraftFn` from a context -> distribution function (e.g. a toy LM's ``probs``); ``prefix``
    ends with the root token."""
    prefix = tuple(int(t) for t in prefix)

    def draft_fn(tokens: torch.Tensor, parents: list[int], nodes: list[int]) -> torch.Tensor:
        ctx = paths(tokens, parents, prefix)
        return torch.stack([probs(ctx[i]) for i in nodes])

    return draft_fn


def context_target_fn(probs: Callable[[tuple[int, ...]], torch.Tensor], prefix: Sequence[int]) -> TargetFn:
    """A `TargetFn` from a context -> distribution function; ``prefix`` ends with the root token."""
    prefix = tuple(int(t) for t in prefix)

    def target_fn(tokens: torch.Tensor, parents: list[int]) -> torch.Tensor:
        return torch.stack([probs(c) for c in paths(tokens, parents, prefix)])

    return target_fn
