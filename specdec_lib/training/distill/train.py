"""Training the draft: its settings (`DistillConfig`) and a call's (`RunSettings`), resumable checkpoints
(weights and AdamW moments), and `distill`, the resumable loop of rounds (sample text, train, evaluate,
checkpoint, export)."""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from safetensors.torch import load_file, save_file

from ...progress import tqdm
from ...reporting.results import machine
from ..timing import measure_forward_times
from .data import Sample, _shards, load_samples, sample_continuations, save_samples
from .evaluate import acceptance_rate
from .export import TARGET_NAME, _atomic_json, _RoundedWeights, export_draft
from .loss import train_step, trainable_parameters


@dataclass
class DistillConfig:
    """Settings of one distillation run (stored in the checkpoint and in ``draft.json``)."""

    layers: int = 2                 # decoder layers of the student (the target's first L)
    lr: float = 5e-4                # AdamW learning rate (after a linear warm-up)
    warmup_steps: int = 30
    weight_decay: float = 0.0
    batch_size: int = 6             # sequences per training step
    grad_clip: float = 1.0
    topk: int = 128                 # target log-probs kept per position
    temperature: float = 1.0        # of the target samples and of the distillation targets
    gen_batch: int = 16             # sequences sampled together by the target
    new_tokens: int = 128           # new tokens per sampled continuation
    eval_prompts: int = 32          # held-out prompts used for the acceptance measurement
    eval_new_tokens: int = 96
    gen_minutes: float = 6.0        # per round: minutes of text generation ...
    train_minutes: float = 6.0      # ... then minutes of training, then evaluation + checkpoint + export
    decay_fraction: float = 0.25    # last fraction of the run's minutes: linear lr decay to 10 %
    prefix_len: int = 100           # prefix KV cache length for the forward timings
    timing_repeats: int = 21
    seed: int = 0
    export_dtype: str = "bfloat16"

    def validate(self) -> None:
        if self.layers < 1:
            raise ValueError(f"layers must be >= 1, got {self.layers}")
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        for name in ("batch_size", "gen_batch", "new_tokens", "eval_prompts", "eval_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.export_dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"export_dtype must be bfloat16, float16 or float32, got {self.export_dtype!r}")


def save_checkpoint(run_dir: Path | str, student, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Trainable weights (float32), AdamW moments and ``state`` (a JSON dict) under ``<run_dir>/ckpt``."""
    ckpt = Path(run_dir) / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    params = trainable_parameters(student)
    weights = {k: v.detach().float().cpu().contiguous() for k, v in params.items()}
    ids = {id(p): k for k, p in params.items()}
    moments = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            st = optimizer.state.get(p)
            if st:
                name = ids[id(p)]
                moments[name + "::exp_avg"] = st["exp_avg"].detach().cpu().contiguous()
                moments[name + "::exp_avg_sq"] = st["exp_avg_sq"].detach().cpu().contiguous()
                moments[name + "::step"] = torch.as_tensor(float(st["step"])).reshape(1)
    save_file(weights, str(ckpt / "student.tmp"))
    os.replace(ckpt / "student.tmp", ckpt / "student.safetensors")
    if moments:
        save_file(moments, str(ckpt / "optim.tmp"))
        os.replace(ckpt / "optim.tmp", ckpt / "optim.safetensors")
    _atomic_json(state, ckpt / "state.json")


def load_checkpoint(run_dir: Path | str, student, optimizer: torch.optim.Optimizer) -> dict | None:
    """Restore what `save_checkpoint` wrote; returns the state dict, or None when there is none."""
    ckpt = Path(run_dir) / "ckpt"
    if not (ckpt / "state.json").is_file():
        return None
    state = json.loads((ckpt / "state.json").read_text())
    params = trainable_parameters(student)
    weights = load_file(str(ckpt / "student.safetensors"))
    if set(weights) != set(params):
        raise ValueError(f"checkpoint in {ckpt} does not fit this student ({len(weights)} tensors vs "
                         f"{len(params)}; layers in checkpoint: {state.get('config', {}).get('layers')})")
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(weights[k].to(p.dtype))
    if (ckpt / "optim.safetensors").is_file():
        moments = load_file(str(ckpt / "optim.safetensors"))
        for k, p in params.items():
            if k + "::exp_avg" in moments:
                optimizer.state[p] = {"step": torch.tensor(float(moments[k + "::step"][0])),
                                      "exp_avg": moments[k + "::exp_avg"].to(p.device, p.dtype),
                                      "exp_avg_sq": moments[k + "::exp_avg_sq"].to(p.device, p.dtype)}
    return state


class _Log:
    def __init__(self, path: Path | None, echo: bool = True):
        self.path, self.echo = path, echo

    def __call__(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        if self.echo:
            print(line, flush=True)
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(line + "\n")


def _progress(total, desc, enabled):
    return tqdm(total=total, desc=desc, disable=not enabled, mininterval=20, leave=False)


@dataclass
class _Run:
    """What the steps of one `distill` call share; ``samples``, ``state``, ``ema`` and ``timing`` change
    as the run goes."""

    target: torch.nn.Module
    student: torch.nn.Module
    optimizer: torch.optim.Optimizer
    config: DistillConfig
    state: dict
    run_dir: Path
    log: _Log
    samples: list[Sample]         # all training text so far
    ema: float | None = None      # EMA of the training loss
    timing: dict | None = None    # the last forward-time measurement


@dataclass
class RunSettings:
    """What one `distill` call does besides the training settings: its budget, where it exports, what it
    records and shows."""

    minutes: float                        # wall-clock budget of the call
    export_dir: Path | str | None = None  # where the best draft so far is exported (None: no export)
    resume: bool = False                  # continue from ``<run_dir>/ckpt`` and reuse the cached text
    eos_token_id: int | None = None
    start: int = 0                        # first position trained on (the common chat prefix is skipped)
    theory_fn: Callable | None = None     # (student, eval samples) -> extra measured quantities
    extra_record: dict | None = None      # merged into the record
    progress: bool = True                 # progress bars
    echo: bool = True                     # print the log lines (they always go to ``<run_dir>/log.txt``)


def distill(target, run_dir: Path | str, train_prompts: Sequence[Sequence[int]],
            eval_prompts: Sequence[Sequence[int]], config: DistillConfig, settings: RunSettings) -> dict:
    """Distil a ``config.layers``-layer student from the HF causal LM ``target`` for ``settings.minutes``.

    Rounds of: sample text (``config.gen_minutes``; prompts cycle through ``train_prompts``, each batch
    a fresh sample), train (``config.train_minutes``; AdamW on the top-k forward KL over all stored
    rows, sequences drawn uniformly from all text so far), then evaluate on ``eval_prompts`` (acceptance
    at T = 1 on the rounded export weights), checkpoint, and export to ``settings.export_dir`` when the
    acceptance is at least the best so far. Returns the final record (also in ``<run_dir>/record.json``)."""
    minutes, resume = settings.minutes, settings.resume
    config.validate()
    if minutes <= 0:
        raise ValueError(f"minutes must be > 0, got {minutes}")
    if not train_prompts or not eval_prompts:
        raise ValueError("distill needs training and held-out prompts")
    run_dir = Path(run_dir)
    t_begin = time.time()
    deadline = t_begin + 60.0 * minutes
    run_dir.mkdir(parents=True, exist_ok=True)
    log = _Log(run_dir / "log.txt", settings.echo)
    has_ckpt = (run_dir / "ckpt" / "state.json").is_file()
    if has_ckpt and not resume:
        raise ValueError(f"{run_dir} already holds a checkpoint: pass resume=True (--resume) or another run dir")

    student, optimizer, state = _start_student(target, run_dir, config, resume, log)
    gen = torch.Generator().manual_seed(config.seed * 1000 + state["resumes"] * 17 + len(_shards(run_dir)))
    rng = random.Random(config.seed * 1000 + state["resumes"])
    log(f"run dir {run_dir}; {len(train_prompts)} training prompts, {len(eval_prompts)} held-out prompts; "
        f"{minutes} min; config {asdict(config)}")
    eval_samples = _heldout_samples(target, run_dir, eval_prompts, config, settings.eos_token_id, log)
    if state["initial"] is None:
        init = acceptance_rate(student, eval_samples, config.temperature)
        state["initial"] = {"acceptance": init["mean"], "kl": init["kl"]}
        log(f"untrained student: held-out acceptance {init['mean']:.4f}, KL {init['kl']:.3f}")

    run = _Run(target, student, optimizer, config, state, run_dir, log,
               samples=[s for path in _shards(run_dir) for s in load_samples(path)])
    round_no = 0
    rec = None
    reserve = min(40.0, 0.15 * 60.0 * minutes)  # seconds kept for the last evaluation and export
    while round_no == 0 or time.time() < deadline - reserve:
        round_no += 1
        # 1) more text
        _sample_round(run, round_no, train_prompts, gen, settings,
                      until=min(time.time() + 60.0 * config.gen_minutes, deadline - reserve))
        # 2) training
        _train_round(run, round_no, rng, deadline, minutes, settings.progress,
                     until=min(time.time() + 60.0 * config.train_minutes, deadline - reserve / 2))
        # 3) measure, checkpoint, export
        rec = _finish_round(run, round_no, eval_samples, settings)
    log(f"done after {(time.time() - t_begin) / 60:.1f} min")
    if rec is None:
        raise ValueError(f"minutes={minutes} left no time for a round")
    return rec


def _start_student(target, run_dir: Path, config: DistillConfig, resume: bool, log: _Log):
    """Freeze ``target``, build the student and its AdamW, and restore the checkpoint when resuming:
    (student, optimizer, state), the state fresh when there is no checkpoint."""
    from ...models.offline import build_student  # imports transformers (heavy)

    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    student = build_student(target, config.layers)
    params = trainable_parameters(student)
    optimizer = torch.optim.AdamW(list(params.values()), lr=config.lr, weight_decay=config.weight_decay)
    state = load_checkpoint(run_dir, student, optimizer) if resume else None
    if state is not None:
        if state["config"]["layers"] != config.layers:
            raise ValueError(f"checkpoint has {state['config']['layers']} layers, asked for {config.layers}")
        log(f"resumed at step {state['steps']} ({state['train_seconds'] / 60:.1f} train min, "
            f"best acceptance {state.get('best_acceptance')})")
    else:
        state = {"steps": 0, "train_seconds": 0.0, "gen_seconds": 0.0, "prompt_cursor": 0, "resumes": 0,
                 "loss_curve": [], "evals": [], "best_acceptance": None, "initial": None}
    state["config"] = asdict(config)
    state["resumes"] = state.get("resumes", 0) + (1 if resume and state["steps"] else 0)
    return student, optimizer, state


def _heldout_samples(target, run_dir: Path, eval_prompts: Sequence[Sequence[int]], config: DistillConfig,
                     eos_token_id: int | None, log: _Log) -> list[Sample]:
    """The held-out evaluation set (full target distributions along target samples), generated once and
    kept in ``<run_dir>/data/eval.safetensors``."""
    eval_path = run_dir / "data" / "eval.safetensors"
    if eval_path.is_file():
        return load_samples(eval_path)
    t0 = time.time()
    eval_gen = torch.Generator().manual_seed(10_000 + config.seed)
    eval_samples = []
    chosen = list(eval_prompts)[: config.eval_prompts]
    for at in range(0, len(chosen), config.gen_batch):
        eval_samples += sample_continuations(target, chosen[at: at + config.gen_batch], config.eval_new_tokens,
                                             topk=10 ** 9, generator=eval_gen, eos_token_id=eos_token_id,
                                             start=10 ** 9, temperature=config.temperature)
    save_samples(eval_samples, eval_path)
    eval_samples = load_samples(eval_path)
    log(f"held-out set: {len(eval_samples)} continuations, "
        f"{sum(len(s.tokens) - s.prompt_len for s in eval_samples)} positions ({time.time() - t0:.0f} s)")
    return eval_samples


def _sample_round(run: _Run, round_no: int, train_prompts: Sequence[Sequence[int]], gen: torch.Generator,
                  settings: RunSettings, until: float) -> None:
    """Step 1 of a round: the target samples more text until ``until`` (at least one batch when there is
    no text yet), saved as the next shard and added to ``run.samples``."""
    config, state, samples = run.config, run.state, run.samples
    new = []
    bar = _progress(None, f"round {round_no}: sampling", settings.progress)
    while time.time() < until or (not samples and not new):
        batch = [train_prompts[(state["prompt_cursor"] + i) % len(train_prompts)]
                 for i in range(config.gen_batch)]
        state["prompt_cursor"] += config.gen_batch
        t0 = time.time()
        new += sample_continuations(run.target, batch, config.new_tokens, config.topk, gen, settings.eos_token_id,
                                    start=settings.start, temperature=config.temperature)
        state["gen_seconds"] += time.time() - t0
        bar.update(len(batch))
    bar.close()
    if new:
        save_samples(new, run.run_dir / "data" / f"train_{len(_shards(run.run_dir)):04d}.safetensors")
        samples += new
        run.log(f"round {round_no}: +{len(new)} sequences ({sum(s.num_rows for s in new)} positions); total "
                f"{len(samples)} sequences, {sum(s.num_rows for s in samples)} positions; "
                f"generation {state['gen_seconds'] / 60:.1f} min")


def _train_round(run: _Run, round_no: int, rng: random.Random, deadline: float, minutes: float,
                 progress: bool, until: float) -> None:
    """Step 2 of a round: AdamW steps until ``until`` (at least one) on batches drawn uniformly from all
    text so far; linear warm-up, then a linear decay over the run's last ``config.decay_fraction``."""
    config, state, samples = run.config, run.state, run.samples
    order: list[int] = []
    bar = _progress(None, f"round {round_no}: training", progress)
    first = True
    while first or time.time() < until:
        first = False
        if len(order) < config.batch_size:
            perm = list(range(len(samples)))
            rng.shuffle(perm)
            order += perm
        picks, order = order[: config.batch_size], order[config.batch_size:]
        warm = min(1.0, (state["steps"] + 1) / max(1, config.warmup_steps))
        left = max(0.0, deadline - time.time()) / (60.0 * minutes)
        decay = 1.0 if left >= config.decay_fraction else 0.1 + 0.9 * left / max(config.decay_fraction, 1e-9)
        for g in run.optimizer.param_groups:
            g["lr"] = config.lr * warm * decay
        t0 = time.time()
        loss = train_step(run.student, run.optimizer, [samples[i] for i in picks], config.temperature,
                          config.grad_clip)
        state["train_seconds"] += time.time() - t0
        state["steps"] += 1
        run.ema = loss if run.ema is None else 0.95 * run.ema + 0.05 * loss
        if state["steps"] % 10 == 0:
            state["loss_curve"].append([state["steps"], round(run.ema, 5), round(state["train_seconds"] / 60, 3)])
        if state["steps"] % 50 == 0:
            run.log(f"step {state['steps']}: loss {loss:.4f} (ema {run.ema:.4f}), lr {config.lr * warm * decay:.2e}")
        bar.update(1)
    bar.close()


def _finish_round(run: _Run, round_no: int, eval_samples: list[Sample], settings: RunSettings) -> dict:
    """Step 3 of a round: evaluate and time the rounded weights, checkpoint, export when the acceptance
    is at least the best so far; returns the round's record (also written to ``<run_dir>/record.json``)."""
    config, state = run.config, run.state
    ev = _evaluate(run.student, eval_samples, config, settings.theory_fn)
    state["evals"].append({"step": state["steps"], "acceptance": ev["mean"], "kl": ev["kl"],
                           "positions": sum(s.num_rows for s in run.samples),
                           "train_minutes": state["train_seconds"] / 60})
    # every round: a few seconds, and the machine's load changes
    with _RoundedWeights(run.student, config.export_dtype):
        run.timing = measure_forward_times(run.student, run.target, config.prefix_len, config.timing_repeats)
    run.log(f"forward one token (prefix {config.prefix_len}): draft {run.timing['draft_ms']:.2f} ms, "
            f"target {run.timing['target_ms']:.2f} ms, ratio {run.timing['ratio']:.3f}")
    rec = _record(run, ev, settings.extra_record)
    save_checkpoint(run.run_dir, run.student, run.optimizer, state)
    best = state["best_acceptance"]
    exported = False
    if settings.export_dir is not None and (best is None or ev["mean"] >= best):
        export_draft(run.student, settings.export_dir, rec, config.export_dtype)
        exported = True
    state["best_acceptance"] = ev["mean"] if best is None else max(best, ev["mean"])
    save_checkpoint(run.run_dir, run.student, run.optimizer, state)
    _atomic_json(rec, run.run_dir / "record.json")
    run.log(f"round {round_no}: step {state['steps']}, held-out acceptance {ev['mean']:.4f} (KL {ev['kl']:.3f}, "
            f"{ev['positions']} positions){' -> exported' if exported else ''}; checkpoint saved")
    return rec


def _evaluate(student, eval_samples: list[Sample], config: DistillConfig, theory_fn: Callable | None) -> dict:
    """Held-out acceptance of the weights rounded to the export dtype, plus ``theory_fn``'s extras."""
    with _RoundedWeights(student, config.export_dtype):
        res = acceptance_rate(student, eval_samples, config.temperature)
        if theory_fn is not None:
            try:
                res["theory"] = theory_fn(student, eval_samples)
            except Exception as exc:  # measurement extras must not kill a long run
                res["theory_error"] = f"{type(exc).__name__}: {exc}"
    return res


def _record(run: _Run, ev: dict, extra_record: dict | None) -> dict:
    """The run's record after an evaluation ``ev``: training data and curve, held-out evaluation, forward
    times (what ``draft.json`` and ``record.json`` hold)."""
    config, state, samples = run.config, run.state, run.samples
    n_rows = sum(s.num_rows for s in samples)
    curve = state["loss_curve"]
    stride = max(1, len(curve) // 200)
    rec = {
        "base_model": TARGET_NAME,
        "format": "offline draft format (team contract): model.layers.{i}.* + model.norm.weight; "
                  "embeddings and tied head shared with the target",
        "objective": f"forward KL(target || draft) at T={config.temperature}, top-{config.topk} + rest bucket",
        "training": {
            "sequences": len(samples), "tokens": sum(len(s.tokens) for s in samples),
            "trained_positions": n_rows, "steps": state["steps"],
            "train_minutes": state["train_seconds"] / 60, "generation_minutes": state["gen_seconds"] / 60,
            "lr": config.lr, "batch_size": config.batch_size, "layers": config.layers,
            "new_tokens_per_sample": config.new_tokens, "gen_batch": config.gen_batch,
            "loss_curve": curve[::stride], "final_loss_ema": run.ema, "config": asdict(config),
            "machine": {**machine(), "torch": torch.__version__},
        },
        "evaluation": {
            "split": "heldout", "temperature": config.temperature,
            "mean_acceptance": ev["mean"], "mean_kl": ev["kl"], "positions": ev["positions"],
            "sequences": ev["sequences"], "acceptance_by_depth": ev["by_depth"][:64],
            "untrained_acceptance": state["initial"]["acceptance"],
            "weights": f"exported {config.export_dtype} weights",
        },
        "forward_time": run.timing,
    }
    if "theory" in ev:
        rec["evaluation"].update(ev["theory"])
    if "theory_error" in ev:
        rec["evaluation"]["theory_error"] = ev["theory_error"]
    if extra_record:
        rec.update(extra_record)
    return rec
