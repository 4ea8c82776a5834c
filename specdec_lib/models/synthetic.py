"""Toy language models over tiny vocabularies (float64), for exact tests and closed-form examples.

Every model is a `ToyLM`: ``probs(context)`` returns the next-token distribution after the whole
context (a tuple of token ids, prefix included) as a float64 tensor ``[V]``. If the model has an
end-of-sequence token, then once EOS occurs in the context the model is a point mass on EOS
(the convention of Block Verification §2.3 and ASpS §2.3.2 (iv)), so finite toy LMs are
"leaf-only" and every exact law stays a distribution over fixed-length token tuples.

* `ContextIndependentLM`: the same distribution at every position (Block Verification Eq. 2; ASpS
  Fixture B).
* `MarkovLM`: next token depends on the last token only (the bigram of Block Verification §3.5 (b)).
* `TabularLM`: an explicit finite tree of contexts (ASpS Tables 2-4), every unlisted context ends.
* `random_markov_pair`: a random (target, draft) pair with tunable mismatch and an EOS token.
* `tempered`: temperature scaling ``p^(1/T)`` renormalised; ``T = 0`` is the one-hot argmax.
* `FeatureToyDraft`: a draft that reads the target's state, as the EAGLE-style feature draft does
  (`specdec_lib.training.feature`): its rows depend on where the drafted tree is rooted (`FeatureToyDraft.rooted`).

Returned tensors are cached per context: treat them as read-only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping, Sequence

import numpy as np
import torch

from ..arguments import check_int, check_real

__all__ = ["ToyLM", "ContextIndependentLM", "MarkovLM", "TabularLM", "random_markov_pair", "tempered",
           "FeatureToyDraft"]


def _as_distribution(values, vocab_size: int | None, what: str) -> torch.Tensor:
    row = torch.as_tensor(values, dtype=torch.float64).clone()
    if row.dim() != 1:
        raise ValueError(f"{what} must be a 1-D distribution, got shape {tuple(row.shape)}")
    if vocab_size is not None and row.shape[0] != vocab_size:
        raise ValueError(f"{what} has {row.shape[0]} entries but the vocabulary has {vocab_size}")
    if not bool(torch.isfinite(row).all()) or bool((row < 0).any()):
        raise ValueError(f"{what} must be finite and non-negative")
    total = float(row.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"{what} sums to {total}, not 1")
    return row / total


class ToyLM(ABC):
    """Base class: a next-token distribution for every context, with an optional EOS token.

    Subclasses implement ``_next(context)``; ``probs`` adds the EOS convention and caching.
    """

    def __init__(self, vocab_size: int, eos_token_id: int | None = None):
        vocab_size = check_int("vocab_size", vocab_size, 1)
        if eos_token_id is not None:
            eos_token_id = check_int("eos_token_id", eos_token_id)
        if eos_token_id is not None and not 0 <= eos_token_id < vocab_size:
            raise ValueError(f"eos_token_id {eos_token_id} out of range [0, {vocab_size})")
        self.vocab_size = int(vocab_size)
        self.eos_token_id = eos_token_id
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}
        self._eos_row: torch.Tensor | None = None
        if eos_token_id is not None:
            self._eos_row = torch.zeros(vocab_size, dtype=torch.float64)
            self._eos_row[eos_token_id] = 1.0

    def probs(self, context: Sequence[int]) -> torch.Tensor:
        """Next-token distribution (float64 ``[V]``) after ``context``; read-only (cached)."""
        key = tuple(int(t) for t in context)
        row = self._cache.get(key)
        if row is None:
            for t in key:
                if not 0 <= t < self.vocab_size:
                    raise ValueError(f"context token {t} out of range [0, {self.vocab_size})")
            if self._eos_row is not None and self.eos_token_id in key:
                row = self._eos_row
            else:
                row = self._next(key)
                if not isinstance(row, torch.Tensor) or tuple(row.shape) != (self.vocab_size,):
                    shape = tuple(row.shape) if isinstance(row, torch.Tensor) else type(row).__name__
                    raise ValueError(f"{type(self).__name__}: the row after {key} has shape {shape}, but "
                                     f"vocab_size is {self.vocab_size} (every row must have vocab_size entries)")
            self._cache[key] = row
        return row

    @abstractmethod
    def _next(self, context: tuple[int, ...]) -> torch.Tensor:
        """The distribution after ``context`` (EOS-free, validated tokens)."""


class ContextIndependentLM(ToyLM):
    """The same next-token distribution after every context (Block Verification Eq. 2)."""

    def __init__(self, dist, eos_token_id: int | None = None):
        row = _as_distribution(dist, None, "dist")
        super().__init__(row.shape[0], eos_token_id)
        self.dist = row

    def _next(self, context):
        return self.dist


class MarkovLM(ToyLM):
    """A bigram model: ``initial`` after the empty context, ``transition[last token]`` otherwise."""

    def __init__(self, initial, transition, eos_token_id: int | None = None):
        init = _as_distribution(initial, None, "initial")
        trans = torch.as_tensor(transition, dtype=torch.float64).clone()
        v = init.shape[0]
        if tuple(trans.shape) != (v, v):
            raise ValueError(f"transition must have shape [{v}, {v}], got {tuple(trans.shape)}")
        rows = [_as_distribution(trans[i], v, f"transition row {i}") for i in range(v)]
        super().__init__(v, eos_token_id)
        self.initial = init
        self.transition = torch.stack(rows)

    def _next(self, context):
        return self.initial if not context else self.transition[context[-1]]


class TabularLM(ToyLM):
    """A finite tree LM: ``table[context] = next-token distribution`` for the listed contexts.

    Any context not listed ends the sequence (point mass on EOS, which is therefore required).
    Used for the ASpS toy tables, where the draft and target stop at different depths.
    """

    def __init__(self, vocab_size: int, table: Mapping[tuple[int, ...], Sequence[float]],
                 eos_token_id: int):
        if eos_token_id is None:
            raise ValueError("TabularLM needs an eos_token_id for the contexts it does not list")
        super().__init__(vocab_size, eos_token_id)
        self.table = {tuple(int(t) for t in k): _as_distribution(v, vocab_size, f"table[{k}]")
                      for k, v in table.items()}

    def _next(self, context):
        row = self.table.get(context)
        return self._eos_row if row is None else row


class _TemperedLM(ToyLM):
    def __init__(self, base: ToyLM, temperature: float):
        super().__init__(base.vocab_size, base.eos_token_id)
        self.base = base
        self.temperature = float(temperature)

    def _next(self, context):
        p = self.base.probs(context)
        if self.temperature == 0.0:
            out = torch.zeros_like(p)
            out[int(torch.argmax(p))] = 1.0  # first maximal token on ties
            return out
        logp = torch.log(p) / self.temperature
        return torch.softmax(logp, dim=0)


def tempered(lm: ToyLM, temperature: float) -> ToyLM:
    """``lm`` at temperature T: ``p^(1/T)`` renormalised; T = 0 gives the one-hot argmax (first
    maximal token on ties); T = 1 returns ``lm`` itself. Zeros stay zeros for every T."""
    temperature = check_real("temperature", temperature, 0.0)
    if temperature == 1.0:
        return lm
    return _TemperedLM(lm, temperature)


def random_markov_pair(vocab_size: int, mismatch: float, seed: int, eos: bool = True,
                       concentration: float = 1.0, zero_prob: float = 0.0) -> tuple[MarkovLM, MarkovLM]:
    """A random bigram (target, draft) pair over ``vocab_size`` tokens.

    The target's initial row and transition rows are Dirichlet(``concentration``) draws. The draft
    is the mixture ``(1 - mismatch) * target + mismatch * other`` row by row, where ``other`` is an
    independent random bigram: ``mismatch = 0`` gives identical models, ``1`` unrelated ones.
    With ``eos`` the last token (``vocab_size - 1``) is EOS for both. ``zero_prob`` zeroes each
    entry with that probability (keeping at least one per row) to exercise zero-probability cases.
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    if not 0.0 <= mismatch <= 1.0:
        raise ValueError(f"mismatch must be in [0, 1], got {mismatch}")
    if not 0.0 <= zero_prob < 1.0:
        raise ValueError(f"zero_prob must be in [0, 1), got {zero_prob}")
    rng = np.random.default_rng(seed)

    def table() -> np.ndarray:
        rows = rng.dirichlet(np.full(vocab_size, float(concentration)), size=vocab_size + 1)
        if zero_prob > 0.0:
            keep = rng.random(rows.shape) >= zero_prob
            keep[np.arange(rows.shape[0]), rows.argmax(axis=1)] = True
            rows = rows * keep
        return rows / rows.sum(axis=1, keepdims=True)

    target_rows = table()
    other_rows = table()
    draft_rows = (1.0 - mismatch) * target_rows + mismatch * other_rows
    draft_rows = draft_rows / draft_rows.sum(axis=1, keepdims=True)
    eos_id = vocab_size - 1 if eos else None
    target = MarkovLM(target_rows[0], target_rows[1:], eos_id)
    draft = MarkovLM(draft_rows[0], draft_rows[1:], eos_id)
    return target, draft


