"""What every verifier shares: the verdict, the exact-law representation and two sampling primitives.

A verifier is a pure function of a `DraftTree` and a `torch.Generator` (the only randomness). It
returns a `Outcome`: the accepted path (node indices, root excluded, in depth order) and the one
extra token (correction or bonus). Emitted tokens are ``[tree.tokens[i] for i in path] + [token]``.

Exact law given a tree: a float64 tensor ``law`` of shape ``[N+1, V]`` where ``law[i, v]`` is the
probability that the accepted path ends at node ``i`` (so the path is root..i) and the extra token
is ``v``. It sums to 1. Expected emitted tokens = sum_i (depth(i) + 1) * law[i].sum().

``state`` carries what a verifier's law needs from earlier steps (greedy block verification modifies
the target of the following steps, Block Verification Algs. 5-6; ``None`` for every other verifier);
the decode loop threads ``outcome.state`` into the next call. Each `Verifier` declares the (shape kind,
sampling mode) pairs its ``check`` lets through (``accepts``) and whether it is ``lossless``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any, Callable, Generator, Iterator

import torch

from ..tree import SAMPLING_MODES, DraftTree


@dataclass(frozen=True)
class Outcome:
    """What one verification step accepts: the drafted path (node indices) and one extra token."""

    path: tuple[int, ...]
    token: int
    state: Any = None

    def emitted(self, tree: DraftTree) -> list[int]:
        return [int(tree.tokens[i]) for i in self.path] + [int(self.token)]


SampleFn = Callable[[DraftTree, torch.Generator, Any], Outcome]
LawFn = Callable[[DraftTree, Any], torch.Tensor]
CheckFn = Callable[[DraftTree], None]
NextStateFn = Callable[[DraftTree, Any, tuple, int], Any]


SHAPE_KINDS = ("chain", "tree")
"""The shape kinds a verifier declares: ``chain`` = no node has two children (parents [-1, 0, 1, ...]);
``tree`` = some node branches (k-ary and binary trees, one-level stars, batches of chains, any other
shape). No verifier's check tells branching shapes apart, so two kinds suffice."""

Pair = tuple[str, str]


def shape_kind(tree: DraftTree) -> str:
    """``"chain"`` if no node of ``tree`` has two children, else ``"tree"`` (see `SHAPE_KINDS`)."""
    return "chain" if tree.is_chain else "tree"


def accepted_pairs(shapes, samplings) -> frozenset[Pair]:
    """Every (shape kind, sampling mode) pair of ``shapes`` x ``samplings``; ValueError for unknown names."""
    shapes, samplings = tuple(shapes), tuple(samplings)
    for arg, given, known in (("shapes", shapes, SHAPE_KINDS), ("samplings", samplings, SAMPLING_MODES)):
        unknown = [x for x in given if x not in known]
        if unknown or not given:
            raise ValueError(f"{arg} must be a non-empty selection of {known}, got {given!r}")
    return frozenset(product(shapes, samplings))


@dataclass(frozen=True)
class Verifier:
    """A named verifier: how to sample it, its exact law (None where no recursion exists), the
    check that raises ValueError for trees it cannot handle, and its declaration: the pairs ``check``
    accepts and whether it is lossless. ``None`` means "not declared" (refused by the registry tests)."""

    name: str
    sample: SampleFn
    law: LawFn | None
    check: CheckFn
    description: str = ""
    next_state: NextStateFn | None = None
    """For a verifier that carries state across steps (greedy_block): ``next_state(tree, state, path, token)``."""
    accepts: frozenset[Pair] | None = None
    """The (shape kind, sampling mode) pairs ``check`` lets through, e.g. ``accepted_pairs(SHAPE_KINDS,
    SAMPLING_MODES)``; every other pair makes ``check`` raise ValueError."""
    lossless: bool | None = None
    """True: the output law is the target's (exact tests on every pair of ``accepts``); False: measured only."""

    def __post_init__(self) -> None:
        if self.lossless is not None and not isinstance(self.lossless, bool):
            raise TypeError(f"lossless must be a bool, got {type(self.lossless).__name__}")
        if self.accepts is None:
            return
        if not isinstance(self.accepts, frozenset):
            raise TypeError(f"accepts must be a frozenset of (shape, sampling) pairs, got "
                            f"{type(self.accepts).__name__}")
        bad = [p for p in self.accepts if not (isinstance(p, tuple) and len(p) == 2 and p[0] in SHAPE_KINDS
                                                and p[1] in SAMPLING_MODES)]
        if bad or not self.accepts:
            raise ValueError(f"accepts of verifier {self.name!r} must hold (shape in {SHAPE_KINDS}, sampling in "
                             f"{SAMPLING_MODES}) pairs, at least one; got {sorted(map(repr, bad)) or 'none'}")

    def declares(self, tree: DraftTree) -> bool:
        """Whether ``(shape_kind(tree), tree.sampling)`` is one of the declared pairs (False if undeclared)."""
        return self.accepts is not None and (shape_kind(tree), tree.sampling) in self.accepts


