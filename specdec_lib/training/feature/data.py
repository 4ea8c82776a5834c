"""Training text for the feature-conditioned draft: the target samples continuations and, at every
position j, we keep the token, the target's feature f_j (its final hidden state after the last norm,
the vector the tied LM head multiplies) and its top-k next-token log-probabilities.

One batched pass yields all three (the features and rows come from the forward that samples the next
token), so no second target forward is needed. Shards are safetensors files; `generate_shards` is
resumable (it records the next prompt index) and stops after ``minutes``.

Command line::

    python -m specdec_lib.training.feature.data --minutes 40 --run-dir distill_runs/eagle
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

from ...data import load_prompts
from ..distill import seed_instructions
from ...models import load_model
from ...models.kv_cache import cache_of, with_cache

__all__ = ["FeatureSample", "sample_with_features", "save_feature_samples", "load_feature_samples",
           "generate_shards", "training_prompts"]


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


def _head_rows(model, hidden: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.log_softmax(model.lm_head(hidden).float() / temperature, dim=-1)


@torch.no_grad()
def sample_with_features(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, topk: int,
                         generator: torch.Generator, eos_token_id: int | None = None,
                         temperature: float = 1.0) -> list[FeatureSample]:
    """The target (an HF Llama-style causal LM with ``.model`` and ``.lm_head``) samples one
    continuation per prompt at ``temperature`` (batched, left-padded, KV cache); returns
    `FeatureSample` s. Sampling stops at EOS (kept) or after ``max_new_tokens``."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    if max_new_tokens < 1 or topk < 1:
        raise ValueError(f"max_new_tokens and topk must be >= 1, got {max_new_tokens}, {topk}")
    device = model.get_input_embeddings().weight.device
    lens = [len(p) for p in prompts]
    width, batch = max(lens), len(prompts)
    ids = torch.zeros(batch, width, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[b, width - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model.model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                      use_cache=True)
    cache = cache_of(out)
    hidden = out.last_hidden_state
    feats = [[hidden[b, width - n:].to(torch.bfloat16).cpu()] for b, n in enumerate(lens)]
    rows_idx, rows_logp = [], []
    for b, n in enumerate(lens):
        logp = _head_rows(model, hidden[b, width - n:], temperature).cpu()
        vals, idx = logp.topk(topk, dim=-1)
        rows_idx.append([idx.to(torch.int32)])
        rows_logp.append([vals.half()])
        if b == 0:
            last = torch.empty(batch, logp.shape[-1])
        last[b] = logp[-1]
    del out, hidden
    generated: list[list[int]] = [[] for _ in range(batch)]
    alive = [True] * batch
    step_pos = pos[:, -1:].clone()
    for step in range(max_new_tokens):
        nxt = torch.multinomial(last.exp(), 1, generator=generator).squeeze(1)
        for b in range(batch):
            if alive[b]:
                generated[b].append(int(nxt[b]))
                if eos_token_id is not None and int(nxt[b]) == eos_token_id:
                    alive[b] = False
        if step == max_new_tokens - 1 or not any(alive):
            break
        mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], dim=1)
        step_pos = step_pos + 1
        out = model.model(input_ids=nxt.view(batch, 1).to(device), attention_mask=mask.to(device),
                          position_ids=step_pos.to(device), use_cache=True, **with_cache(model.model, cache))
        cache = cache_of(out)
        h = out.last_hidden_state[:, -1]
        last = _head_rows(model, h, temperature).cpu()
        vals, idx = last.topk(topk, dim=-1)
        for b in range(batch):
            if alive[b]:
                feats[b].append(h[b: b + 1].to(torch.bfloat16).cpu())
                rows_idx[b].append(idx[b: b + 1].to(torch.int32))
                rows_logp[b].append(vals[b: b + 1].half())
    samples = []
    for b, p in enumerate(prompts):
        tokens = torch.as_tensor(list(p) + generated[b], dtype=torch.long)
        n = len(tokens)
        samples.append(FeatureSample(tokens, len(p), torch.cat(feats[b])[: n - 1],
                                     torch.cat(rows_idx[b])[: n - 1], torch.cat(rows_logp[b])[: n - 1]))
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
    (`distill.seed_instructions`)."""
    return [p.text for p in load_prompts("train")] + seed_instructions(seeds, seed=seed)


def generate_shards(lm, prompts: Sequence[str], run_dir: Path | str, minutes: float, batch: int = 32,
                    new_tokens: int = 128, topk: int = 64, temperature: float = 1.0, seed: int = 0,
                    log=print) -> dict:
    """Sample ``batch`` prompts at a time into ``<run_dir>/data/shard_*.safetensors`` until ``minutes``
    pass or the prompts run out; resumes from ``<run_dir>/data/progress.json``."""
    run_dir = Path(run_dir)
    data_dir = run_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    progress_path = data_dir / "progress.json"
    state = json.loads(progress_path.read_text()) if progress_path.is_file() else \
        {"next_prompt": 0, "shards": 0, "tokens": 0, "minutes": 0.0}
    deadline = time.time() + 60.0 * minutes
    while time.time() < deadline and state["next_prompt"] < len(prompts):
        t0 = time.time()
        texts = prompts[state["next_prompt"]: state["next_prompt"] + batch]
        ids = [lm.encode(t).tolist() for t in texts]
        gen = torch.Generator().manual_seed(seed * 1_000_003 + state["next_prompt"])
        samples = sample_with_features(lm.model, ids, new_tokens, topk, gen, lm.eos_token_id, temperature)
        save_feature_samples(samples, data_dir / f"shard_{state['shards']:05d}.safetensors")
        new = sum(len(s.tokens) - s.prompt_len for s in samples)
        state.update(next_prompt=state["next_prompt"] + len(texts), shards=state["shards"] + 1,
                     tokens=state["tokens"] + new, minutes=state["minutes"] + (time.time() - t0) / 60)
        tmp = progress_path.with_name("progress.json.tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, progress_path)
        log(f"shard {state['shards']}: {new} new tokens in {time.time() - t0:.1f}s "
            f"({new / (time.time() - t0):.0f} tok/s); total {state['tokens']} tokens, "
            f"{state['minutes']:.1f} min")
    return state


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--run-dir", default="distill_runs/eagle")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--topk", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=8000)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    lm = load_model("smollm2-135m-instruct", dtype=a.dtype)
    state = generate_shards(lm, training_prompts(a.seeds), a.run_dir, a.minutes, a.batch, a.new_tokens, a.topk)
    print(json.dumps(state))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
