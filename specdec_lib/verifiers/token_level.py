"""``token``: token-level verification. Leviathan et al. / Chen et al. on chains; recursive rejection
sampling (RRS) on trees, top-down, one node at a time (SpecInfer; Sequoia Algorithm 1; the GSS tree
algorithm of ERSS, Algorithm 4 as corrected in docs/methods/erss.md §2.5; Traversal Verification's "Tok.V",
docs/methods/traversal.md §2.3).

At an accepted node ``i`` (the root first) with target row ``p_i``, the children ``c_1..c_k`` are
tested in sampling order. Child ``c_j`` (token ``x``) was proposed by the distribution ``D_j`` it was
drawn from; with the current target residual ``R`` (initially ``p_i``)::

    accept c_j with probability min(1, R[x] / D_j[x])        -> descend into c_j
    otherwise R <- norm(max(R - D_j, 0))                       (uses D_j BEFORE x is removed)
    if every child is rejected: extra token ~ R                (a leaf: extra token ~ p_i)

Lossless for any adaptive sequence of proposals as long as child ``j`` really was drawn from ``D_j``.
``tree.sampling`` fixes ``D_j`` (`proposal_rule`, `Proposal`): ``iid`` keeps ``q_i``; ``without_replacement``
and ``race`` zero each tried token (uniform over the untried tokens past the draft's support); ``topk`` uses
the point mass on each child. Table and reasons: docs/ARCHITECTURE.md, "Drafting and sampling modes".

Exact law given the tree (`law`): every coin is replaced by its probability; the residual updates
are deterministic, so the recursion costs O(N V).
"""

from __future__ import annotations

from typing import Any

import torch

from ..tree import SAMPLING_MODES, DraftTree
from .base import SHAPE_KINDS, Outcome, Verifier, accepted_pairs, sample_categorical, sequential_law, uniform

NAME = "token"


def target_row(tree: DraftTree, node: int) -> torch.Tensor:
    """Target row of ``node`` in float64, renormalised by its explicit sum (docs/methods/traversal.md §2.8 #12)."""
    row = tree.target_probs[node].to(torch.float64)
    return row / row.sum()


def draft_row(tree: DraftTree, node: int) -> torch.Tensor:
    """Draft row of an internal ``node`` in float64, renormalised by its explicit sum."""
    row = tree.draft_probs[node].to(torch.float64)
    return row / row.sum()


def working_precision(row: torch.Tensor) -> torch.Tensor:
    """``row`` itself if it is float32 / float64, else up-cast to float32 (fp16 / bf16 model rows)."""
    return row if row.dtype in (torch.float32, torch.float64) else row.to(torch.float32)


class Row:
    """A distribution kept as ``scale * vec``; ``vec`` is never modified in place.

    Residual updates then cost one pass over the vocabulary and normalising is a scalar: this is
    what keeps the verifiers fast at V ~ 5e4. Rows are renormalised by their explicit sums
    (docs/methods/traversal.md §2.8 #12) and every scalar (ratios, rates, masses) is a Python float64.
    Vector arithmetic runs in the rows' own precision: float64 rows (every exactness test) are
    verified entirely in float64; float32 model rows are not up-cast, since converting 49k-entry rows
    at every visited node dominated the run time, and their rounding is already ~1e-7.
    """

    __slots__ = ("vec", "scale")

    def __init__(self, vec: torch.Tensor, scale: float):
        self.vec = vec
        self.scale = scale

    @classmethod
    def of(cls, row: torch.Tensor) -> "Row":
        vec = working_precision(row)
        total = float(vec.sum())
        if not total > 0.0:
            raise ValueError("a distribution row has no mass")
        return cls(vec, 1.0 / total)

    def at(self, x: int) -> float:
        return self.scale * float(self.vec[x])

    def dense(self) -> torch.Tensor:
        return self.vec.to(torch.float64) * self.scale


