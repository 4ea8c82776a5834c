"""Training the feature draft: the target samples, features and training in one process, nothing written
but checkpoints (on an accelerator; the same code runs on a CPU at toy sizes).

Each round the target samples continuations of a batch of prompts at T = 1 (`sampling.generate_continuations`),
one teacher-forced target forward gives their features f_j (`target_features`), and the batch joins a buffer
of tokens and bfloat16 features (~1.2 kB per token; the target's rows are recomputed from the features by
its head when a batch is drawn). Each draft then trains on sequences drawn from the buffer for as long as
the sampling took (``train_ratio``), with the training-time-test levels of `levels` and the per-row loss
`losses.sub_vocab_kl` (or `losses.sub_vocab_rejection`) against the target's exact rows. Several drafts can
train on the same samples; each is saved as ``<out>/<name>.safetensors`` beside ``<out>/online_log.jsonl``,
and a second run with the same ``--out`` continues from the saved weights (fresh optimiser and warm-up)::

    python -m specdec_lib.training.feature.online --minutes 6 --out distill_runs/eagle_online --device cuda
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

from ...data import load_prompts
from ...models import load_model
from ...models.feature_net import EAGLE_DIR, FeatureDraft, build_feature_draft, grow_feature_draft, load_feature_draft
from ...models.offline import DRAFT_LAYERS_FILE, apply_head_vocab
from ...models.subset_head import use_subset_head
from ..evaluation import read_record
from ..losses import sub_vocab_kl, sub_vocab_rejection
from ..sampling import Rollouts, generate_continuations
from .data import FeatureSample, training_prompts
from .levels import acceptance_by_depth, level_mask_of, levels_forward, mean_acceptance

__all__ = ["target_features", "OBJECTIVES", "HEADS", "own_head", "with_head", "initial_draft", "rollout_levels",
           "online_loss", "DraftRun", "OnlineConfig", "train_online", "heldout_rollouts", "continuation_samples",
           "depth_acceptance", "main"]


@torch.no_grad()
def target_features(model, rollouts: Rollouts) -> Rollouts:
    """``rollouts`` with the target's features (bfloat16), from one causal forward."""
    hidden = model.model(input_ids=rollouts.ids).last_hidden_state
    return Rollouts(rollouts.ids, rollouts.lengths, rollouts.prompt_lens, hidden.to(torch.bfloat16))


OBJECTIVES = {"kl": sub_vocab_kl, "tv": sub_vocab_rejection}
"""Per-row training losses of `online_loss`: forward KL(target || draft) or the rejection probability (TV)."""


HEADS = ("committed", "full")
"""Head vocabularies a run trains with: the committed draft's (8192 frequent tokens; the target puts ~10% of its
mass outside them, scripts/feature_draft_probes.py) or the target's full tied head (every token)."""


def own_head(draft: FeatureDraft) -> str:
    """The `HEADS` entry a loaded draft has: "committed" with a sub-vocabulary head, "full" with the plain tied one."""
    return "full" if getattr(draft.student.get_output_embeddings(), "vocab_ids", None) is None else "committed"


def with_head(draft: FeatureDraft, head: str) -> FeatureDraft:
    """``draft`` training with the head vocabulary ``head`` (`HEADS`): "committed" leaves its sub-vocabulary head,
    "full" makes it a `SubsetHead` over every token (the same function as the plain tied head, and the
    ``vocab_ids`` that `online_loss` reads), also for a draft exported with the full head ."""
    if head not in HEADS:
        raise ValueError(f"head must be one of {HEADS}, got {head!r}")
    if head == "committed" and own_head(draft) == "full":
        raise ValueError('head="committed" needs a draft with a sub-vocabulary head (models.subset_head); this one has '
                         'the full tied head (exported without head_vocab.safetensors): train it with head="full"')
    if head == "full":
        weight = draft.student.get_output_embeddings().weight
        use_subset_head(draft.student, torch.arange(weight.shape[0], device=weight.device))
    return draft


