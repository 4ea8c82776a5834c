"""Verifiers under one signature: ``verify(name, tree, generator) -> Outcome(path, token)``.

One module per verifier; each defines ``VERIFIER`` (see `base.Verifier`). ``exact_law`` and
``expected_tokens`` give the verifier's exact output law on a fixed drafted tree, so experiments
compare verifiers on the same tree without sampling noise.

``VERIFIERS`` holds the lossless verifiers (each proven by exact enumeration). ``NOT_LOSSLESS`` holds
published verifiers that exact enumeration shows change the output law (HSD as its authors' code
runs it, docs/papers/hsd.md): `verify`, `exact_law` and `expected_tokens` take them, so they can be measured on
the same trees as the others, but `get_verifier` refuses them, and so does decoding.

Adding a verifier: its module (``VERIFIER`` declaring ``accepts`` and ``lossless``), its own test file,
one registry line. The exact tests parametrize from `declared_pairs` / `undeclared_pairs`: every declared
pair is proven lossless by exact enumeration, every other pair must make ``check`` raise.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..tree import SAMPLING_MODES, DraftTree
from .base import SHAPE_KINDS, Outcome, Verifier, check_generator, expected_tokens_from_law
from . import token_level, asps, block, greedy_block, traversal, erss, spectr, match, hsd, hsd_released

VERIFIERS: dict[str, Verifier] = {
    m.VERIFIER.name: m.VERIFIER
    for m in (token_level, asps, block, greedy_block, traversal, erss, spectr, match, hsd)
}


NOT_LOSSLESS: dict[str, Verifier] = {hsd_released.VERIFIER.name: hsd_released.VERIFIER}


def declared_pairs(registry: Mapping[str, Verifier]) -> list[tuple[str, str, str]]:
    """``(name, shape kind, sampling)`` for every pair that a verifier of ``registry`` declares in
    ``accepts``, sorted (a verifier without a declaration contributes none)."""
    return sorted((name, shape, sampling) for name, v in registry.items() for shape, sampling in (v.accepts or ()))


def undeclared_pairs(registry: Mapping[str, Verifier]) -> list[tuple[str, str, str]]:
    """``(name, shape kind, sampling)`` for every pair of `SHAPE_KINDS` x `SAMPLING_MODES` that a declared
    verifier of ``registry`` does not accept (its ``check`` must raise ValueError on such trees)."""
    return sorted((name, shape, sampling) for name, v in registry.items() if v.accepts is not None
                  for shape in SHAPE_KINDS for sampling in SAMPLING_MODES if (shape, sampling) not in v.accepts)


def _lookup(name: str, measuring: bool) -> Verifier:
    if name in VERIFIERS:
        return VERIFIERS[name]
    if name in NOT_LOSSLESS:
        if measuring:
            return NOT_LOSSLESS[name]
        raise ValueError(f"verifier {name!r} is not lossless (exact enumeration: docs/papers/hsd.md); it can be "
                         f"measured with verify / exact_law / expected_tokens, but never used to decode")
    raise ValueError(f"unknown verifier {name!r}; known: {sorted(VERIFIERS)} (measured only, not lossless: "
                     f"{sorted(NOT_LOSSLESS)})")


def get_verifier(name: str) -> Verifier:
    """A lossless verifier by name (ValueError for an unknown name or one of ``NOT_LOSSLESS``)."""
    return _lookup(name, measuring=False)


def verify(name: str, tree: DraftTree, generator: torch.Generator, state: Any = None) -> Outcome:
    """Verify ``tree`` with verifier ``name``; ``generator`` (a ``torch.Generator``, required: None is a
    ValueError) is the only source of randomness. Names of ``NOT_LOSSLESS`` are taken too (measurement)."""
    v = _lookup(name, measuring=True)
    check_generator(generator)
    v.check(tree)
    return v.sample(tree, generator, state)


def exact_law(name: str, tree: DraftTree, state: Any = None) -> torch.Tensor:
    """The exact law ``[N+1, V]`` of (path end node, extra token) of verifier ``name`` on ``tree``."""
    v = _lookup(name, measuring=True)
    v.check(tree)
    if v.law is None:
        raise ValueError(f"verifier {name!r} has no exact law given a tree (see its docstring)")
    return v.law(tree, state)


def expected_tokens(name: str, tree: DraftTree, state: Any = None) -> float:
    """Exact expected number of emitted tokens (accepted drafts + 1) of ``name`` on ``tree``."""
    return expected_tokens_from_law(tree, exact_law(name, tree, state))


__all__ = ["Outcome", "Verifier", "VERIFIERS", "NOT_LOSSLESS", "verify", "exact_law", "expected_tokens", "get_verifier",
           "declared_pairs", "undeclared_pairs"]