def proposal_rule(sampling: str) -> str:
    """Which proposal sequence D_1, D_2, ... the children of a node were drawn from."""
    if sampling == "iid":
        return "iid"
    if sampling in ("without_replacement", "race"):
        return "without_replacement"
    if sampling == "topk":
        return "point_mass"
    raise ValueError(f"unknown sampling mode {sampling!r}")


_EXHAUSTED = 1e-9  # remaining draft mass below this fraction is recomputed exactly
_ALPHA_LIMIT = 1e30  # largest scalar multiplier used on a float32 row


class Proposal:
    """The distribution ``D_j`` that proposed the next child of one node (module docstring).

    ``expect(x)`` announces the next child's token, ``prob(x)`` is ``D_j[x]`` and ``drawn(x)`` moves on
    to ``D_{j+1}`` after child ``x`` was rejected. Without replacement, ``D_j`` is the draft row with
    the drawn tokens zeroed (kept implicitly: the row itself is never copied), then uniform over the
    tokens not drawn yet once the draft support is used up.
    """

    def __init__(self, tree: DraftTree, node: int, rule: str):
        self.rule = rule
        self.vocab = tree.vocab_size
        self.removed: list[int] = []
        self.next_token: int | None = None
        self.uniform = False
        self.vec: torch.Tensor | None = None
        self.mass = 1.0
        if rule != "point_mass":
            self.vec = working_precision(tree.draft_probs[node])
            self.total = float(self.vec.sum())
            if not self.total > 0.0:
                raise ValueError(f"node {node} has children but its draft row has no mass")
            self.mass = self.total  # draft mass of the tokens still drawable

    def expect(self, x: int) -> None:
        self.next_token = x

    def prob(self, x: int) -> float:
        if self.rule == "point_mass":
            return 1.0 if x == self.next_token else 0.0
        if x in self.removed:
            return 0.0
        if self.uniform:
            return 1.0 / (self.vocab - len(self.removed))
        return float(self.vec[x]) / self.mass

    def drawn(self, x: int) -> None:
        if self.rule != "without_replacement":
            return
        self.removed.append(x)
        if self.uniform:
            return
        self.mass -= float(self.vec[x])
        if self.mass <= _EXHAUSTED * self.total:
            rest = self.vec.to(torch.float64).clone()
            rest[self.removed] = 0.0
            self.mass = float(rest.sum())
            # Draft support used up: uniform over the tokens not drawn yet (Sequoia §2.6).
            self.uniform = self.mass <= 0.0


def residual_step(target: Row, rho: float, proposal: Proposal) -> tuple[Row | None, float]:
    """One rejection: returns ``norm([rho * R - D]_+)`` and its mass ``S = sum([rho * R - D]_+)``.

    ``rho = 1`` is token-level RRS (R <- norm(max(R - D, 0))); ``rho < 1`` is Traversal's Eqs. (1)
    and (3). ``D`` is the proposal *before* the rejected token is removed. Returns ``(None, 0.0)``
    when the residual has no mass.
    """
    a = rho * target.scale  # rho * R == a * target.vec
    if not a > 0.0:
        return None, 0.0
    if proposal.rule == "point_mass":
        x = proposal.next_token
        tx = float(target.vec[x])
        wx = max(tx - 1.0 / a, 0.0)
        w = target.vec.clone()
        w[x] = wx
        s = 1.0 / target.scale - tx + wx
    else:
        # r = rho * R - D = factor * w with one pass over V (alpha form), or two when 1/a would
        # overflow the rows' precision (tiny rho * R).
        d_scale = 1.0 / (proposal.vocab - len(proposal.removed)) if proposal.uniform else 1.0 / proposal.mass
        if d_scale / a < _ALPHA_LIMIT:
            factor, t_vec, beta = a, target.vec, d_scale / a
        else:
            factor, t_vec, beta = 1.0, target.vec * a, d_scale
        w = (t_vec - beta) if proposal.uniform else torch.sub(t_vec, proposal.vec, alpha=beta)
        if proposal.removed:  # D_j is 0 on the tokens drawn before
            idx = torch.tensor(proposal.removed)
            w[idx] = target.vec[idx] * (a / factor)
        w.clamp_(min=0.0)
        s = float(w.sum())
        a = factor
    if not s > 0.0:
        return None, 0.0
    return Row(w, 1.0 / s), a * s