def initial_draft(target_lm, directory: Path | str) -> FeatureDraft:
    """The feature draft a run starts from: the one exported to ``directory`` (`load_feature_draft`), or, when
    ``directory`` holds an independent draft (``layers.safetensors``), a fresh feature draft on its layers with
    the feature input zero (`build_feature_draft`) and its head vocabulary."""
    directory = Path(directory)
    if not (directory / DRAFT_LAYERS_FILE).is_file():
        return load_feature_draft(target_lm, directory)
    draft = build_feature_draft(target_lm, directory)
    apply_head_vocab(draft.student, directory)
    return draft


def rollout_levels(draft: FeatureDraft, batch: Rollouts, levels: int) -> list[torch.Tensor]:
    """The draft's hidden states [B, L, H] at levels 1..``levels`` over right-padded rollouts with features
    (node (i, m) of row b reads x_i and the feature one level up at i - 1; the target's f_{i-1} at level 1)."""
    n_rows, width = batch.ids.shape
    feats = batch.features
    chain = torch.cat([torch.zeros_like(feats[:, :1]), feats[:, :-1]], dim=1)
    pos = torch.arange(width, device=batch.ids.device).expand(n_rows, width)
    allowed, _ = level_mask_of(torch.zeros(width, dtype=torch.long), torch.arange(width), levels)
    return levels_forward(draft, batch.ids, chain, pos, allowed, levels)


def online_loss(draft: FeatureDraft, target_head: torch.Tensor, vocab_ids: torch.Tensor, batch: Rollouts,
                levels: int, level_weights: Sequence[float], prompt_weight: float = 0.2, objective: str = "kl"
                ) -> tuple[torch.Tensor, list[float]]:
    """Weighted mean over levels of the position-weighted per-row loss ``OBJECTIVES[objective]`` (`sub_vocab_kl`
    by default) at the training-time-test levels (`levels`): node (i, m) predicts x_{i+1} against the target's
    row at i (from its feature and ``target_head`` [V, H]); continuation rows weigh 1, prompt rows
    ``prompt_weight``; a level-m node needs i >= m - 1."""
    if len(level_weights) < levels:
        raise ValueError(f"level_weights needs {levels} entries, got {len(level_weights)}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    row_loss = OBJECTIVES[objective]
    n_rows, width = batch.ids.shape
    device = batch.ids.device
    feats = batch.features
    pos = torch.arange(width, device=device).expand(n_rows, width)
    outs = rollout_levels(draft, batch, levels)
    weight = torch.where(pos >= batch.prompt_lens[:, None] - 1, 1.0, prompt_weight) * (pos < batch.lengths[:, None] - 1)
    sel = weight > 0
    with torch.no_grad(), torch.autocast(device.type, enabled=False):  # the target's rows at full precision
        target_logp = torch.log_softmax(feats[sel].to(target_head.dtype) @ target_head.T, dim=-1)
    head_rows = target_head[vocab_ids]
    total, per_level = 0.0, []
    for m, hidden in enumerate(outs, start=1):
        w = (weight * (pos >= m - 1))[sel]
        loss = row_loss(target_logp, hidden[sel] @ head_rows.to(hidden.dtype).T, vocab_ids)
        level_loss = (loss * w).sum() / w.sum().clamp(min=1e-9)
        per_level.append(float(level_loss.detach()))
        total = total + level_weights[m - 1] * level_loss
    return total / sum(level_weights[:levels]), per_level


class DraftRun:
    """One draft in training: its optimiser (body and feature input at their own learning rates, linear
    warm-up, then a linear decay to 10% over the run's time) and its checkpoint ``<out>/<name>.safetensors``."""

    def __init__(self, name: str, draft: FeatureDraft, lr: float, inject_lr: float, warmup: int = 100,
                 objective: str = "kl"):
        if lr <= 0 or inject_lr <= 0 or warmup < 1:
            raise ValueError(f"lr and inject_lr must be > 0 and warmup >= 1, got {lr}, {inject_lr}, {warmup}")
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
        self.name, self.draft, self.base, self.warmup, self.objective = name, draft, (lr, inject_lr), warmup, objective
        draft.student.get_input_embeddings().weight.requires_grad_(False)
        inject = list(draft.inject.parameters()) + list(draft.feature_norm.parameters())
        body = [p for n, p in draft.student.named_parameters() if p.requires_grad and "embed" not in n]
        self.params = body + inject
        self.opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": inject, "lr": inject_lr}],
                                     weight_decay=0.0)
        self.step = 0

    def update(self, loss: torch.Tensor, progress: float) -> None:
        scale = min(1.0, (self.step + 1) / self.warmup) * (1.0 - 0.9 * min(max(progress, 0.0), 1.0))
        for group, base in zip(self.opt.param_groups, self.base):
            group["lr"] = base * scale
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.step += 1

    def save(self, out_dir: Path) -> Path:
        path = Path(out_dir) / f"{self.name}.safetensors"
        tmp = path.with_name(path.name + ".tmp")
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in self.draft.trainable_state().items()}, str(tmp),
                  metadata={"step": str(self.step)})
        os.replace(tmp, path)
        return path


