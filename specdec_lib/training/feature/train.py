"""Training the feature draft for depth-k acceptance, and measuring acceptance by depth.

**Levels (training-time test, as in EAGLE-3).** A packed batch of sequences (tokens x, target
features f) is drafted at every position at once, to depth ``D``:

* level 1 = the chain itself: node i reads (x_i, f_{i-1}), the target's true feature;
* level m >= 2: node (i, m) is the (m)-th token of a chain drafted from root r = i - m + 1: it reads
  (x_i, h^{(m-1)}_{i-1}), the draft's own output one level up at the previous position, and attends
  to the true prefix up to r and to the nodes (r + 1, 2) ... (i, m) of its own chain.

This is exactly what the draft sees at depth m of a drafted chain whose first m - 1 tokens are the
target's sampled tokens, so q at level m measures depth-m acceptance (`acceptance_by_depth`) and a
loss summed over levels trains for it. Level m is one forward over the chain plus levels 2..m with
the attention mask `level_mask` (all earlier levels recomputed: D(D+1)/2 chain-lengths of work).

**Loss.** Forward KL(p || q) at T = 1 between the target's top-k rows and the draft, coarsened to the
stored tokens the draft's head can produce plus one bucket for the rest (`subset_topk_kl`; with a
sub-vocabulary head the tokens outside it fall in the bucket).

Command line (resumable; ``--minutes`` per call)::

    python -m specdec_lib.training.feature.train --minutes 60 --run-dir distill_runs/eagle
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file

from ...models import load_model
from ...models.offline import DRAFT_DIR
from ...models.subset_head import use_subset_head
from .data import FeatureSample, load_feature_samples
from ...models.feature_net import FeatureDraft, build_feature_draft

__all__ = ["Packed", "pack", "level_mask", "level_mask_of", "levels_forward", "draft_levels", "subset_topk_kl",
           "train_loss", "acceptance_by_depth", "mean_acceptance", "main"]


class Packed:
    """Sequences laid end to end: ``ids`` [N], ``seq`` [N] (sequence number), ``pos`` [N] (position in
    its sequence), ``chain_features`` [N, H] (f_{i-1}; zero at a sequence start), ``row`` [N] (index of
    the target row predicting x_{i+1}, -1 at a sequence's last token), ``continuation`` [N] (bool:
    that row belongs to the sampled continuation)."""

    def __init__(self, samples: Sequence[FeatureSample]):
        ids, seq, pos, feats, row, cont = [], [], [], [], [], []
        row_at = 0
        for s_no, s in enumerate(samples):
            n = len(s.tokens)
            ids.append(s.tokens)
            seq.append(torch.full((n,), s_no))
            pos.append(torch.arange(n))
            f = s.features.float()
            feats.append(torch.cat([torch.zeros(1, f.shape[1]), f[: n - 1]]))
            r = torch.arange(row_at, row_at + n)
            r[-1] = -1
            row.append(r)
            row_at += n - 1
            cont.append(torch.arange(n) >= s.prompt_len - 1)
        self.ids, self.seq, self.pos = torch.cat(ids), torch.cat(seq), torch.cat(pos)
        self.chain_features, self.row, self.continuation = torch.cat(feats), torch.cat(row), torch.cat(cont)
        self.samples = list(samples)

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def pack(samples: Sequence[FeatureSample]) -> Packed:
    return Packed(samples)


def level_mask(packed: Packed, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The bool mask [levels * N, levels * N] of a forward over the chain and levels 2..``levels``
    (module docstring) and ``valid`` [levels * N]: the node's root lies in its own sequence."""
    return level_mask_of(packed.seq, packed.pos, levels)


