"""Target-sampled text for the feature-conditioned draft: the target samples continuations and, at every
position j, we keep the token, the target's feature f_j (its final hidden state after the last norm, the
vector the tied LM head multiplies) and its top-k next-token log-probabilities (`sample_with_features`).

One batched pass yields all three (the features and rows come from the forward that samples the next
token), so no second target forward is needed. `save_feature_samples` / `load_feature_samples` keep them
as one safetensors file (the held-out set of `evaluate`); `training_prompts` is what `online` samples from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

from ...data import load_prompts
from ..prompts import seed_instructions
from ..sampling import sample_batched

__all__ = ["FeatureSample", "sample_with_features", "save_feature_samples", "load_feature_samples",
           "training_prompts"]


@dataclass
class FeatureSample:
    """One sequence: ``tokens`` [n]; ``features`` [n - 1, H] (row j: the target's feature after
    ``tokens[: j + 1]``; the last token's feature is never needed);
    ``topk_idx`` / ``topk_logp`` [n - 1, k]: row j is the target's next-token distribution after
    ``tokens[: j + 1]``; ``prompt_len`` prompt tokens (rows from ``prompt_len - 1`` on belong to the
    sampled continuation)."""

    tokens: torch.Tensor
    prompt_len: int
    features: torch.Tensor
    topk_idx: torch.Tensor
    topk_logp: torch.Tensor


class _FeatureRows:
    """`sampling.Recorder` of the target's features (bfloat16) and top-``topk`` next-token log-probs at
    ``temperature`` (int32 indices, float16 values) at every position; ``model`` an HF Llama-style causal LM."""

    def __init__(self, model, topk: int, temperature: float):
        self.model, self.topk, self.temperature = model, topk, temperature

    def _head_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.model.lm_head(hidden).float() / self.temperature, dim=-1)

    def prompt(self, out, batch) -> torch.Tensor:
        hidden, width = out.last_hidden_state, batch.width
        self.feats = [[hidden[b, width - n:].to(torch.bfloat16).cpu()] for b, n in enumerate(batch.lengths)]
        self.idx, self.logp = [], []
        for b, n in enumerate(batch.lengths):
            logp = self._head_rows(hidden[b, width - n:]).cpu()
            vals, idx = logp.topk(self.topk, dim=-1)
            self.idx.append([idx.to(torch.int32)])
            self.logp.append([vals.half()])
            if b == 0:
                last = torch.empty(len(batch.lengths), logp.shape[-1])
            last[b] = logp[-1]
        return last

    def step(self, out, alive) -> torch.Tensor:
        h = out.last_hidden_state[:, -1]
        last = self._head_rows(h).cpu()
        vals, idx = last.topk(self.topk, dim=-1)
        for b, live in enumerate(alive):
            if live:
                self.feats[b].append(h[b: b + 1].to(torch.bfloat16).cpu())
                self.idx[b].append(idx[b: b + 1].to(torch.int32))
                self.logp[b].append(vals[b: b + 1].half())
        return last


@torch.no_grad()
def sample_with_features(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, topk: int,
                         generator: torch.Generator, eos_token_id: int | None = None,
                         temperature: float = 1.0) -> list[FeatureSample]:
    """The target (an HF Llama-style causal LM with ``.model`` and ``.lm_head``) samples one
    continuation per prompt at ``temperature`` (`sampling.sample_batched` over its decoder); returns
    `FeatureSample` s. Sampling stops at EOS (kept) or after ``max_new_tokens``."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    if max_new_tokens < 1 or topk < 1:
        raise ValueError(f"max_new_tokens and topk must be >= 1, got {max_new_tokens}, {topk}")
    rows = _FeatureRows(model, topk, temperature)
    generated = sample_batched(model.model, rows, prompts, max_new_tokens, generator, eos_token_id)
    samples = []
    for b, p in enumerate(prompts):
        tokens = torch.as_tensor(list(p) + generated[b], dtype=torch.long)
        n = len(tokens)
        samples.append(FeatureSample(tokens, len(p), torch.cat(rows.feats[b])[: n - 1],
                                     torch.cat(rows.idx[b])[: n - 1], torch.cat(rows.logp[b])[: n - 1]))
    return samples


def save_feature_samples(samples: Sequence[FeatureSample], path: Path | str) -> None:
    """One safetensors file (flat arrays plus lengths); written atomically."""
    if not samples:
        raise ValueError("no samples to save")
    tensors = {
        "tokens": torch.cat([s.tokens for s in samples]).to(torch.int32),
        "lengths": torch.tensor([len(s.tokens) for s in samples], dtype=torch.int64),
        "prompt_lens": torch.tensor([s.prompt_len for s in samples], dtype=torch.int64),
        "features": torch.cat([s.features for s in samples]).to(torch.bfloat16),
        "topk_idx": torch.cat([s.topk_idx for s in samples]).to(torch.int32),
        "topk_logp": torch.cat([s.topk_logp for s in samples]).to(torch.float16),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    os.replace(tmp, path)


def load_feature_samples(path: Path | str) -> list[FeatureSample]:
    """Inverse of `save_feature_samples`."""
    t = load_file(str(path))
    out, tok_at, row_at = [], 0, 0
    for n, plen in zip(t["lengths"].tolist(), t["prompt_lens"].tolist()):
        out.append(FeatureSample(t["tokens"][tok_at: tok_at + n].long(), int(plen),
                                 t["features"][row_at: row_at + n - 1],
                                 t["topk_idx"][row_at: row_at + n - 1].long(),
                                 t["topk_logp"][row_at: row_at + n - 1]))
        tok_at += n
        row_at += n - 1
    return out


def training_prompts(seeds: int = 8000, seed: int = 0) -> list[str]:
    """The project's training prompts first, then ``seeds`` self-made instructions
    (`prompts.seed_instructions`)."""
    return [p.text for p in load_prompts("train")] + seed_instructions(seeds, seed=seed)