def expected_tokens_from_law(tree: DraftTree, law: torch.Tensor) -> float:
    """E[emitted tokens] = E[len(path) + 1] under an exact law ``[N+1, V]``."""
    depth = torch.tensor(tree.depths, dtype=torch.float64)
    return float(((depth + 1.0) * law.sum(dim=1)).sum())


def check_generator(generator) -> torch.Generator:
    """``generator`` itself; ValueError unless it is a ``torch.Generator``. ``None`` is refused: torch
    would silently draw from its global RNG, and the same seed would no longer give the same output."""
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator (the only source of randomness; None would "
                         f"silently use torch's global RNG), got {generator!r}")
    return generator


def sample_categorical(weights: torch.Tensor, generator: torch.Generator) -> int:
    """One draw from a non-negative (unnormalised) weight vector by inverting its float64 CDF with one
    uniform from ``generator`` (about 15x faster than ``torch.multinomial`` at V = 49152).
    Zero-weight entries are never drawn."""
    check_generator(generator)
    cdf = torch.cumsum(weights.to(torch.float64).clamp_min(0), 0)
    total = float(cdf[-1])
    if not total > 0.0:
        raise ValueError("cannot sample from an all-zero distribution")
    u = torch.rand(1, generator=generator, dtype=torch.float64) * total
    idx = int(torch.searchsorted(cdf, u, right=True))
    if idx >= weights.shape[0]:          # u rounded up to the total: the last token with mass
        idx = int(torch.nonzero(weights > 0)[-1])
    return idx


def uniform(generator: torch.Generator) -> float:
    """One U(0, 1) draw from the given generator."""
    check_generator(generator)
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Unnormalised residual max(p - q, 0) (Leviathan et al.; Block Verification Eq. 3 with the
    missing max restored in the denominator). Returns p itself where the residual has no mass
    (a measure-zero event; docs/methods/block.md §2.7)."""
    r = (p.to(torch.float64) - q.to(torch.float64)).clamp_min(0)
    return r if float(r.sum()) > 0.0 else p.to(torch.float64)


def require_chain(tree: DraftTree, name: str) -> None:
    if not tree.is_chain:
        raise ValueError(f"verifier {name!r} handles chains only (parents = [-1, 0, 1, ...]); "
                         f"this tree branches")


NodeTrials = Callable[[int], Generator[tuple[int, float], None, torch.Tensor]]
"""``trials(node)``: a generator over the node's children in the order the verifier tries them, yielding
``(child, a)`` with ``a`` = P(the child is accepted | the node is reached and every earlier child was
rejected); it returns (StopIteration value) the node's final row: the law of the extra token when every
child is rejected."""


def sequential_law(tree: DraftTree, trials: NodeTrials) -> torch.Tensor:
    """Exact law ``[N+1, V]`` of a verifier that walks down from the root and, at each node it reaches,
    tries the children one after another (token-level RRS, SpecTr's K-SEQ, match): P(reach child) =
    P(reach node) * P(all earlier siblings rejected) * a, and the node's row is P(reach node) *
    P(all rejected) * final row. Parents precede children, so one pass in index order suffices."""
    out = torch.zeros(tree.num_nodes, tree.vocab_size, dtype=torch.float64)
    reach = [0.0] * tree.num_nodes
    reach[0] = 1.0
    for node in range(tree.num_nodes):
        if reach[node] == 0.0:
            continue
        walk: Iterator = trials(node)
        survive = 1.0
        while True:
            try:
                child, a = next(walk)
            except StopIteration as end:
                out[node] = (reach[node] * survive) * end.value
                break
            reach[child] = reach[node] * survive * a
            survive *= 1.0 - a
            if survive == 0.0:  # every later child and the final row are unreachable
                break
    return out
