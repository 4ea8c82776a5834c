"""``match``: draw from the target at each node and follow a matching child (docs/methods/sequoia.md §2.9).

Starting at the root: draw ``y ~ P(.|node)``; if a child of the node has token ``y`` (the first such
child when an iid tree has duplicates), accept it and continue from it; otherwise emit ``y`` as the
extra token and stop. Every emitted token is a fresh draw from the target given the tokens before
it, so this is lossless on any tree, whatever drew it. With the draft's top-k as children it is
Sequoia's top-k sampling baseline (acceptance = sum of the target mass on the children); with i.i.d.
children it is the "naive sampling" baseline.

Exact law given the tree: reach(child) = reach(node) * P(x_child | node) for the first child of each
token, and law[node, v] = reach(node) * P(v | node) for tokens v that match no child.
"""

from __future__ import annotations

from typing import Any

import torch

from ..tree import SAMPLING_MODES, DraftTree
from .base import SHAPE_KINDS, Outcome, Verifier, accepted_pairs, sample_categorical, sequential_law
from .token_level import target_row

NAME = "match"


def _first_child_by_token(tree: DraftTree, node: int, tokens: list[int]) -> dict[int, int]:
    first: dict[int, int] = {}
    for c in tree.children[node]:
        first.setdefault(tokens[c], c)
    return first


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    tokens = tree.tokens.tolist()
    node, path = 0, []
    while True:
        y = sample_categorical(target_row(tree, node), generator)
        nxt = _first_child_by_token(tree, node, tokens).get(y)
        if nxt is None:
            return Outcome(tuple(path), y)
        path.append(nxt)
        node = nxt


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    tokens = tree.tokens.tolist()

    def trials(node: int):
        # child c (first of its token x) is followed with probability p(x) = P(no earlier child's token)
        # * p(x) / P(no earlier child's token): the sequential form `sequential_law` takes
        p = target_row(tree, node).clone()
        left = 1.0
        for x, c in _first_child_by_token(tree, node, tokens).items():
            yield c, float(p[x]) / left if left > 0.0 else 0.0
            left -= float(p[x])
            p[x] = 0.0
        return p / left if left > 0.0 else p

    return sequential_law(tree, trials)


def check(tree: DraftTree) -> None:
    """Any tree: the verifier never looks at how the children were drawn."""


VERIFIER = Verifier(
    name=NAME,
    sample=sample,
    law=law,
    check=check,
    accepts=accepted_pairs(SHAPE_KINDS, SAMPLING_MODES),
    lossless=True,
    description="draw from the target at each node and follow a matching child (lossless on any tree; "
                "Sequoia's top-k baseline on top-k trees)",
)
