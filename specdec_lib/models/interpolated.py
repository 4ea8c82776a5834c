"""A SYNTHETIC draft family between a real draft and its target, for tokens-per-step experiments only.

Drafts of any acceptance at the same contexts, by geometric interpolation of the draft q and the target p
(their distributions at temperature 1, log-softmax of their logits):

    log q_lam(x | c) = (1 - lam) * log q(x | c) + lam * log p(x | c) + const

returned as "logits", so decoding at temperature T samples ``q_lam,T ∝ q_T^(1 - lam) * p_T^lam``, the same
mixture of the tempered rows (before the target-only top-p). `mix_rows` applies it to already-tempered
rows, which is how `regime.tune_lambda` finds lam without a model call. For lam < 1 the draft's zeros stay
zeros; lam = 1 is the target. Each drafted level runs the draft AND a second target session: NEVER use
these drafts for wall-clock figures (their tokens per step are exact, their timings meaningless).

* `InterpolatedDraft` (hf): usable as the ``draft`` of `decoding.speculative_generate`,
  `experiments.collect_trees` / `matched_rows` (in a `experiments.Pair`).
* `InterpolatedToyLM` (toys): the same mixture of two `synthetic.ToyLM`.

Why, the zeros and supports, tuning and cost: docs/papers/regime_sweep.md, "The family"; docs/DRAFTS.md,
"The synthetic family".
"""

from __future__ import annotations

from typing import Sequence

import torch

from .synthetic import ToyLM

__all__ = ["mix_log_probs", "mix_rows", "InterpolatedDraft", "InterpolatedSession", "InterpolatedToyLM",
           "synthetic_name"]


def _check_lam(lam: float) -> float:
    lam = float(lam)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    return lam


def synthetic_name(lam: float) -> str:
    """The name of the synthetic draft of weight ``lam`` (``synthetic(lam=0.512)``)."""
    return f"synthetic(lam={float(lam):.3f})"


def mix_log_probs(draft_logp: torch.Tensor, target_logp: torch.Tensor, lam: float) -> torch.Tensor:
    """``(1 - lam) * draft_logp + lam * target_logp`` (float64, log-probabilities up to a constant per row).

    Inputs are log-probabilities (``-inf`` for zeros). lam = 0 returns the draft's, lam = 1 the target's,
    exactly; for 0 < lam < 1 a ``-inf`` of either stays ``-inf`` (the draft's zeros stay zeros). Rows left
    all ``-inf`` (supports that do not meet) are replaced by the draft's row.
    """
    lam = _check_lam(lam)
    d = draft_logp.to(torch.float64)
    t = target_logp.to(device=d.device, dtype=torch.float64)
    if d.shape != t.shape:
        raise ValueError(f"draft and target rows differ in shape: {tuple(d.shape)} vs {tuple(t.shape)}")
    if lam == 0.0:
        return d.clone()
    if lam == 1.0:
        return t.clone()
    out = (1.0 - lam) * d + lam * t  # -inf + finite = -inf; never inf - inf (both terms are <= 0 or -inf)
    dead = torch.isneginf(out).all(dim=-1)
    if bool(dead.any()):
        out[dead] = d[dead]
    return out


def mix_rows(target_rows: torch.Tensor, draft_rows: torch.Tensor, lam: float) -> torch.Tensor:
    """The synthetic draft's rows ``q_lam ∝ q^(1 - lam) p^lam`` from matched distributions (float64 [..., V]).

    ``target_rows`` (p) and ``draft_rows`` (q) are distributions at the sampling temperature (e.g. from
    `experiments.matched_rows`, which requires top_p = 1 here: the mixture uses the target before top-p).
    Same zero conventions as `mix_log_probs`."""
    p = torch.as_tensor(target_rows, dtype=torch.float64)
    q = torch.as_tensor(draft_rows, dtype=torch.float64)
    return torch.softmax(mix_log_probs(torch.log(q), torch.log(p), lam), dim=-1)


