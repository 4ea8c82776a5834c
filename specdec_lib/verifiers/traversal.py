"""``traversal``: Traversal Verification (Weng et al., NeurIPS 2025, Algorithm 3; docs/methods/traversal.md §2.4).

The tree is visited in post-order DFS with children in sampling order. Every node carries a sequence-level
rate ``rho``: ``rho(root) = 1`` and a child ``c`` (token ``x``) of ``u`` gets, from u's *current* state,
``rho(c) = min(1, rho(u) * Mb(x|u) / Ms(x|u))``. A node is tested only after all its children's subtrees
were rejected; it is accepted with probability ``rho``, and with it the whole root..node path, the extra
token drawn from the node's current target row. A rejected child subtree updates ``u``, all on its current
values (Eqs. 1-3):

    S        = sum_x [rho(u) Mb(x|u) - Ms(x|u)]_+
    Mb'(.|u) = [rho(u) Mb(.|u) - Ms(.|u)]_+ / S              (Eq. 1)
    Ms'(.|u) = Ms(.|u) with x removed, renormalised          (Eq. 2, without replacement only)
    rho'(u)  = S / (S + (1 - rho(u)))                        (Eq. 3, these parentheses: §2.8 #12)

``rho(root)`` stays exactly 1; ``S = 0`` below the root rejects ``u`` and its remaining subtree at once.
``Ms`` follows ``tree.sampling`` as for ``token`` (`token_level.Proposal`; docs/ARCHITECTURE.md, "Drafting and
sampling modes"), so traversal is lossless in all four modes; on a chain its law is Block Verification's (Thm 3.4).

Exact law given the tree (`law`): the same traversal with every coin replaced by its probability; each
node is visited once with a deterministic state, so it costs O(N V).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..tree import SAMPLING_MODES, DraftTree
from .base import SHAPE_KINDS, Outcome, Verifier, accepted_pairs, sample_categorical, uniform
from .token_level import Proposal, Row, check_consistent_draws, draw_prob, proposal_rule, residual_step

NAME = "traversal"


def sequence_rate(mass: float, rho: float) -> float:
    """Eq. (3): rho' = S / (S + (1 - rho)), with the parentheses that avoid cancellation."""
    denom = mass + (1.0 - rho)
    return mass / denom if denom > 0.0 else 0.0


@dataclass
class _Node:
    """The current (rho, Mb, Ms) of a node while its children are traversed."""

    node: int
    rho: float
    target: Row | None = None
    proposal: Proposal | None = None
    next_child: int = 0
    dead: bool = False  # rho fell to 0 below the root: the node and its remaining subtree are rejected
    # law only: probability of reaching this node's visit, and that every child subtree so far failed
    weight: float = 0.0
    survive: float = 1.0

    @classmethod
    def open(cls, tree: DraftTree, node: int, rho: float, rule: str, weight: float = 0.0) -> "_Node":
        frame = cls(node, rho, weight=weight)
        if tree.children[node] and rho > 0.0:
            frame.target = Row.of(tree.target_probs[node])
            frame.proposal = Proposal(tree, node, rule)
        return frame

    def child_rate(self, x: int, child: int) -> float:
        """rho(child) = min(1, rho * Mb(x) / Ms(x)) from the current state."""
        self.proposal.expect(x)
        d = draw_prob(self.proposal, x, child)
        if self.rho <= 0.0:
            return 0.0
        return min(1.0, self.rho * self.target.at(x) / d)

    def reject_child(self, x: int) -> None:
        """Eqs. (1)-(3) after the subtree of the current child (token x) was rejected."""
        new, mass = residual_step(self.target, self.rho, self.proposal)
        if self.node == 0:
            # rho(root) == S / (S + 0) == 1 exactly; S == 0 has probability 0 there (keep Mb).
            if new is not None:
                self.target = new
        else:
            self.rho = sequence_rate(mass, self.rho)
            if new is not None and self.rho > 0.0:
                self.target = new
            else:
                self.rho, self.dead = 0.0, True
        self.proposal.drawn(x)

    def final_target(self, tree: DraftTree) -> Row:
        return self.target if self.target is not None else Row.of(tree.target_probs[self.node])


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    """One Traversal Verification (Algorithm 3, recursive form of docs/methods/traversal.md §2.4)."""
    rule = proposal_rule(tree.sampling)
    kids = tree.children
    stack = [_Node.open(tree, 0, 1.0, rule)]
    while True:
        top = stack[-1]
        if not top.dead and top.next_child < len(kids[top.node]):
            child = kids[top.node][top.next_child]
            top.next_child += 1
            x = int(tree.tokens[child])
            rho_c = top.child_rate(x, child)
            if rho_c > 0.0:
                stack.append(_Node.open(tree, child, rho_c, rule))
            else:
                top.reject_child(x)  # a zero-rate subtree is rejected without drawing coins
            continue
        # Every child subtree was rejected: test the node itself.
        if not top.dead and uniform(generator) < top.rho:
            return Outcome(tree.path_to(top.node), sample_categorical(top.final_target(tree).vec, generator))
        stack.pop()
        if not stack:  # unreachable: the root ends with rho == 1
            raise RuntimeError("traversal verification rejected the root")
        parent = stack[-1]
        parent.reject_child(int(tree.tokens[top.node]))


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    """Exact law [N+1, V] of (path end node, extra token) given the tree."""
    rule = proposal_rule(tree.sampling)
    kids = tree.children
    out = torch.zeros(tree.num_nodes, tree.vocab_size, dtype=torch.float64)
    stack = [_Node.open(tree, 0, 1.0, rule, weight=1.0)]
    while stack:
        top = stack[-1]
        if not top.dead and top.next_child < len(kids[top.node]) and top.survive > 0.0:
            child = kids[top.node][top.next_child]
            top.next_child += 1
            x = int(tree.tokens[child])
            rho_c = top.child_rate(x, child)
            if rho_c > 0.0:
                stack.append(_Node.open(tree, child, rho_c, rule, weight=top.weight * top.survive))
            else:
                top.reject_child(x)
            continue
        # P(subtree of top yields a path | visited) = 1 - survive * (1 - rho)
        rho = 0.0 if top.dead else top.rho
        if top.survive > 0.0 and rho > 0.0:
            out[top.node] += (top.weight * top.survive * rho) * top.final_target(tree).dense()
        stack.pop()
        if not stack:
            break
        parent = stack[-1]
        accept = 1.0 - top.survive * (1.0 - rho)
        parent.survive *= (1.0 - accept)
        if parent.survive > 0.0:
            parent.reject_child(int(tree.tokens[top.node]))
    return out


def check(tree: DraftTree) -> None:
    """Every sampling mode is accepted (module docstring); without-replacement trees must be drawable."""
    check_consistent_draws(tree, NAME)


VERIFIER = Verifier(
    name=NAME,
    sample=sample,
    law=law,
    check=check,
    accepts=accepted_pairs(SHAPE_KINDS, SAMPLING_MODES),
    lossless=True,
    description="Traversal Verification (Weng et al. 2025, Alg. 3): post-order DFS with sequence-level "
                "acceptance rates; equals Block Verification on chains",
)
