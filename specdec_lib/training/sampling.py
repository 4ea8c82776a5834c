"""Batched target sampling for the draft training: the target samples one continuation per prompt at a
temperature, the prompts left-padded in one batch.

* `sample_batched`: token by token with a KV cache, every draw from one CPU generator (reproducible); a
  `Recorder` keeps what a draft trains on at each position (top-k rows, features);
* `generate_continuations`: HF ``generate`` (fast on an accelerator), returned right-padded as `Rollouts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from ..models.kv_cache import cache_of, with_cache

__all__ = ["LeftPadded", "left_padded", "CachedForward", "Recorder", "sample_batched", "Rollouts",
           "generate_continuations"]


@dataclass
class LeftPadded:
    """Prompts left-padded to one width: ``ids``, ``mask`` and ``positions`` [B, W] (positions count the real
    tokens, 0 on the padding), ``lengths`` the prompts' own lengths."""

    ids: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor
    lengths: list[int]

    @property
    def width(self) -> int:
        return int(self.ids.shape[1])


def left_padded(prompts: Sequence[Sequence[int]], pad_token_id: int = 0) -> LeftPadded:
    """``prompts`` (non-empty token lists) as one left-padded batch on the CPU."""
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[b, width - len(p):] = 1
    return LeftPadded(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), lengths)


class CachedForward:
    """Forwards of ``module`` (an HF causal LM or its decoder) that keep its KV cache from call to call."""

    def __init__(self, module):
        self.module, self.cache = module, None
        self.device = module.get_input_embeddings().weight.device

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor):
        handed = {} if self.cache is None else with_cache(self.module, self.cache)
        out = self.module(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                          position_ids=positions.to(self.device), use_cache=True, **handed)
        self.cache = cache_of(out)
        return out


class Recorder(Protocol):
    """What a stack keeps of the target's forwards in `sample_batched`."""

    def prompt(self, out, batch: LeftPadded) -> torch.Tensor:
        """Keep the prompts' rows of the forward ``out``; return the next-token log-probs [B, V] (CPU)."""

    def step(self, out, alive: Sequence[bool]) -> torch.Tensor:
        """Keep the new position's row of each ``alive`` sequence; return the next-token log-probs [B, V]."""


@torch.no_grad()
def sample_batched(module, recorder: Recorder, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                   generator: torch.Generator, eos_token_id: int | None = None) -> list[list[int]]:
    """The tokens the target samples after each prompt (non-empty token lists): ``module`` forwards the
    left-padded prompts, then one token per step with its KV cache; each step draws every sequence's next
    token from the log-probs ``recorder`` returns, with ``generator`` (CPU) the only randomness. A sequence
    stops at EOS (kept as its last token); sampling stops after ``max_new_tokens`` or when all have."""
    batch = left_padded(prompts)
    forward = CachedForward(module)
    last = recorder.prompt(forward(batch.ids, batch.mask, batch.positions), batch)
    size = len(prompts)
    generated: list[list[int]] = [[] for _ in range(size)]
    alive = [True] * size
    mask, step_pos = batch.mask, batch.positions[:, -1:].clone()
    for step in range(max_new_tokens):
        nxt = torch.multinomial(last.exp(), 1, generator=generator).squeeze(1)
        for b in range(size):
            if alive[b]:
                generated[b].append(int(nxt[b]))
                if eos_token_id is not None and int(nxt[b]) == eos_token_id:
                    alive[b] = False
        if step == max_new_tokens - 1 or not any(alive):
            break
        mask = torch.cat([mask, torch.ones(size, 1, dtype=torch.long)], dim=1)
        step_pos = step_pos + 1
        last = recorder.step(forward(nxt.view(size, 1), mask, step_pos), alive)
    return generated


@dataclass
class Rollouts:
    """Right-padded sequences ``ids`` [B, L] (prompt then continuation), their ``lengths`` and
    ``prompt_lens`` [B], and the target's features ``features`` [B, L, H] (row j: after ids[: j + 1])."""

    ids: torch.Tensor
    lengths: torch.Tensor
    prompt_lens: torch.Tensor
    features: torch.Tensor | None = None

    def rows(self, index: torch.Tensor) -> "Rollouts":
        """The sequences ``index``, trimmed to their longest."""
        width = int(self.lengths[index].max())
        feats = None if self.features is None else self.features[index, :width]
        return Rollouts(self.ids[index, :width], self.lengths[index], self.prompt_lens[index], feats)


@torch.no_grad()
def generate_continuations(model, prompts: Sequence[Sequence[int]], new_tokens: int, eos_token_id: int,
                           pad_token_id: int, seed: int, temperature: float = 1.0) -> Rollouts:
    """The target (an HF causal LM) samples one continuation per prompt with ``generate`` (no top-k, no
    top-p; ``torch.manual_seed(seed)`` first), cut after the first EOS; returned right-padded with
    ``pad_token_id``, on the model's device."""
    # lazy: transformers takes seconds to import; only model loading needs it
    from transformers import GenerationConfig

    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be >= 1, got {new_tokens}")
    device = model.get_input_embeddings().weight.device
    batch = left_padded(prompts, pad_token_id)
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                              max_new_tokens=new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    torch.manual_seed(seed)
    out = model.generate(input_ids=batch.ids.to(device), attention_mask=batch.mask.to(device),
                         generation_config=config)
    continuation = out[:, batch.width:].cpu().tolist()
    seqs = []
    for p, c in zip(prompts, continuation):
        if eos_token_id in c:
            c = c[: c.index(eos_token_id) + 1]
        seqs.append(list(p) + c)
    length = max(len(s) for s in seqs)
    padded = torch.full((len(seqs), length), pad_token_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        padded[b, : len(s)] = torch.as_tensor(s)
    return Rollouts(padded.to(device), torch.tensor([len(s) for s in seqs], device=device),
                    torch.tensor([len(p) for p in prompts], device=device))
