"""Verifiers under one signature: ``verify(name, tree, generator) -> Verdict(path, token)``.

One module per verifier; each defines ``VERIFIER`` (see `base.Verifier`). ``exact_law`` and
``expected_tokens`` give the verifier's exact output law on a fixed drafted tree, so experiments
compare verifiers on the same tree without sampling noise.
"""

from __future__ import annotations

from typing import Any

import torch

from ..tree import DraftTree
from .base import Verdict, Verifier, check_generator, expected_tokens_from_law
from . import token_level, asps, block, greedy_block, traversal, erss, spectr, match

VERIFIERS: dict[str, Verifier] = {
    m.VERIFIER.name: m.VERIFIER
    for m in (token_level, asps, block, greedy_block, traversal, erss, spectr, match)
}


def get_verifier(name: str) -> Verifier:
    try:
        return VERIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown verifier {name!r}; known: {sorted(VERIFIERS)}") from None


def verify(name: str, tree: DraftTree, generator: torch.Generator, state: Any = None) -> Verdict:
    """Verify ``tree`` with verifier ``name``; ``generator`` (a ``torch.Generator``, required: None is a
    ValueError) is the only source of randomness."""
    v = get_verifier(name)
    check_generator(generator)
    v.check(tree)
    return v.sample(tree, generator, state)


def exact_law(name: str, tree: DraftTree, state: Any = None) -> torch.Tensor:
    """The exact law ``[N+1, V]`` of (path end node, extra token) of verifier ``name`` on ``tree``."""
    v = get_verifier(name)
    v.check(tree)
    if v.law is None:
        raise ValueError(f"verifier {name!r} has no exact law given a tree (see its docstring)")
    return v.law(tree, state)


def expected_tokens(name: str, tree: DraftTree, state: Any = None) -> float:
    """Exact expected number of emitted tokens (accepted drafts + 1) of ``name`` on ``tree``."""
    return expected_tokens_from_law(tree, exact_law(name, tree, state))


__all__ = ["Verdict", "Verifier", "VERIFIERS", "verify", "exact_law", "expected_tokens", "get_verifier"]