class FeatureToyDraft(ToyLM):
    """The feature-draft protocol on a tiny vocabulary (`specdec_lib.models.feature`).

    A tree is rooted at the last fixed token c[-1]. The draft reads the target's "feature" before the
    root, here the target's row after c[:-1] (uniform when c has one token), and from there on only
    its own predicted features: ``h(root) = mix(f, c[-1])``, ``h(node) = mix(h(parent), token)``,
    with ``mix(h, x) = normalise(h ** sharpness * weights[x])`` for fixed positive random
    ``weights``; the draft row at a node is its h. So the same context gets different rows depending
    on where the tree is rooted: `rooted` (prefix) returns the draft as seen by a tree rooted after
    ``prefix``; ``probs(context)`` is the row at a root (``rooted(context).probs(context)``).
    The exact harness (`specdec_lib.exact`) drafts each step with ``rooted(prefix)``.
    """

    def __init__(self, target: ToyLM, seed: int = 0, sharpness: float = 0.8):
        super().__init__(target.vocab_size, target.eos_token_id)
        rng = np.random.default_rng(seed)
        self.target = target
        self.weights = torch.as_tensor(rng.gamma(1.0, 1.0, size=(target.vocab_size, target.vocab_size)) + 1e-3,
                                       dtype=torch.float64)
        self.sharpness = float(sharpness)

    def mix(self, h: torch.Tensor, token: int) -> torch.Tensor:
        row = h.clamp(min=0.0) ** self.sharpness * self.weights[int(token)]
        return row / row.sum()

    def root_feature(self, prefix: tuple[int, ...]) -> torch.Tensor:
        if len(prefix) < 2:
            return torch.full((self.vocab_size,), 1.0 / self.vocab_size, dtype=torch.float64)
        return self.target.probs(prefix[:-1])

    def rooted(self, prefix) -> ToyLM:
        return _RootedFeatureDraft(self, tuple(int(t) for t in prefix))

    def _next(self, context):
        return self.rooted(context).probs(context)


class _RootedFeatureDraft(ToyLM):
    def __init__(self, draft: FeatureToyDraft, prefix: tuple[int, ...]):
        super().__init__(draft.vocab_size, draft.eos_token_id)
        if not prefix:
            raise ValueError("a tree needs a root: the prefix is empty")
        self.draft, self.prefix = draft, prefix

    def _next(self, context):
        n = len(self.prefix)
        if context[:n] != self.prefix:
            raise ValueError(f"context {context} does not extend the tree's root prefix {self.prefix}")
        h = self.draft.mix(self.draft.root_feature(self.prefix), self.prefix[-1])
        for token in context[n:]:
            h = self.draft.mix(h, token)
        return h
