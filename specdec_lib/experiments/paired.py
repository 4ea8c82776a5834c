"""Paired exact evaluation: every verifier's exact expected tokens on the same drafted trees."""

from __future__ import annotations

import zlib
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import pandas as pd
import torch

from ..theory.node_rao_blackwell import rao_blackwell_erss, rao_blackwell_tokens
from ..progress import tqdm
from ..theory.traversal_identity import control_variate_ccdf, rao_blackwell_ccdf
from ..tree import DraftTree
from ..verifiers import NOT_LOSSLESS, exact_law, get_verifier
from ..verifiers.base import Verifier, expected_tokens_from_law
from .collection import TreeRecord, collect_trees
from .setup import Pair, PromptIds

class Estimator(NamedTuple):
    """A Rao-Blackwellised estimator of ``verifier``'s expected tokens: ``estimate(tree, seed, memo)`` gives
    (expected tokens, p_accept_first); ``seed`` feeds its Monte Carlo, if any; ``memo`` is one dict per
    evaluated tree, shared by the estimators of that tree (so traversal_rb and traversal_cv compute the
    Rao-Blackwellised CCDF once)."""

    verifier: str
    estimate: Callable[[DraftTree, int, dict], tuple[float, float]]


def _tokens_and_first(ccdf) -> tuple[float, float]:
    return float(ccdf.sum()), float(ccdf[1]) if len(ccdf) > 1 else 0.0


def _traversal_rb_ccdf(tree: DraftTree, memo: dict):
    if "traversal_rb" not in memo:
        memo["traversal_rb"] = rao_blackwell_ccdf(tree, "traversal")
    return memo["traversal_rb"]


def _traversal_rb(tree: DraftTree, seed: int, memo: dict) -> tuple[float, float]:
    return _tokens_and_first(_traversal_rb_ccdf(tree, memo))


def _traversal_cv(tree: DraftTree, seed: int, memo: dict) -> tuple[float, float]:
    return _tokens_and_first(control_variate_ccdf(tree, rb=_traversal_rb_ccdf(tree, memo)))


def _token_rb(tree: DraftTree, seed: int, memo: dict) -> tuple[float, float]:
    return rao_blackwell_tokens(tree, generator=torch.Generator().manual_seed(seed)), float("nan")


def _erss_rb(tree: DraftTree, seed: int, memo: dict) -> tuple[float, float]:
    return rao_blackwell_erss(tree, generator=torch.Generator().manual_seed(seed)), float("nan")


RAO_BLACKWELLISED = {"traversal_rb": Estimator("traversal", _traversal_rb),
                     "traversal_cv": Estimator("traversal", _traversal_cv), "token_rb": Estimator("token", _token_rb),
                     "erss_rb": Estimator("erss", _erss_rb)}
"""Estimator name -> the verifier it estimates and how (`paired_expected_tokens`)."""
MEASURED_ONLY: dict[str, Verifier] = dict(NOT_LOSSLESS)
"""Published methods evaluated by their exact law though not lossless (docs/papers/hsd.md): the verifiers
package's ``NOT_LOSSLESS``; they never advance the text."""

# ----------------------------------------------------------------------------------------- evaluation

def _verifier(name: str) -> Verifier:
    return MEASURED_ONLY.get(name) or get_verifier(name)


def applicable(verifier: str, tree: DraftTree) -> bool:
    """Whether ``verifier`` accepts ``tree`` (its ``check`` raises no ValueError)."""
    try:
        _verifier(verifier).check(tree)
    except ValueError:
        return False
    return True


