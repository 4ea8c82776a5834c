"""``erss``: exponential-race verification (Kobus & Gündüz, ERSS, Algorithm 5 as corrected in
docs/methods/erss.md §2.6; Algorithm 2 is the one-draft case).

Drafting (`drafting.draw_tree(..., sampling="race")`) gives every internal node ``j`` a vector of
Exp(1) arrival times ``e_j`` (stored in ``tree.race[j]``) and takes its children to be the first
arrivals under the draft, ``argsort(e_j / q_j)[:c_j]``. Verification walks down from the root:

    x = argmin_i e_j[i] / P(i | c(j))      (winner of the SAME race under the target; e_j fresh at a leaf)
    emit x; if a child of j has token x, descend into it, otherwise stop.

Each emitted token is the target-winner of a race that is independent of everything emitted before,
so the output is exactly target-distributed; no residual distribution is ever formed. Corrections to
the printed Algorithm 5: the denominator is the target ``P`` of the *current* vertex (the printed
``Q`` would just copy the draft), the walk descends on a match, and a leaf uses a fresh race (here: a
draw from its target row, which has the same law).

Law given the tree (`law`): deterministic given the races except for the final leaf, whose fresh
race makes the extra token ~ the leaf's target row. The law is therefore a point mass
``law[j, x] = 1`` when the walk stops at an internal node ``j``, and ``law[leaf] = P(.|leaf)``
otherwise. Losslessness needs the average over races (Monte Carlo, tested with a chi-square test).
"""

from __future__ import annotations

from typing import Any

import torch

from ..tree import DraftTree
from .base import SHAPE_KINDS, Outcome, Verifier, accepted_pairs, sample_categorical
from .token_level import target_row

NAME = "erss"
# Arrival times are recomputed from the stored race; tolerate float rounding in the order check.
_ORDER_RTOL = 1e-9


def verification_row(tree: DraftTree, node: int) -> torch.Tensor:
    """The distribution whose race winner is emitted at ``node``: the target row (unnormalised is
    fine: the argmin of race / p does not depend on p's scale)."""
    return tree.target_probs[node]


def race_winner(race: torch.Tensor, probs: torch.Tensor) -> int:
    """argmin_i race[i] / probs[i] (race > 0, so tokens with probability 0 arrive at +inf)."""
    return int(torch.argmin(race / probs))


def _walk(tree: DraftTree):
    """Follow the races from the root; returns (path, last node, winner at it or None for a leaf)."""
    node, path = 0, []
    tokens = tree.tokens.tolist()
    while tree.children[node]:
        x = race_winner(tree.race[node], verification_row(tree, node))
        nxt = next((c for c in tree.children[node] if tokens[c] == x), None)
        if nxt is None:
            return tuple(path), node, x
        path.append(nxt)
        node = nxt
    return tuple(path), node, None


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    """One ERSS verification; ``generator`` only supplies the fresh race at a leaf."""
    path, node, x = _walk(tree)
    if x is None:
        x = sample_categorical(verification_row(tree, node), generator)
    return Outcome(path, x)


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    """Exact law [N+1, V] given the tree and its races (module docstring)."""
    out = torch.zeros(tree.num_nodes, tree.vocab_size, dtype=torch.float64)
    path, node, x = _walk(tree)
    if x is None:
        out[node] = target_row(tree, node)
    else:
        out[node, x] = 1.0
    return out


def check(tree: DraftTree) -> None:
    """ERSS needs a race-drafted tree whose children are the first arrivals of the stored races."""
    if tree.sampling != "race" or tree.race is None:
        raise ValueError(f"verifier 'erss' needs a tree drafted by exponential races (sampling='race' with "
                         f"the race times); got sampling={tree.sampling!r}")
    tokens = tree.tokens
    for node, kids in enumerate(tree.children):
        if not kids:
            continue
        arrival = tree.race[node] / tree.draft_probs[node]  # q == 0: never arrives (+inf)
        times = arrival[tokens[kids]]
        if not bool(torch.isfinite(times).all()):
            raise ValueError(f"verifier 'erss': a child of node {node} has draft probability 0, so it "
                             f"cannot have arrived in the draft race")
        if len(kids) > 1 and bool((times[1:] < times[:-1] * (1 - _ORDER_RTOL)).any()):
            raise ValueError(f"verifier 'erss': the children of node {node} are not in race arrival order")
        arrival[tokens[kids]] = float("inf")
        if float(arrival.min()) < float(times.max()) * (1 - _ORDER_RTOL):
            raise ValueError(f"verifier 'erss': the children of node {node} are not the first "
                             f"{len(kids)} arrivals of its race under the draft")


VERIFIER = Verifier(
    name=NAME,
    sample=sample,
    law=law,
    check=check,
    accepts=accepted_pairs(SHAPE_KINDS, ("race",)),
    lossless=True,
    description="exponential-race verification (ERSS, Kobus & Gündüz, Alg. 5 corrected): the target "
                "emits the winner of the drafting race and descends while it matches a child",
)
