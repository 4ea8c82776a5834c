"""The runs: the offline pair's distillation (`run_offline`), the notebook's profiles (`run_profile`, with
`tiny_llama` for the smoke profile) and the command line (`main`, ``python -m specdec_lib.training.distill``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Sequence

import torch

from ...data import load_prompts
from ..prompts import seed_instructions
from .data import DEFAULT_RUN_DIR, common_prefix_length
from .evaluate import _theory_extras, remeasure_export
from .export import DEFAULT_EXPORT_DIR, TARGET_NAME
from .train import DistillConfig, RunSettings, distill


def _project_prompts(split: str) -> list[str]:
    """Texts of the project's prompt set of ``split`` (`specdec_lib.data.load_prompts`)."""
    return [p.text for p in load_prompts(split=split)]


def run_offline(settings: RunSettings, config: DistillConfig | None = None, run_dir: Path | str = DEFAULT_RUN_DIR,
                device=None, target_model: str = TARGET_NAME, seeds: int = 6000,
                max_train_prompts: int | None = None, theory: bool = False) -> dict:
    """Distil the offline draft from ``target_model`` (default SmolLM2-135M-Instruct; ``config`` default
    `DistillConfig`): prompts are the project's training prompts plus ``seeds`` self-made instructions
    (interleaved, one project prompt every few seeds), held-out prompts from ``load_prompts("heldout")``;
    ``settings`` as in `distill`, its EOS, first trained position, theory hook and extra record set here."""
    from ...models import load_model  # imports transformers (heavy)

    config = config or DistillConfig()
    lm = load_model(target_model, device=device)
    texts_train = _project_prompts("train")
    texts_eval = _project_prompts("heldout")
    seed_texts = seed_instructions(seeds, seed=config.seed)
    # interleave the project's prompts (each appears about every len(seeds)/len(train) prompts)
    mixed, every = [], max(1, len(seed_texts) // max(1, len(texts_train)))
    ti = 0
    for i, s in enumerate(seed_texts):
        if i % every == 0 and ti < len(texts_train):
            mixed.append(texts_train[ti])
            ti += 1
        mixed.append(s)
    mixed += texts_train[ti:]
    # the project's prompts first: they are closest to what the draft is used for
    prompts_text = texts_train + mixed
    if max_train_prompts is not None:
        prompts_text = prompts_text[:max_train_prompts]
    train_ids = [lm.encode(t).tolist() for t in prompts_text]
    eval_ids = [lm.encode(t).tolist() for t in texts_eval]
    start = common_prefix_length(train_ids + eval_ids)
    extra = {"prompts": {"project_train": len(texts_train), "seed_instructions": len(seed_texts),
                         "heldout": len(texts_eval), "skipped_prefix_tokens": start}}
    theory_fn = _theory_extras() if theory else None
    if theory_fn is None:
        extra["theory_note"] = ("Sequoia / ERSS vectors not measured during training (slow on the CPU: Monte "
                                "Carlo over a 49k vocabulary); see measure_theory")
    settings = dataclasses.replace(settings, eos_token_id=lm.eos_token_id, start=start, theory_fn=theory_fn,
                                   extra_record=extra)
    return distill(lm.model, run_dir, train_ids, eval_ids, config, settings)


def tiny_llama(vocab_size: int = 64, layers: int = 4, hidden: int = 32, seed: int = 0):
    """A tiny random ``LlamaForCausalLM`` (tied embeddings) for tests and the smoke profile."""
    # lazy: transformers takes seconds to import; only model loading needs it
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=True, initializer_range=0.2)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper, more structured distributions than the default init
        model.model.embed_tokens.weight.normal_(0, 1.0)
    return model.eval()