def _child_token(tree: DraftTree, child: int) -> int:
    return int(tree.tokens[child])


def draw_prob(proposal: Proposal, x: int, child: int) -> float:
    """D_j[x] for the child being tested; zero means the tree does not match its sampling mode."""
    d = proposal.prob(x)
    if d <= 0.0:
        raise ValueError(f"node {child}: token {x} has zero probability under the distribution it was "
                         f"drawn from; the tree does not match sampling rule {proposal.rule!r}")
    return d


def _reject(target: Row, proposal: Proposal, x: int) -> Row:
    new, _ = residual_step(target, 1.0, proposal)
    proposal.drawn(x)
    return new if new is not None else target  # no mass: the rejection had probability 0


def sample(tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    """One token-level verification (module docstring); ``generator`` is the only randomness."""
    rule = proposal_rule(tree.sampling)
    kids = tree.children
    node, path = 0, []
    while True:
        target = Row.of(tree.target_probs[node])
        accepted = None
        if kids[node]:
            proposal = Proposal(tree, node, rule)
            for child in kids[node]:
                x = _child_token(tree, child)
                proposal.expect(x)
                if uniform(generator) < min(1.0, target.at(x) / draw_prob(proposal, x, child)):
                    accepted = child
                    break
                target = _reject(target, proposal, x)
        if accepted is None:
            return Outcome(tuple(path), sample_categorical(target.vec, generator))
        path.append(accepted)
        node = accepted


def law(tree: DraftTree, state: Any = None) -> torch.Tensor:
    """Exact law [N+1, V] of (path end node, extra token) given the tree."""
    rule = proposal_rule(tree.sampling)

    def trials(node: int):
        target = Row.of(tree.target_probs[node])
        if tree.children[node]:
            proposal = Proposal(tree, node, rule)
            for child in tree.children[node]:
                x = _child_token(tree, child)
                proposal.expect(x)
                yield child, min(1.0, target.at(x) / draw_prob(proposal, x, child))
                target = _reject(target, proposal, x)
        return target.dense()

    return sequential_law(tree, trials)


def check_consistent_draws(tree: DraftTree, name: str) -> None:
    """Raise if a child of a without-replacement / race tree could not have been drawn: its token has
    zero draft probability although the draft support was not yet used up by earlier siblings."""
    if proposal_rule(tree.sampling) != "without_replacement" or tree.num_nodes == 1:
        return
    par = tree.parents[1:]
    qx = tree.draft_probs[par, tree.tokens[1:]]
    zero = (qx <= 0).nonzero().flatten().tolist()
    for idx in zero:
        child = idx + 1
        parent = tree.parent_list[child]
        support = int((tree.draft_probs[parent] > 0).sum())
        earlier = [c for c in tree.children[parent] if c < child]
        drawn_from_support = sum(1 for c in earlier if float(tree.draft_probs[parent, tree.tokens[c]]) > 0)
        if drawn_from_support < support:
            raise ValueError(
                f"verifier {name!r}: node {child} has draft probability 0 under its parent's row but only "
                f"{drawn_from_support} of the {support} supported tokens were drawn before it; such a "
                f"child cannot come from sampling without replacement")


def check(tree: DraftTree) -> None:
    """Every sampling mode is accepted (see the module docstring for the rule each one uses)."""
    check_consistent_draws(tree, NAME)


VERIFIER = Verifier(
    name=NAME,
    sample=sample,
    law=law,
    check=check,
    accepts=accepted_pairs(SHAPE_KINDS, SAMPLING_MODES),
    lossless=True,
    description="token-level verification: Leviathan/Chen on chains, recursive rejection sampling on "
                "trees (with replacement for iid, without replacement for without_replacement and race "
                "trees, point-mass proposals for top-k trees)",
)