@dataclass
class OnlineConfig:
    """Settings of one `train_online` call."""

    minutes: float                  # wall-clock budget
    eos_token_id: int
    pad_token_id: int
    batch: int = 512                # prompts sampled per round
    rows_per_step: int = 64         # sequences per training step
    new_tokens: int = 128           # new tokens per sampled continuation
    levels: int = 3                 # training-time-test levels
    level_weights: Sequence[float] = (1.0, 0.6, 0.6)
    train_ratio: float = 1.0        # training time per round / its sampling time
    buffer_tokens: int = 8_000_000  # padded positions kept for training
    save_every_s: float = 60.0
    seed: int = 0

    def validate(self) -> None:
        if (self.minutes <= 0 or self.batch < 1 or self.rows_per_step < 1 or self.train_ratio <= 0
                or self.buffer_tokens < 1):
            raise ValueError("minutes, batch, rows_per_step, train_ratio and buffer_tokens must be positive")


def train_online(target_model, runs: Sequence[DraftRun], prompts: Sequence[Sequence[int]], out_dir: Path | str,
                 config: OnlineConfig, sampler=None, log=print) -> dict:
    """Alternate sampling a batch of ``config.batch`` prompts (cycling through ``prompts``, a new seed each
    round) and training every run on ``config.rows_per_step`` sequences drawn from the buffer, for
    ``config.train_ratio`` times the sampling's time, until ``config.minutes`` pass; returns the totals. The
    buffer keeps the most recent batches up to ``config.buffer_tokens`` padded positions (always the newest
    batch; ~1.2 kB of GPU memory per position for a 576-wide feature). ``sampler`` (default:
    ``target_model``) samples the continuations, e.g. a bfloat16 copy of the target: it only chooses the
    contexts, while the features and the rows trained against always come from ``target_model``."""
    if not runs or not prompts:
        raise ValueError("train_online needs at least one run and one prompt")
    config.validate()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    head = target_model.get_output_embeddings().weight.detach()
    start, deadline = time.time(), time.time() + 60.0 * config.minutes
    rng = random.Random(config.seed)
    buffer: list[Rollouts] = []
    totals = {"rounds": 0, "sampled_tokens": 0, "trained_rows": 0, "sampling_s": 0.0, "training_s": 0.0}
    last_save = time.time()
    cursor = (config.seed * 7919) % len(prompts)
    while time.time() < deadline:
        t0 = time.time()
        chunk = [prompts[(cursor + i) % len(prompts)] for i in range(config.batch)]
        cursor = (cursor + config.batch) % len(prompts)
        rollouts = target_features(target_model, generate_continuations(
            target_model if sampler is None else sampler, chunk, config.new_tokens, config.eos_token_id,
            config.pad_token_id, config.seed * 1_000_003 + totals["rounds"]))
        buffer = _keep_recent(buffer + [rollouts], config.buffer_tokens)
        sampled = int((rollouts.lengths - rollouts.prompt_lens).sum())
        totals["sampled_tokens"] += sampled
        totals["rounds"] += 1
        sampling_s = time.time() - t0
        totals["sampling_s"] += sampling_s
        t1, losses = time.time(), {r.name: [] for r in runs}
        while time.time() - t1 < config.train_ratio * sampling_s and time.time() < deadline:
            source = buffer[rng.randrange(len(buffer))]
            pick = torch.randperm(source.ids.shape[0], generator=torch.Generator().manual_seed(rng.randrange(2**31)))
            rows = source.rows(pick[:config.rows_per_step].to(source.ids.device))
            for run in runs:
                run.draft.train()
                with torch.autocast(rows.ids.device.type, dtype=torch.bfloat16):
                    loss, per_level = online_loss(run.draft, head, run.draft.student.lm_head.vocab_ids, rows,
                                                  config.levels, config.level_weights, objective=run.objective)
                run.update(loss, (time.time() - start) / (deadline - start))
                losses[run.name].append([float(loss.detach())] + per_level)
            totals["trained_rows"] += int(rows.ids.shape[0])
        totals["training_s"] += time.time() - t1
        record = {"round": totals["rounds"], "minutes": round((time.time() - start) / 60, 3),
                  "sampled_tokens": totals["sampled_tokens"], "round_tokens": sampled,
                  "sampling_s": round(sampling_s, 2),
                  **{name: {"steps": len(v), "loss": [round(sum(c) / len(c), 4) for c in zip(*v)] if v else None}
                     for name, v in losses.items()}}
        with open(out_dir / "online_log.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")
        log(record)
        if time.time() - last_save > config.save_every_s or time.time() >= deadline:
            for run in runs:
                run.save(out_dir)
            last_save = time.time()
    for run in runs:
        run.save(out_dir)
    totals.update(steps={r.name: r.step for r in runs}, minutes=(time.time() - start) / 60)
    return totals