def run_profile(profile: str = "default", minutes: float | None = None, layers: int = 2, device=None,
                target_model: str = TARGET_NAME, run_dir: Path | str | None = None, progress: bool = False) -> dict:
    """What notebooks/00_distill_draft.ipynb runs.

    * ``smoke``: a tiny random Llama, a few seconds of sampling and training (into a temp dir).
    * ``default``: a short demo distillation of the real target (``minutes``, default 2) on a small freshly
      sampled text into a temp dir; the committed draft is NOT touched.
    * ``full``: the real run (`run_offline`, ``minutes`` default 60, resuming ``distill_runs/``) that
      writes ``data/models/smollm2-135m-draft``.
    Returns ``{"profile", "record", "run_dir"}`` (``record`` of the run just made)."""
    if profile not in ("smoke", "default", "full"):
        raise ValueError(f"profile must be 'smoke', 'default' or 'full', got {profile!r}")
    if profile == "full":
        rec = run_offline(RunSettings(minutes or 60.0, export_dir=DEFAULT_EXPORT_DIR, resume=True, progress=progress),
                          DistillConfig(layers=layers), run_dir=run_dir or DEFAULT_RUN_DIR, device=device,
                          target_model=target_model)
        return {"profile": profile, "record": rec, "run_dir": str(run_dir or DEFAULT_RUN_DIR)}
    tmp = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix=f"distill_{profile}_"))
    if profile == "smoke":
        target = tiny_llama()
        gen = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, 64, (int(n),), generator=gen).tolist()
                   for n in torch.randint(2, 8, (40,), generator=gen)]
        cfg = DistillConfig(layers=min(layers, 3), lr=3e-3, batch_size=4, topk=16, gen_batch=8, new_tokens=16,
                            eval_prompts=8, eval_new_tokens=12, gen_minutes=0.05, train_minutes=0.1,
                            warmup_steps=2, timing_repeats=5, prefix_len=16)
        rec = distill(target, tmp, prompts[:32], prompts[32:], cfg,
                      RunSettings(minutes or 0.25, export_dir=tmp / "export", progress=progress, echo=False))
        return {"profile": profile, "record": rec, "run_dir": str(tmp)}
    cfg = DistillConfig(layers=layers, lr=1e-3, warmup_steps=5, batch_size=4, gen_batch=8, new_tokens=32,
                        eval_prompts=6, eval_new_tokens=32, gen_minutes=0.3, train_minutes=1.0, timing_repeats=7)
    rec = run_offline(RunSettings(minutes or 2.0, export_dir=tmp / "export", progress=progress, echo=False), cfg,
                      run_dir=tmp, device=device, target_model=target_model, seeds=200)
    return {"profile": profile, "record": rec, "run_dir": str(tmp)}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specdec_lib.training.distill``: a distillation run (`run_offline`) or, with ``--remeasure``,
    a new measurement of the exported draft (`remeasure_export`)."""
    ap = argparse.ArgumentParser(prog="python -m specdec_lib.training.distill",
                                 description="Distil the offline draft smollm2-135m-draft from SmolLM2-135M-Instruct.")
    ap.add_argument("--minutes", type=float, default=None, help="wall-clock budget of this invocation")
    ap.add_argument("--remeasure", action="store_true",
                    help="only re-measure the exported draft (acceptance, Sequoia / ERSS vectors, timings)")
    ap.add_argument("--head-vocab", type=int, default=None,
                    help="with --remeasure: (re)write the draft's head vocabulary, the N most frequent tokens")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--resume", action="store_true", help="continue the checkpoint and text in --run-dir")
    ap.add_argument("--run-dir", default=str(DEFAULT_RUN_DIR))
    ap.add_argument("--export-dir", default=str(DEFAULT_EXPORT_DIR))
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--device", default=None)
    ap.add_argument("--target", default=TARGET_NAME)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    ap.add_argument("--seeds", type=int, default=6000, help="self-made seed instructions")
    defaults = DistillConfig()
    for name in ("lr", "batch_size", "topk", "gen_batch", "new_tokens", "eval_prompts", "eval_new_tokens",
                 "gen_minutes", "train_minutes", "decay_fraction", "seed"):
        ap.add_argument("--" + name.replace("_", "-"), type=type(getattr(defaults, name)),
                        default=getattr(defaults, name))
    ap.add_argument("--theory", action="store_true", help="measure Sequoia / ERSS vectors at every round (slow)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    if args.remeasure:
        rec = remeasure_export(args.export_dir, args.run_dir, args.target, args.device,
                               head_vocab_size=args.head_vocab)
        print(json.dumps({k: rec["evaluation"].get(k) for k in (
            "mean_acceptance", "sequoia_positional_acceptance", "erss_r_vector")}, indent=1))
        return 0
    if args.minutes is None:
        ap.error("--minutes is required (unless --remeasure)")
    cfg = DistillConfig(layers=args.layers, **{n: getattr(args, n) for n in (
        "lr", "batch_size", "topk", "gen_batch", "new_tokens", "eval_prompts", "eval_new_tokens",
        "gen_minutes", "train_minutes", "decay_fraction", "seed")})
    settings = RunSettings(args.minutes, export_dir=None if args.no_export else args.export_dir, resume=args.resume,
                           progress=not args.no_progress)
    rec = run_offline(settings, cfg, run_dir=args.run_dir, device=args.device, target_model=args.target,
                      seeds=args.seeds, theory=args.theory)
    print(json.dumps({"mean_acceptance": rec["evaluation"]["mean_acceptance"],
                      "forward_time": rec["forward_time"]}, indent=1))
    return 0