def level_mask_of(seq: torch.Tensor, pos: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`level_mask` for positions given by their sequence numbers ``seq`` [N] and positions ``pos`` [N]
    (one sequence of length L: ``seq`` zeros, ``pos`` arange(L))."""
    n = int(seq.shape[0])
    idx = torch.arange(n).repeat(levels)
    level = torch.arange(1, levels + 1).repeat_interleave(n)
    seq = seq.repeat(levels)
    root = idx - level + 1
    seq_start = (idx - pos.repeat(levels))
    valid = root >= seq_start
    same_seq = seq[:, None] == seq[None, :]
    chain_key = (level[None, :] == 1) & (idx[None, :] <= root[:, None])
    own_chain = (level[None, :] >= 2) & (root[None, :] == root[:, None]) & (level[None, :] <= level[:, None])
    allowed = same_seq & (chain_key | own_chain)
    allowed |= torch.eye(levels * n, dtype=torch.bool)
    return allowed, valid


def _float_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def levels_forward(draft: FeatureDraft, ids: torch.Tensor, chain_features: torch.Tensor, pos: torch.Tensor,
                   allowed: torch.Tensor, levels: int) -> list[torch.Tensor]:
    """Hidden states [B, n, H] of every level 1..``levels`` for rows of ``ids`` [B, n] with chain
    features [B, n, H] (f_{i-1}) and positions [B, n], all rows sharing the mask ``allowed`` (of
    `level_mask_of`, [levels * n, levels * n])."""
    n = int(ids.shape[1])
    device = draft.student.get_input_embeddings().weight.device
    dtype = draft.student.get_input_embeddings().weight.dtype
    outs: list[torch.Tensor] = []
    chain_f = chain_features.to(device, dtype)
    for m in range(1, levels + 1):
        feats = [chain_f]
        for prev in outs:  # level k+1 reads level k's output at the previous position
            feats.append(torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], dim=1))
        width = m * n
        mask = _float_mask(allowed[:width, :width], dtype).to(device).expand(ids.shape[0], 1, width, width)
        hidden, _ = draft(ids.repeat(1, m).to(device), torch.cat(feats, dim=1), pos.repeat(1, m).to(device),
                          attention_mask=mask)
        outs.append(hidden[:, (m - 1) * n: m * n])
    return outs


def draft_levels(draft: FeatureDraft, packed: Packed, levels: int) -> list[torch.Tensor]:
    """Hidden states [N, H] of every level 1..``levels`` (level m row i = node (i, m))."""
    allowed, _ = level_mask(packed, levels)
    outs = levels_forward(draft, packed.ids[None], packed.chain_features[None], packed.pos[None], allowed, levels)
    return [h[0] for h in outs]


def subset_topk_kl(logits: torch.Tensor, topk_idx: torch.Tensor, topk_logp: torch.Tensor) -> torch.Tensor:
    """Per-row KL(p || q) coarsened to {stored tokens q can produce} + one rest bucket; ``logits`` [R, V]
    with -inf outside the draft's head vocabulary. A lower bound on the full KL (log-sum inequality)."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    logq_k = logq.gather(-1, topk_idx)
    reachable = torch.isfinite(logq_k)
    logp_k = topk_logp.float()
    p_k = torch.where(reachable, logp_k.exp(), torch.zeros_like(logp_k))
    kl = (p_k * (logp_k - torch.where(reachable, logq_k, torch.zeros_like(logq_k)))).sum(-1)
    r_p = (1.0 - p_k.sum(-1)).clamp(min=1e-9)
    r_q = (1.0 - torch.where(reachable, logq_k.exp(), torch.zeros_like(logq_k)).sum(-1)).clamp(min=1e-9)
    return kl + r_p * (torch.log(r_p) - torch.log(r_q))


def _rows_of(samples: Sequence[FeatureSample]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat([s.topk_idx for s in samples]).long(), torch.cat([s.topk_logp.float() for s in samples])


def train_loss(draft: FeatureDraft, packed: Packed, levels: int, level_weights: Sequence[float],
               prompt_weight: float = 0.2) -> tuple[torch.Tensor, list[float]]:
    """Weighted mean of `subset_topk_kl` over the nodes of every level (prompt rows down-weighted)."""
    outs = draft_levels(draft, packed, levels)
    _, valid = level_mask(packed, levels)
    n = len(packed)
    idx_all, logp_all = _rows_of(packed.samples)
    has_row = packed.row >= 0
    weight = torch.where(packed.continuation, 1.0, prompt_weight) * has_row
    total, per_level = 0.0, []
    for m, hidden in enumerate(outs, start=1):
        w = weight * valid[(m - 1) * n: m * n]
        sel = w > 0
        rows = packed.row[sel]
        kl = subset_topk_kl(draft.head(hidden[sel]), idx_all[rows], logp_all[rows])
        level_loss = (kl * w[sel]).sum() / w[sel].sum().clamp(min=1e-9)
        per_level.append(float(level_loss))
        total = total + level_weights[m - 1] * level_loss
    return total / sum(level_weights[:levels]), per_level


@torch.no_grad()
def acceptance_by_depth(draft: FeatureDraft, target_model, samples: Sequence[FeatureSample], depth: int = 8,
                        temperatures: Sequence[float] = (1.0,), batch: int = 4) -> dict:
    """Per-sequence sums of sum_x min(p(x), q(x)) over continuation positions, per depth 1..``depth``
    and temperature: ``sums`` [S, depth, len(temperatures)] and ``counts`` [S, depth] (p: the
    target's full distribution, from a teacher-forced target forward that also supplies the true
    features; q: the draft at level m, whose first m - 1 drafted tokens are the sampled ones).
    ``depth1_rows``: the (p, q) rows at depth 1 and T = temperatures[0] of the first sequences (for
    the positional acceptance vectors of the theory)."""
    sums = torch.zeros(len(samples), depth, len(temperatures), dtype=torch.float64)
    counts = torch.zeros(len(samples), depth, dtype=torch.long)
    rows_p, rows_q = [], []
    dev = target_model.get_input_embeddings().weight.device
    for at in range(0, len(samples), batch):
        chunk, logits_all = [], []
        for s in samples[at: at + batch]:
            hidden = target_model.model(input_ids=s.tokens[None].to(dev)).last_hidden_state[0]
            chunk.append(FeatureSample(s.tokens, s.prompt_len, hidden[:-1].float().cpu(), s.topk_idx, s.topk_logp))
            logits_all.append(target_model.lm_head(hidden[:-1]).float().cpu())
        packed = pack(chunk)
        target_logits = torch.cat(logits_all)
        outs = draft_levels(draft, packed, depth)
        _, valid = level_mask(packed, depth)
        n = len(packed)
        use = (packed.row >= 0) & packed.continuation
        for m, hidden in enumerate(outs, start=1):
            sel = use & valid[(m - 1) * n: m * n]
            rows = packed.row[sel]
            seq = packed.seq[sel] + at
            q_logits = draft.head(hidden[sel]).float().cpu()
            counts[:, m - 1].index_add_(0, seq, torch.ones_like(seq))
            for k, t in enumerate(temperatures):
                p = torch.softmax(target_logits[rows] / t, -1)
                q = torch.softmax(q_logits / t, -1)
                acc = torch.minimum(p, q).sum(-1).double()
                sums[:, m - 1, k].index_add_(0, seq, acc)
                if m == 1 and k == 0 and len(rows_p) < 8:
                    rows_p.append(p[::8])
                    rows_q.append(q[::8])
    return {"depth": list(range(1, depth + 1)), "temperatures": [float(t) for t in temperatures],
            "sums": sums, "counts": counts, "depth1_rows": (torch.cat(rows_p), torch.cat(rows_q))}


def mean_acceptance(result: dict, select: Sequence[int] | None = None) -> dict[str, list[float]]:
    """Temperature -> mean acceptance per depth over the sequences ``select`` (default all) of an
    `acceptance_by_depth` result (a position-weighted mean)."""
    sums, counts = result["sums"], result["counts"]
    if select is not None:
        idx = torch.as_tensor(list(select), dtype=torch.long)
        sums, counts = sums[idx], counts[idx]
    total = counts.sum(0).clamp(min=1).double()
    return {str(t): (sums[:, :, k].sum(0) / total).tolist() for k, t in enumerate(result["temperatures"])}


# ----- training run -----------------------------------------------------------------------------

def _load_all(data_dir: Path) -> list[FeatureSample]:
    out = []
    for path in sorted(data_dir.glob("shard_*.safetensors")):
        out.extend(load_feature_samples(path))
    return out


def _batches(samples: list[FeatureSample], tokens_per_batch: int, rng: random.Random):
    order = list(range(len(samples)))
    rng.shuffle(order)
    batch, size = [], 0
    for i in order:
        batch.append(samples[i])
        size += len(samples[i].tokens)
        if size >= tokens_per_batch:
            yield batch
            batch, size = [], 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="train the feature draft (resumable)")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--run-dir", default="distill_runs/eagle")
    ap.add_argument("--levels", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4, help="decoder layers and norm")
    ap.add_argument("--inject-lr", type=float, default=3e-4, help="feature norm and injection")
    ap.add_argument("--warmup", type=int, default=50, help="steps of linear learning-rate warm-up")
    ap.add_argument("--tokens-per-batch", type=int, default=1200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=float, default=15.0, help="minutes between evaluations")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    run = Path(a.run_dir)
    ckpt = run / "checkpoint.pt"
    log_path = run / "train_log.jsonl"
    lm = load_model("smollm2-135m-instruct")
    draft = build_feature_draft(lm)
    use_subset_head(draft.student, load_file(str(DRAFT_DIR / "head_vocab.safetensors"))["vocab_ids"])
    params_inject = list(draft.inject.parameters()) + list(draft.feature_norm.parameters())
    params_body = [p for n, p in draft.student.named_parameters() if p.requires_grad and "embed" not in n]
    opt = torch.optim.AdamW([{"params": params_body, "lr": a.lr}, {"params": params_inject, "lr": a.inject_lr}],
                            weight_decay=0.0)
    state = {"step": 0, "minutes": 0.0, "tokens_seen": 0, "epoch": 0}
    if ckpt.is_file():
        saved = torch.load(ckpt, weights_only=False)
        draft.load_state_dict(saved["draft"], strict=False)
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
    samples = _load_all(run / "data")
    print(f"{len(samples)} sequences, {sum(len(s.tokens) for s in samples)} tokens; resume at {state}", flush=True)
    rng = random.Random(state["step"] + 17)
    weights = [1.0] + [0.6] * (a.levels - 1)
    deadline = time.time() + 60 * a.minutes
    draft.train()
    t_last = time.time()
    while time.time() < deadline:
        samples = _load_all(run / "data")  # the generator may have written more shards meanwhile
        for batch in _batches(samples, a.tokens_per_batch, rng):
            t0 = time.time()
            packed = pack(batch)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss, per_level = train_loss(draft, packed, a.levels, weights)
            for group, base in zip(opt.param_groups, (a.lr, a.inject_lr)):
                group["lr"] = base * min(1.0, (state["step"] + 1) / a.warmup)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params_body + params_inject, 1.0)
            opt.step()
            state["step"] += 1
            state["tokens_seen"] += len(packed)
            state["minutes"] += (time.time() - t0) / 60
            if state["step"] % 10 == 0:
                rec = {"step": state["step"], "loss": float(loss), "levels": per_level,
                       "minutes": round(state["minutes"], 3), "tokens_seen": state["tokens_seen"],
                       "inject_norm": float(draft.inject.weight.norm())}
                with open(log_path, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
                print(rec, flush=True)
            if time.time() - t_last > 60 * 5 or time.time() >= deadline:
                tmp = ckpt.with_name("checkpoint.pt.tmp")
                torch.save({"draft": draft.state_dict(), "opt": opt.state_dict(), "state": state}, tmp)
                os.replace(tmp, ckpt)
                t_last = time.time()
            if time.time() >= deadline:
                break
        else:
            state["epoch"] += 1
    tmp = ckpt.with_name("checkpoint.pt.tmp")
    torch.save({"draft": draft.state_dict(), "opt": opt.state_dict(), "state": state}, tmp)
    os.replace(tmp, ckpt)
    print("saved", state, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