def _keep_recent(buffer: list[Rollouts], max_tokens: int) -> list[Rollouts]:
    """The newest batches of ``buffer`` whose padded positions total at most ``max_tokens`` (at least one)."""
    kept, total = [], 0
    for batch in reversed(buffer):
        total += batch.ids.numel()
        if kept and total > max_tokens:
            break
        kept.append(batch)
    return kept[::-1]


def heldout_rollouts(lm, per_category: int | None, new_tokens: int = 96, seed: int = 0) -> list[FeatureSample]:
    """Target continuations of the held-out prompts (`continuation_samples`)."""
    return continuation_samples(lm, [p.text for p in load_prompts("heldout", per_category=per_category)],
                                new_tokens, seed)


def continuation_samples(lm, texts: Sequence[str], new_tokens: int = 96, seed: int = 0) -> list[FeatureSample]:
    """The target's continuations of ``texts`` at T = 1 as `FeatureSample` s for `levels.acceptance_by_depth`
    (which recomputes features and rows; the stored rows are left empty)."""
    prompts = [lm.encode(t).tolist() for t in texts]
    roll = generate_continuations(lm.model, prompts, new_tokens, lm.eos_token_id, _pad_id(lm), seed)
    out = []
    for b, n in enumerate(roll.lengths.tolist()):
        tokens = roll.ids[b, :n].cpu()
        out.append(FeatureSample(tokens, int(roll.prompt_lens[b]), torch.zeros(n - 1, 1),
                                 torch.zeros(n - 1, 1, dtype=torch.long), torch.zeros(n - 1, 1)))
    return out


def depth_acceptance(draft: FeatureDraft, target_model, samples: Sequence[FeatureSample], depth: int = 4) -> list[float]:
    """Mean acceptance sum_x min(p, q) at T = 1 by depth 1..``depth`` over the continuation positions."""
    draft.eval()
    return [round(x, 4) for x in mean_acceptance(acceptance_by_depth(draft, target_model, samples, depth))["1.0"]]


