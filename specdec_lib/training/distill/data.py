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

from ..sampling import sample_batched

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


class _TopkRows:
    """`sampling.Recorder` of the target's top-``topk`` next-token log-probs at temperature ``temperature``
    (full rows in vocabulary order, float16, when ``topk`` covers the vocabulary), from position ``start``
    on (clipped to each prompt)."""

    def __init__(self, topk: int, temperature: float, start: int):
        self.topk, self.temperature, self.start = topk, temperature, start

    def _pick(self, rows: torch.Tensor):
        if self.full:
            return None, rows.half()
        vals, idx = rows.topk(self.k, dim=-1)
        return idx, vals

    def prompt(self, out, batch) -> torch.Tensor:
        logp = torch.log_softmax(out.logits.float() / self.temperature, dim=-1).cpu()
        vocab = logp.shape[-1]
        self.k = min(self.topk, vocab)
        self.full = self.k >= vocab
        self.starts = [min(self.start, n - 1) for n in batch.lengths]
        self.idx, self.logp = [], []
        for b, n in enumerate(batch.lengths):
            idx, vals = self._pick(logp[b, batch.width - n + self.starts[b]:])
            self.idx.append([idx])
            self.logp.append([vals])
        return logp[:, -1]

    def step(self, out, alive) -> torch.Tensor:
        last = torch.log_softmax(out.logits[:, -1].float() / self.temperature, dim=-1).cpu()
        idx, vals = self._pick(last)
        for b, live in enumerate(alive):
            if live:
                self.idx[b].append(None if self.full else idx[b:b + 1])
                self.logp[b].append(vals[b:b + 1])
        return last


@torch.no_grad()
def sample_continuations(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, topk: int,
                         generator: torch.Generator, eos_token_id: int | None = None, start: int = 0,
                         temperature: float = 1.0) -> list[Sample]:
    """The target samples one continuation per prompt at ``temperature`` (`sampling.sample_batched`);
    returns `Sample` s whose rows are the target's top-``topk`` next-token log-probs at every position from
    ``start`` (clipped to the prompt) to the second-to-last token. Sampling stops at EOS (kept as the last
    token) or after ``max_new_tokens``. ``generator`` (CPU) is the only randomness. With
    ``topk >= vocab`` the rows are the full distributions."""
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    rows = _TopkRows(topk, temperature, start)
    generated = sample_batched(model, rows, prompts, max_new_tokens, generator, eos_token_id)
    samples = []
    for b, p in enumerate(prompts):
        tokens = torch.as_tensor(list(p) + generated[b], dtype=torch.long)
        n_rows = len(tokens) - 1 - rows.starts[b]
        idx = None if rows.full else torch.cat(rows.idx[b])[:n_rows].long()
        vals = torch.cat(rows.logp[b])[:n_rows]
        samples.append(Sample(tokens, rows.starts[b], len(p), idx, vals))
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
