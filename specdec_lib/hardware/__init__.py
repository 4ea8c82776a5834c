"""Forward-time profiles t(n) and Sequoia's hardware-aware optimizer (Sequoia Sec. 3.3, Eq. 1).

* `profiling`: measuring t(n) (:func:`profile`), shape-only models of published shapes, the JSON files
  under ``data/hardware/``, and the command line ``python -m specdec_lib.hardware``;
* `cost_model`: what the profiles give (t(n), the draft's level cost) and the optimizers
  :func:`optimize_tree` (Speedup(n, d) = G(n, d) / (t(n) + d c)) and :func:`optimize_chain`;
* `overhead`: the decoder's own seconds per step (sampling, drawing, checks, verification, commits),
  which Eq. 1 leaves out, measured with the decoder on a null pair (:func:`decoder_overhead`);
* `plans`: the costs the optimizer plans with on this machine (:func:`machine_costs`), its plans as a table,
  and its plans for the papers' shapes on GPU-measured profiles (:func:`shape_plans`);
* `timed_check`: the trees timed against the optimizer's choice and the predicted-against-measured table.
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
from .plans import (
    FLAT_DRAFT_COST, FLAT_TIMES, PROFILED_SIZES, TOY_DRAFT_COST, TOY_TIMES, MachineCosts, OptimizerPlans, machine_costs,
    measured_costs, optimizer_plans, optimizer_table, shape_plans, table4_temperature, time_table, toy_costs,
)
from .timed_check import (
    check_table, pooled_steps, rescored_checks, round_speedup, timed_trees, timing_arms, with_measured,
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
    "PROFILED_SIZES", "TOY_TIMES", "TOY_DRAFT_COST", "FLAT_TIMES", "FLAT_DRAFT_COST", "MachineCosts", "toy_costs",
    "measured_costs", "machine_costs", "OptimizerPlans", "optimizer_plans", "optimizer_table", "table4_temperature",
    "shape_plans", "time_table", "timed_trees", "timing_arms", "round_speedup", "rescored_checks", "pooled_steps",
    "check_table", "with_measured",
]
