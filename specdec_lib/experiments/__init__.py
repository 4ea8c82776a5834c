"""Experiment helpers the notebooks call: profiles, the model pair, prompts, drafted trees, paired
exact comparisons of verifiers, and summaries with bootstrap confidence intervals.

The expensive part of every acceptance experiment is drafting trees from the real pair and scoring them
with the target; the exact expected number of emitted tokens of a verifier on a given tree is cheap
(`specdec_lib.verifiers.expected_tokens`). So the notebooks

1. collect drafted trees once per (prompt, shape, sampling, temperature) along target-distributed
   contexts (`collect_trees`: the text is advanced by one lossless verifier, so every step starts from a
   context with the target's law),
2. evaluate every verifier exactly on the same trees (`paired_expected_tokens`): a paired comparison with
   no verification noise, which resolves differences of a few percent with few prompts,
3. summarise per group with the pooled mean over steps (tokens per step = tokens per target call) and a
   bootstrap confidence interval over prompts (`summarize`, `paired_gain`).

Nested shapes are evaluated on one drafted tree: a chain of n drafted tokens is the first n nodes of a
longer chain, and a tree restricted to its first d levels is a tree of depth d drawn the same way
(`restrict_depth`), since every level is drawn given the levels above only.

With ``profile="smoke"`` the pair is a random bigram toy pair (`specdec_lib.models.synthetic`) over a tiny
vocabulary and the prompts are short random token tuples, so every notebook runs in seconds.

Modules: `setup` (profiles, pair, prompts), `collection` (drafted trees, matched rows), `paired` (exact
paired evaluation), `summaries` (pooled means, bootstrap CIs, gains), `stars` (one-level views and laws),
`shared_contexts` (different trees drafted at the same target-sampled contexts, paired per context),
`timing` (wall clock), `traversal_checks` (Traversal's identities on a pair's trees), `rejection` (one tree
level's verifiers compared per context, against each other and the optimal multi-draft acceptance),
`tree_sizes` (Sequoia's DP tree against k×L and k-ary trees of each size). Subtree views (`restrict_depth`, `restrict_to_shape`, ...) live in `specdec_lib.tree`
and are re-exported here.
"""

from __future__ import annotations

from ..tree import index_tuples, restrict_depth, restrict_to_shape, truncate_chain
from .collection import NoRowsError, TreeRecord, collect_trees, matched_rows, replicate_shape, split_copies
from .exact_toys import block_token_gap_table, hsd_exact_table
from .rejection import (ceiling_differences, first_child_difference, least_rrs_gap, optimal_acceptance_table,
                        rejection_gaps, spectr_gaps)
from .paired import MEASURED_ONLY, RAO_BLACKWELLISED, applicable, paired_expected_tokens, paired_tokens_by_prompt
from .shared_contexts import model_gap_frame, paired_tokens_at_shared_contexts, rows_at_shared_contexts
from .setup import (DRAFT_MODEL, PROFILES, TARGET_MODEL, Pair, PromptIds, load_pair, parse_param,
                    prompt_categories, prompts_for, settings, settings_table, spread_prompts, toy_pair, with_draft)
from .stars import (INDEX_LAW_SCHEME, batch_tokens_by_context, ccdf, first_level_against_optimum, index_law_at_rows, kseq_rejection_from_rows,
                    positional_vector, capped_vector, sampled_accepted_lengths, single_draft_acceptance, star_index_law,
                    star_rejection_from_rows, star_views)
from .summaries import bootstrap_ratio, equal_size_pairs, fmt_gain, gain_verdict, paired_gain, summarize
from .timing import TIMING_COLUMNS, fastest_arm, interleaved_timing, target_nll, timed_generation
from .traversal_checks import collect_depth_trend, collect_first_level, real_pair_check
from .tree_sizes import SizeArms, estimator_table, size_arms, size_summary

__all__ = ["block_token_gap_table", "hsd_exact_table", "model_gap_frame", "PROFILES", "TARGET_MODEL", "DRAFT_MODEL", "parse_param", "settings", "settings_table", "Pair",
           "toy_pair", "load_pair", "with_draft", "PromptIds", "prompts_for", "spread_prompts", "prompt_categories", "NoRowsError", "TreeRecord",
           "replicate_shape", "split_copies", "collect_trees", "paired_tokens_by_prompt", "matched_rows",
           "paired_tokens_at_shared_contexts", "rows_at_shared_contexts", "interleaved_timing", "target_nll", "TIMING_COLUMNS",
           "restrict_depth", "truncate_chain", "index_tuples",
           "restrict_to_shape", "RAO_BLACKWELLISED", "MEASURED_ONLY", "applicable", "paired_expected_tokens",
           "summarize", "bootstrap_ratio", "equal_size_pairs", "fastest_arm", "star_views", "star_index_law", "positional_vector", "capped_vector",
           "star_rejection_from_rows", "kseq_rejection_from_rows", "index_law_at_rows", "batch_tokens_by_context", "INDEX_LAW_SCHEME", "first_level_against_optimum",
           "single_draft_acceptance", "sampled_accepted_lengths", "ccdf", "paired_gain", "gain_verdict", "fmt_gain",
           "timed_generation",
           "collect_first_level", "collect_depth_trend", "real_pair_check",
           "rejection_gaps", "spectr_gaps", "first_child_difference", "optimal_acceptance_table", "ceiling_differences",
           "least_rrs_gap", "SizeArms", "size_arms", "estimator_table", "size_summary"]