def _pad_id(lm) -> int:
    pad = getattr(lm.tokenizer, "pad_token_id", None)
    return int(pad if pad is not None else lm.eos_token_id)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="train feature drafts online (sampling and training in one process)")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--out", type=Path, default=Path("distill_runs/eagle_online"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--init", type=Path, default=EAGLE_DIR,
                    help="the feature draft to start from, or an independent draft's directory (e.g. "
                         "data/models/smollm2-135m-draft) for a fresh feature draft on its layers")
    ap.add_argument("--lrs", default="3e-4:1e-3,1e-3:3e-3", help="body:inject learning rates, one run each")
    ap.add_argument("--layers", default=None,
                    help="decoder layer counts, e.g. 3,4: one run per learning rate and count, each grown from "
                         "--init by `model.grow_feature_draft` (same function at the start; default: --init's own)")
    ap.add_argument("--objectives", default="kl", help=f"training losses, one run each: {', '.join(OBJECTIVES)}")
    ap.add_argument("--heads", default="committed",
                    help=f"head vocabularies, one run each: {', '.join(HEADS)} (--init's own head, or every token; "
                         "a draft exported with the full head has no other)")
    ap.add_argument("--train-ratio", type=float, default=1.0, help="training time per round / its sampling time")
    ap.add_argument("--batch", type=int, default=512, help="prompts sampled at a time")
    ap.add_argument("--buffer-tokens", type=int, default=8_000_000, help="padded positions kept for training")
    ap.add_argument("--rows-per-step", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=8000, help="self-made instructions beside the training prompts")
    ap.add_argument("--eval-per-category", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="dtype of the target's copy that samples the contexts (features and rows stay float32)")
    a = ap.parse_args(argv)
    if str(a.device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    lm = load_model("smollm2-135m-instruct", device=a.device, dtype="float32")
    depths = [None] if a.layers is None else [int(x) for x in a.layers.split(",")]
    runs = []
    objectives, heads = a.objectives.split(","), a.heads.split(",")
    bad = [h for h in heads if h not in HEADS]
    if bad:
        ap.error(f"--heads: unknown {bad}; known: {', '.join(HEADS)}")
    settings = [(s, d, o, h) for s in a.lrs.split(",") for d in depths for o in objectives for h in heads]
    run_heads = {}
    for k, (spec, depth, objective, head) in enumerate(settings):
        lr, inject_lr = (float(x) for x in spec.split(":"))
        draft = initial_draft(lm, a.init)
        if head == "committed":
            head = own_head(draft)  # "full" for an --init exported with the full head
        name = (f"draft_{k}_lr{spec.replace(':', '_')}" + ("" if depth is None else f"_L{depth}")
                + ("" if objective == "kl" else f"_{objective}") + ("" if head == "committed" else f"_{head}head"))
        run_heads[name] = head
        if depth is not None:
            draft = grow_feature_draft(draft, lm, depth)
        draft = with_head(draft, head)
        saved = a.out / f"{name}.safetensors"
        if saved.is_file():  # resume
            state = load_file(str(saved))
            draft.load_state_dict({key: v.to(torch.float32) for key, v in state.items()}, strict=False)
        runs.append(DraftRun(name, draft, lr, inject_lr, objective=objective))
    t0 = time.time()
    held = heldout_rollouts(lm, a.eval_per_category)
    before = depth_acceptance(runs[0].draft, lm.model, held)  # every run starts from --init's function (or resumes)
    print(json.dumps({"heldout_sequences": len(held), "acceptance_before": before,
                      "eval_s": round(time.time() - t0, 1)}), flush=True)
    prompts = [lm.encode(t).tolist() for t in training_prompts(a.seeds, seed=a.seed)]
    random.Random(a.seed).shuffle(prompts)
    sampler = None if a.sample_dtype == "float32" else copy.deepcopy(lm.model).to(getattr(torch, a.sample_dtype))
    config = OnlineConfig(a.minutes, lm.eos_token_id, _pad_id(lm), batch=a.batch, rows_per_step=a.rows_per_step,
                          new_tokens=a.new_tokens, levels=a.levels, train_ratio=a.train_ratio,
                          buffer_tokens=a.buffer_tokens, seed=a.seed)
    totals = train_online(lm.model, runs, prompts, a.out, config, sampler=sampler,
                          log=lambda r: print(json.dumps(r), flush=True))
    after = {r.name: depth_acceptance(r.draft, lm.model, held) for r in runs}
    fresh = (a.init / DRAFT_LAYERS_FILE).is_file()  # a fresh feature draft: no feature-draft training before
    init_training = {} if fresh else (read_record(a.init) or {}).get("training") or {}
    summary = {"totals": totals, "sample_dtype": a.sample_dtype, "acceptance_before": before, "acceptance_after": after,
               "objectives": {r.name: r.objective for r in runs}, "heads": run_heads,
               "device": torch.cuda.get_device_name() if str(a.device).startswith("cuda") else str(a.device),
               "init": {"directory": str(a.init),  # how the draft it started from was trained
                        "training": {k: v for k, v in init_training.items() if k != "loss_curve"} or None}}
    (a.out / "online_summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
