"""Distilling the offline draft ``smollm2-135m-draft`` from its target (SmolLM2-135M-Instruct).

The draft is the contract's "offline draft format": a ``LlamaForCausalLM`` with the target's config
except ``num_hidden_layers = L``, initialised from the target's first L layers, sharing the target's
frozen token embeddings and tied LM head (`specdec_lib.models.offline.build_student`). Only the
decoder layers and the final norm are trained.

Pipeline (all of it resumable; a run directory, by default ``distill_runs/smollm2-135m-draft``, holds
everything):

1. **Text.** The target samples continuations at temperature 1 (batched, KV cache) from the project's
   training prompts (`specdec_lib.data.load_prompts("train")`) and many self-made seed instructions
   (`seed_instructions`). For every position from the user turn on we keep the target's top-k next-token
   log-probabilities (``topk`` = 128 by default), so training never runs the target again. Shards are
   safetensors files under ``<run_dir>/data/``.
2. **Training.** Forward KL from the target's next-token distribution p to the student's q at T = 1, at
   every stored position (DistillSpec, Zhou et al. 2024, the FKL objective). With the top-k cache the KL is
   the exact KL between p and q coarsened to the k stored tokens plus one "rest" bucket
   (`topk_kl`); it equals the full KL when k = V and is a lower bound otherwise. AdamW on the layers and
   the final norm.
3. **Measurement.** On held-out prompts (``split="heldout"``) the target samples continuations; the mean
   acceptance rate at T = 1 is the mean over those positions of ``sum_x min(p(x), q(x))`` (Leviathan et
   al. 2023, Eq. for beta), and the one-token forward times of draft and target are medians with a prefix
   KV cache of ``prefix_len`` tokens (`forward_time_ms`).
4. **Export.** Every checkpoint also writes the draft (``layers.safetensors`` in bfloat16 +
   ``draft.json`` with the training record and the acceptance measured on the *exported*, bf16-rounded
   weights) when its held-out acceptance is at least the best so far, so a run that is stopped at any
   time leaves a usable draft.

Command line::

    python -m specdec_lib.training.distill --minutes 60 --layers 2            # fresh run
    python -m specdec_lib.training.distill --minutes 30 --resume              # continue (more text, more steps)

Everything model-specific is in `run_offline`; `distill` itself works on any HF causal LM and token
lists (the tests and the notebook's smoke profile use a tiny random Llama).

Modules (the same cut as the sister package `specdec_lib.training.feature`):

* `prompts`: the self-made seed instructions;
* `data`: target-sampled text (`Sample`, `sample_continuations`) and its safetensors shards;
* `loss`: the top-k forward KL and one AdamW step on the student's own parameters;
* `train`: `DistillConfig`, checkpoints and the resumable loop `distill`;
* `export`: the draft format (``layers.safetensors`` + ``draft.json``), its loading and head vocabulary;
* `evaluate`: acceptance, forward times, Sequoia / ERSS vectors, re-measuring the export, tables;
* `runs`: `run_offline`, `run_profile` (the notebook), `tiny_llama` and the command line `main`.
"""

from __future__ import annotations

from .data import (
    DEFAULT_RUN_DIR, REPO_ROOT, Sample, common_prefix_length, load_samples, sample_continuations, save_samples,
)
from .evaluate import (
    acceptance_rate, forward_time_ms, loss_curve_frame, measure_forward_times, measure_theory, remeasure_export,
    summary_table,
)
from .export import (
    DEFAULT_EXPORT_DIR, LAYERS_FILE, RECORD_FILE, TARGET_NAME, committed_record, export_draft, load_exported,
    write_head_vocab,
)
from .loss import full_kl, student_rows, topk_kl, train_step, trainable_parameters
from .prompts import seed_instructions
from .runs import main, run_offline, run_profile, tiny_llama
from .train import DistillConfig, distill, load_checkpoint, save_checkpoint

__all__ = [
    "DistillConfig", "Sample", "seed_instructions", "common_prefix_length", "sample_continuations",
    "save_samples", "load_samples", "topk_kl", "full_kl", "student_rows", "train_step",
    "acceptance_rate", "forward_time_ms", "trainable_parameters", "save_checkpoint", "load_checkpoint",
    "export_draft", "load_exported", "write_head_vocab", "measure_theory", "remeasure_export", "distill", "committed_record", "summary_table", "loss_curve_frame", "run_offline", "tiny_llama", "run_profile", "main",
]
