"""Target-sampled training text: the target samples continuations and keeps its top-k next-token
log-probabilities at every position (`sample_continuations` -> `Sample`), stored as safetensors shards
under ``<run_dir>/data/`` (`save_samples` / `load_samples`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

from ...models.kv_cache import cache_of, with_cache

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_RUN_DIR = REPO_ROOT / "distill_runs" / "smollm2-135m-draft"


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token sequences (the chat template's system part)."""
    if not sequences:
        return 0
    first = list(sequences[0])
    n = len(first)
    for seq in sequences[1:]:
        seq = list(seq)
        m = 0
        while m < min(n, len(seq)) and seq[m] == first[m]:
            m += 1
        n = m
    return n


@dataclass
class Sample:
    """One training (or evaluation) sequence.

    ``tokens``: LongTensor [n]; rows r = 0 .. n-2-start hold the target's next-token distribution after
    ``tokens[: start + r + 1]``: ``topk_idx`` (LongTensor [R, k]) and ``topk_logp`` (float [R, k]), or
    ``topk_idx = None`` and ``topk_logp`` [R, V] = the full log-distribution in vocabulary order.
    ``prompt_len`` is the number of prompt tokens (rows from ``prompt_len - 1 - start`` on belong to the
    sampled continuation)."""

    tokens: torch.Tensor
    start: int
    prompt_len: int
    topk_idx: torch.Tensor | None
    topk_logp: torch.Tensor

    @property
    def num_rows(self) -> int:
        return int(self.topk_logp.shape[0])


@torch.no_grad()
def sample_continuations(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, topk: int,
                         generator: torch.Generator, eos_token_id: int | None = None, start: int = 0,
                         temperature: float = 1.0) -> list[Sample]:
    """The target samples one continuation per prompt (batched, left-padded, KV cache) at
    ``temperature``; returns `Sample` s whose rows are the target's top-``topk`` next-token log-probs at
    every position from ``start`` (clipped to the prompt) to the second-to-last token. Sampling stops at
    EOS (kept as the last token) or after ``max_new_tokens``. ``generator`` (CPU) is the only randomness.
    With ``topk >= vocab`` the rows are the full distributions."""
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    device = model.get_input_embeddings().weight.device
    lens = [len(p) for p in prompts]
    width = max(lens)
    batch = len(prompts)
    ids = torch.zeros(batch, width, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[b, width - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                use_cache=True)
    cache = cache_of(out)
    logp = torch.log_softmax(out.logits.float() / temperature, dim=-1).cpu()
    vocab = logp.shape[-1]
    k = min(topk, vocab)
    full = k >= vocab

    def pick(rows):  # full rows in vocabulary order (float16), else the top-k
        if full:
            return None, rows.half()
        vals, idx = rows.topk(k, dim=-1)
        return idx, vals

    starts = [min(start, n - 1) for n in lens]
    rows_idx: list[list[torch.Tensor]] = []
    rows_logp: list[list[torch.Tensor]] = []
    for b, n in enumerate(lens):
        idx, vals = pick(logp[b, width - n + starts[b]:])
        rows_idx.append([idx])
        rows_logp.append([vals])
    last = logp[:, -1]
    del out, logp
    generated: list[list[int]] = [[] for _ in range(batch)]
    alive = torch.ones(batch, dtype=torch.bool)
    step_pos = pos[:, -1:].clone()
    for step in range(max_new_tokens):
        nxt = torch.multinomial(last.exp(), 1, generator=generator).squeeze(1)
        for b in range(batch):
            if alive[b]:
                generated[b].append(int(nxt[b]))
                if eos_token_id is not None and int(nxt[b]) == eos_token_id:
                    alive[b] = False
        if step == max_new_tokens - 1 or not bool(alive.any()):
            break
        mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], dim=1)
        step_pos = step_pos + 1
        out = model(input_ids=nxt.view(batch, 1).to(device), attention_mask=mask.to(device),
                    position_ids=step_pos.to(device), use_cache=True, **with_cache(model, cache))
        cache = cache_of(out)
        last = torch.log_softmax(out.logits[:, -1].float() / temperature, dim=-1).cpu()
        idx, vals = pick(last)
        for b in range(batch):
            if alive[b]:
                rows_idx[b].append(None if full else idx[b:b + 1])
                rows_logp[b].append(vals[b:b + 1])
    samples = []
    for b, p in enumerate(prompts):
        tokens = torch.as_tensor(list(p) + generated[b], dtype=torch.long)
        rows = len(tokens) - 1 - starts[b]
        idx = None if full else torch.cat(rows_idx[b])[:rows].long()
        vals = torch.cat(rows_logp[b])[:rows]
        samples.append(Sample(tokens, starts[b], len(p), idx, vals))
    return samples


def save_samples(samples: Sequence[Sample], path: Path | str, dtype: torch.dtype = torch.float16) -> None:
    """Write samples as one safetensors file (flat token / row arrays plus offsets); atomic."""
    if not samples:
        raise ValueError("no samples to save")
    full = samples[0].topk_idx is None
    if any((s.topk_idx is None) != full for s in samples):
        raise ValueError("cannot mix full-distribution and top-k samples in one file")
    tensors = {
        "tokens": torch.cat([s.tokens for s in samples]).to(torch.int32),
        "lengths": torch.tensor([len(s.tokens) for s in samples], dtype=torch.int64),
        "starts": torch.tensor([s.start for s in samples], dtype=torch.int64),
        "prompt_lens": torch.tensor([s.prompt_len for s in samples], dtype=torch.int64),
        "topk_logp": torch.cat([s.topk_logp for s in samples]).to(dtype),
    }
    if not full:
        tensors["topk_idx"] = torch.cat([s.topk_idx for s in samples]).to(torch.int32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    os.replace(tmp, path)


def load_samples(path: Path | str) -> list[Sample]:
    """Inverse of `save_samples` (log-probs keep their stored dtype; the loss casts to float32)."""
    t = load_file(str(path))
    samples, tok_at, row_at = [], 0, 0
    for n, start, plen in zip(t["lengths"].tolist(), t["starts"].tolist(), t["prompt_lens"].tolist()):
        rows = n - 1 - start
        idx = t["topk_idx"][row_at:row_at + rows].long() if "topk_idx" in t else None
        samples.append(Sample(t["tokens"][tok_at:tok_at + n].long(), start, plen, idx,
                              t["topk_logp"][row_at:row_at + rows]))
        tok_at += n
        row_at += rows
    return samples


def _shards(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "data").glob("train_*.safetensors"))