def paired_expected_tokens(records: Sequence[TreeRecord], verifiers: Sequence[str],
                           views: Mapping[str, Callable[[DraftTree], DraftTree]] | None = None,
                           labels: Mapping[str, Any] | None = None, progress: bool = False,
                           verifiers_by_view: Mapping[str, Sequence[str]] | None = None):
    """Exact expected emitted tokens (accepted drafts + 1) of every verifier on every tree.

    ``views`` maps a label to a function giving the tree to evaluate (e.g. ``{"chain:4": lambda t:
    truncate_chain(t, 4)}``; default: the tree itself under the label "tree"). Verifiers that do not
    accept a tree are skipped (``nodes`` = drafted nodes, root excluded; ``draw`` = the record's copy, so
    `paired_gain` averages the copies drafted at one step before pairing). The verifier that advanced the
    text gets its recorded state (greedy_block's target modification); the others are evaluated as a fresh
    step. Returns a long DataFrame with columns
    prompt_id, category, step, view, nodes, verifier, expected_tokens, p_accept_first (P(at least one
    drafted token accepted)) and the constant ``labels`` columns. ``verifiers_by_view``: view label -> the
    verifiers of ``verifiers`` evaluated on that view (default: all of them), e.g. each method on its own sub-tree
    of a tree drafted for several.

    A name in `RAO_BLACKWELLISED` is an estimator, not a verifier, with the same mean at each context as the
    verifier's exact value and less drafting noise: ``"traversal_rb"``, traversal's expected tokens with the
    drafting of the levels below each level integrated out (`traversal_identity.rao_blackwell_ccdf`; its
    ``p_accept_first`` is token-level's P(tau >= 1) of the same tree, exactly); ``"traversal_cv"``, the same
    corrected by a control variate of mean 0 (`traversal_identity.control_variate_ccdf`: less noise in the
    paired difference to token-level); ``"token_rb"``, token-level's
    expected tokens with each node's own children draw integrated out (`node_rao_blackwell.rao_blackwell_tokens`,
    its Monte Carlo seeded by the tree's prompt, step, draw and view; no ``p_accept_first``: NaN); ``"erss_rb"``, the
    same for ERSS on race-drafted trees (`node_rao_blackwell.rao_blackwell_erss`: each node's own race integrated out).

    A name in `MEASURED_ONLY` (``"hsd"``) is a published method that is not lossless: its exact law is
    evaluated on the same trees, but it is not a registered verifier and never advances the text.
    """
    views = dict(views or {"tree": lambda t: t})
    only = dict(verifiers_by_view or {})
    for view, names in only.items():
        if view not in views or isinstance(names, str) or not set(names) <= set(verifiers):
            raise ValueError(f"verifiers_by_view[{view!r}] must name a view ({list(views)}) and a list of the "
                             f"verifiers {list(verifiers)}, got {names!r}")
    rows = []
    iterator: Iterable[TreeRecord] = records
    if progress:
        iterator = tqdm(records, desc="exact expected tokens", leave=False)
    for rec in iterator:
        for view, fn in views.items():
            tree, memo = fn(rec.tree), {}
            for name in only.get(view, verifiers):
                estimator = RAO_BLACKWELLISED.get(name)
                if not applicable(estimator.verifier if estimator else name, tree):
                    continue
                if estimator:
                    seed = zlib.crc32(f"{rec.prompt_id}/{rec.step}/{rec.draw}/{view}".encode())
                    expected, first = estimator.estimate(tree, seed, memo)
                elif name in MEASURED_ONLY:
                    law = MEASURED_ONLY[name].law(tree, None)
                    expected, first = float(expected_tokens_from_law(tree, law)), float(1.0 - law[0].sum())
                else:
                    law = exact_law(name, tree, rec.state if name == rec.advance else None)
                    expected, first = float(expected_tokens_from_law(tree, law)), float(1.0 - law[0].sum())
                rows.append({"prompt_id": rec.prompt_id, "category": rec.category, "step": rec.step,
                             "draw": rec.draw, "view": view, "nodes": tree.num_nodes - 1, "verifier": name,
                             "expected_tokens": expected, "p_accept_first": first})
    frame = pd.DataFrame(rows, columns=["prompt_id", "category", "step", "draw", "view", "nodes", "verifier",
                                        "expected_tokens", "p_accept_first"])
    for key, value in (labels or {}).items():
        frame[key] = value
    return frame


def paired_tokens_by_prompt(pair: Pair, prompts: Sequence[PromptIds], shape: str | Sequence[int], sampling: str,
                            temperature: float, verifiers: Sequence[str],
                            views: Mapping[str, Callable[[DraftTree], DraftTree]] | None = None,
                            labels: Mapping[str, Any] | None = None, progress: bool = True, **collect: Any):
    """`collect_trees` then `paired_expected_tokens`, one prompt at a time, so only one prompt's drafted
    trees are held (each keeps two ``[nodes, V]`` float64 tables: 28 MB for 36 nodes at V = 49152).
    ``collect``: further `collect_trees` arguments (``max_new_tokens``, ``seed``, ``copies``, ``top_p``, ...).
    Same rows as the two calls on all prompts (the drafting seed depends on the prompt, not its position)."""
    iterator: Iterable[PromptIds] = prompts
    if progress:
        name = shape if isinstance(shape, str) else f"tree of {len(shape)}"
        iterator = tqdm(list(prompts), desc=f"{name} {sampling} T={temperature}", leave=False)
    frames = [paired_expected_tokens(collect_trees(pair, [prompt], shape, sampling, temperature, progress=False,
                                                   **collect), verifiers, views, labels)
              for prompt in iterator]
    return pd.concat(frames, ignore_index=True)
