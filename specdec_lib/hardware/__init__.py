"""Forward-time profiles t(n) and Sequoia's hardware-aware optimizer (Sequoia Sec. 3.3, Eq. 1).

* `profiling`: measuring t(n) (:func:`profile`), shape-only models of published shapes, the JSON files
  under ``data/hardware/``, and the command line ``python -m specdec_lib.hardware``;
* `cost_model`: what the profiles give (t(n), the draft's level cost) and the optimizers
  :func:`optimize_tree` (Speedup(n, d) = G(n, d) / (t(n) + d c)) and :func:`optimize_chain`;
* `overhead`: the decoder's own seconds per step (sampling, drawing, checks, verification, commits),
  which Eq. 1 leaves out, measured with the decoder on a null pair (:func:`decoder_overhead`).
"""

from __future__ import annotations

from .cost_model import (
    CHAIN_VERIFIERS, SEQUOIA_DEMO_DRAFT_COST, SEQUOIA_DEMO_PROFILE, ChainPlan, TreePlan, best_at_size, level_cost,
    normalised_times,
    optimize_chain, optimize_tree, predicted_speedup, predicted_step_seconds, profile_column, profile_from_columns,
    profile_times, speedup_from_round_profiles,
)
from .overhead import (
    NULL_WIDTH, decoder_overhead, dp_tree_overheads, null_model, overhead_column, round_decoder_overhead,
)
from .profiling import (
    DATA_DIR, SHAPES, load_profile, main, profile, round_profile, save_profile, shape_config, shape_only_model,
)

__all__ = [
    "CHAIN_VERIFIERS", "main", "SHAPES", "DATA_DIR", "shape_config", "shape_only_model", "profile", "profile_times", "level_cost",
    "normalised_times",
    "save_profile", "load_profile", "TreePlan", "optimize_tree", "ChainPlan", "optimize_chain",
    "SEQUOIA_DEMO_PROFILE", "SEQUOIA_DEMO_DRAFT_COST", "predicted_step_seconds", "best_at_size",
    "predicted_speedup", "profile_column", "profile_from_columns", "round_profile",
    "speedup_from_round_profiles", "NULL_WIDTH", "null_model", "decoder_overhead", "dp_tree_overheads",
    "overhead_column", "round_decoder_overhead",
]
