"""Distilling the offline draft ``smollm2-135m-draft`` from its target (SmolLM2-135M-Instruct).

The draft is the target's first L decoder layers and final norm (``LlamaForCausalLM`` with the target's
config but ``num_hidden_layers = L``), sharing the target's frozen embeddings and tied head
(`specdec_lib.models.offline.build_student`); only the layers and the norm train. The target samples
text at T = 1 and keeps its top-k next-token log-probs (`data`); the student minimises the forward KL
to them at every stored position (DistillSpec, Zhou et al. 2024, FKL; `training.losses.topk_kl`, one
step in `loss`); each round ends with the held-out acceptance sum_x min(p, q) (Leviathan et al. 2023)
on the weights rounded to the export dtype, a checkpoint, and an export when it is the best so far
(`train`, `export`, `evaluate`). `runs` holds the offline run, the notebook's profiles and::

    python -m specdec_lib.training.distill --minutes 60 --layers 2            # fresh run
    python -m specdec_lib.training.distill --minutes 30 --resume              # continue (more text, more steps)
"""

from __future__ import annotations

from ..prompts import seed_instructions
from .data import (
    DEFAULT_RUN_DIR, REPO_ROOT, Sample, common_prefix_length, load_samples, sample_continuations, save_samples,
)
from .evaluate import (
    acceptance_rate, loss_curve_frame, measure_theory, remeasure_export, summary_table,
)
from .export import (
    DEFAULT_EXPORT_DIR, LAYERS_FILE, RECORD_FILE, TARGET_NAME, committed_record, export_draft, load_exported,
    write_head_vocab,
)
from .loss import student_rows, train_step, trainable_parameters
from .runs import main, run_offline, run_profile, tiny_llama
from .train import DistillConfig, RunSettings, distill, load_checkpoint, save_checkpoint

__all__ = [
    "DistillConfig", "RunSettings", "Sample", "seed_instructions", "common_prefix_length", "sample_continuations",
    "save_samples", "load_samples", "student_rows", "train_step", "acceptance_rate", "trainable_parameters",
    "save_checkpoint", "load_checkpoint", "export_draft", "load_exported", "write_head_vocab", "measure_theory",
    "remeasure_export", "distill", "committed_record", "summary_table", "loss_curve_frame", "run_offline",
    "tiny_llama", "run_profile", "main", "DEFAULT_RUN_DIR", "DEFAULT_EXPORT_DIR", "REPO_ROOT", "LAYERS_FILE",
    "RECORD_FILE", "TARGET_NAME",
]