class InterpolatedSession:
    """A draft session of `InterpolatedDraft`: a draft `KVSession` and a second target `KVSession`, both
    fed the same trees; ``tree_logits`` returns the mixed log-probabilities (`mix_log_probs`)."""

    def __init__(self, owner: "InterpolatedDraft", prompt_ids):
        self.owner = owner
        self.draft_session = owner.draft.session(prompt_ids)
        self.target_session = owner.target.session(prompt_ids)

    @property
    def fixed(self) -> list[int]:
        return self.draft_session.fixed

    def tree_logits(self, tokens, parents, nodes=None) -> torch.Tensor:
        """Mixed log-probabilities ``[len(nodes), V]`` (float64) after path root..node for each node."""
        d = self.draft_session.tree_logits(tokens, parents, nodes)
        t = self.target_session.tree_logits(tokens, parents, nodes)
        return self.owner.mix(d, t)

    def commit(self, path: Sequence[int], extra_token: int | None, tokens=None, parents=None) -> list[int]:
        self.target_session.commit(path, extra_token, tokens, parents)
        return self.draft_session.commit(path, extra_token, tokens, parents)

    def next_logits(self) -> torch.Tensor:
        return self.tree_logits([self.fixed[-1]], [-1])[0]

    def append(self, token: int) -> None:
        self.commit([], token)


class InterpolatedDraft:
    """SYNTHETIC draft ``q_lam ∝ q^(1 - lam) p^lam`` of a target (`LanguageModel`) and a draft.

    Quacks like a `models.hf.LanguageModel` for decoding: ``name``, ``vocab_size``, ``device``, ``dtype``,
    ``max_context``, ``tokenizer``, ``model`` (the draft's), ``eos_token_id``, ``session(prompt)``,
    ``logits(ids)``, ``encode`` / ``decode``. Its logits are the mixed log-probabilities at temperature 1
    (module docstring); at sampling temperature T the draft drawn from is ``q_T^(1 - lam) p_T^lam``
    renormalised (q_T, p_T: the tempered draft and target, p before top-p). Every draft level costs a
    target forward too: tokens per step only, never wall clock.
    """

    synthetic = True

    def __init__(self, target, draft, lam: float):
        self.lam = _check_lam(lam)
        if int(target.vocab_size) != int(draft.vocab_size):
            raise ValueError(f"target {target.name!r} and draft {draft.name!r} have different vocabularies "
                             f"({target.vocab_size} vs {draft.vocab_size})")
        if hasattr(draft, "paired_sessions"):
            raise ValueError(f"draft {draft.name!r} reads the target's features (paired sessions); "
                             "interpolate an independent draft")
        self.target, self.draft = target, draft
        self.name = synthetic_name(self.lam)
        self.vocab_size = int(draft.vocab_size)
        self.device = draft.device
        self.max_context = min(int(target.max_context), int(draft.max_context))
        self.tokenizer = getattr(target, "tokenizer", None)
        self.model = draft.model

    def __repr__(self) -> str:
        return f"InterpolatedDraft({self.name}: {self.draft.name} -> {self.target.name}; tokens/step only)"

    @property
    def dtype(self) -> torch.dtype:
        return self.draft.dtype

    @property
    def eos_token_id(self) -> int | None:
        return self.target.eos_token_id

    def encode(self, text: str, chat: bool = True) -> torch.Tensor:
        return self.target.encode(text, chat=chat)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.target.decode(ids, skip_special_tokens=skip_special_tokens)

    def mix(self, draft_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
        """Mixed log-probabilities from the two models' raw logits (log-softmax at temperature 1 each)."""
        d = torch.log_softmax(draft_logits.to(torch.float64), dim=-1)
        t = torch.log_softmax(target_logits.to(device=d.device, dtype=torch.float64), dim=-1)
        return mix_log_probs(d, t, self.lam)

    def session(self, prompt_ids) -> InterpolatedSession:
        return InterpolatedSession(self, prompt_ids)

    @torch.no_grad()
    def logits(self, ids) -> torch.Tensor:
        """Mixed log-probabilities [n, V] after each prefix of ``ids`` (plain causal forwards of both)."""
        return self.mix(self.draft.logits(ids), self.target.logits(ids))


class InterpolatedToyLM(ToyLM):
    """The synthetic draft of two toy LMs: ``probs(c) ∝ draft(c)^(1 - lam) * target(c)^lam`` (`mix_rows`).

    Tempering commutes with the mixture (``tempered(mix) = mix of the tempered``), so `experiments`'
    toy code, which tempers the draft, draws from the module docstring's q_lam,T."""

    def __init__(self, target: ToyLM, draft: ToyLM, lam: float):
        if target.vocab_size != draft.vocab_size:
            raise ValueError(f"vocabularies differ: {target.vocab_size} vs {draft.vocab_size}")
        if target.eos_token_id != draft.eos_token_id:
            raise ValueError("target and draft must share the EOS token")
        super().__init__(target.vocab_size, target.eos_token_id)
        self.lam = _check_lam(lam)
        self.target, self.draft = target, draft
        self.name = synthetic_name(self.lam)

    def _next(self, context):
        return mix_rows(self.target.probs(context), self.draft.probs(context), self.lam)
