"""What every verifier shares: the verdict, the exact-law representation and two sampling primitives.

A verifier is a pure function of a `DraftTree` and a `torch.Generator` (the only randomness). It
returns a `Verdict`: the accepted path (node indices, root excluded, in depth order) and the one
extra token (correction or bonus). Emitted tokens are ``[tree.tokens[i] for i in path] + [token]``.

Exact law given a tree: a float64 tensor ``law`` of shape ``[N+1, V]`` where ``law[i, v]`` is the
probability that the accepted path ends at node ``i`` (so the path is root..i) and the extra token
is ``v``. It sums to 1. Expected emitted tokens = sum_i (depth(i) + 1) * law[i].sum().

``state`` is the smallest hook for verifiers whose output law depends on earlier steps
(greedy block verification modifies the target of the following steps, Block Verification
Algorithms 5-6). It is ``None`` for every other verifier. The decode loop threads
``verdict.state`` into the next call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator

import torch

from ..tree import DraftTree


@dataclass(frozen=True)
class Verdict:
    path: tuple[int, ...]
    token: int
    state: Any = None

    def emitted(self, tree: DraftTree) -> list[int]:
        return [int(tree.tokens[i]) for i in self.path] + [int(self.token)]


SampleFn = Callable[[DraftTree, torch.Generator, Any], Verdict]
LawFn = Callable[[DraftTree, Any], torch.Tensor]
CheckFn = Callable[[DraftTree], None]
NextStateFn = Callable[[DraftTree, Any, tuple, int], Any]


@dataclass(frozen=True)
class Verifier:
    """A named verifier: how to sample it, its exact law (None where no recursion exists) and the
    check that raises ValueError for trees it cannot handle."""

    name: str
    sample: SampleFn
    law: LawFn | None
    check: CheckFn
    description: str = ""
    next_state: NextStateFn | None = None
    """For a verifier that carries state across steps (greedy_block): ``next_state(tree, state, path, token)``."""


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
