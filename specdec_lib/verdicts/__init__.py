"""Verdict rules: one written rule per kind of claim, the checks that apply them to stored per-step
data, a power statement, a seed-stability check, and the table of ties (methods equal in expectation).

Every claim a notebook records is one of eight kinds (`RULES`). Each rule states

* the **quantity** (what number the verdict is about),
* the **paired design** (what is held fixed between the two arms: contexts, drafted trees, random
  numbers),
* what is computed **exactly** instead of sampled (Rao-Blackwellisation: given a drafted tree the
  expected tokens per step, P(tau >= 1) and the whole accepted-length law of every verifier are
  exact, `specdec_lib.verifiers.exact_law`; given matched target/draft rows the acceptance vectors
  and rejection rates are exact, `specdec_lib.theory`; traversal's level-l terms can be integrated
  over the levels below l, `specdec_lib.theory.traversal_identity`),
* the **resampling unit** of the confidence interval (prompts: a clustered bootstrap that resamples
  whole prompts, keeping every step, copy and drafting seed of a prompt together, because the
  contexts of one prompt are dependent; read as the expanded percentile interval of
  `specdec_lib.verdicts.intervals`, which widens for few prompts so that 6 prompts still cover ~93%), and
* the **minimum effect** that counts.

**"partly" has one meaning** (`PARTLY`): the point estimate is on the claimed side (beyond the null in
the claimed direction, or inside the equivalence margin) but the claim is not established: the 95% CI
reaches the null (or leaves the margin) under either of two bootstrap seeds, or the estimate is below the
minimum effect that counts, or (trends only) two neighbouring cells are significantly reversed. A point
estimate on the wrong side is "not reproduced" whatever the CI (the `Decision.detail` then says
"contradicted" when the CI excludes the claimed side too, else "inconclusive, wrong side"). An estimate
within `TIE_TOLERANCE` (1e-9) of the null is a tie, "not reproduced" whatever the sign of its rounding.
`power_statement` says whether the CI was narrow enough to detect the paper's effect ("decided") or not
("underpowered"), so an inconclusive verdict can be read correctly.

`seed_stability` re-applies the rules with two bootstrap seeds (and, optionally, per drafting seed)
on stored per-step frames and lists the claims whose verdict changes. `checked_claim` records a claim under
two bootstrap seeds, doubling the resamples while they disagree (a CI end within the percentile's Monte-Carlo
error of the null), and records 'partly' for a claim still reproduced under one seed only. `checked_claim(...,
monte_carlo={seed: frame})` also applies a claim's rule to its frame recomputed with another seed of the
Monte Carlo integrals it was computed from (e.g. 03's index laws), which the bootstrap seeds cannot see.

`NOTEBOOK_RULES` maps every verdict expression written by hand in notebooks/00-06 to its rule
(tests/test_verdicts.py checks that every claim in the notebooks is mapped). `TIES` lists the method
pairs that are equal (in law given every tree, or in expectation) with the theorem and the test that
proves it, so a "+0.00% [-0.00, +0.00]" row is read as an identity, not as a measured tie.

`registry`: every reported claim with its owner, source, quote, rule, parameters and null test (`annotate`).

Modules: `rules` (the written rules), `decisions` (estimate + CI -> verdict), `checks` (rules applied to
stored frames), `recording` (seed stability, claim rows), `catalogue` (notebook claim -> rule, ties),
`registry` (the claims registry), `concavity` (a curve's saturation).
"""

from __future__ import annotations

from .catalogue import NOTEBOOK_RULES, TIES, rule_entry, rule_for
from .checks import (AllOfCheck, EveryCheck, GainCheck, claimed_sign, IdentityCheck, ModelGapCheck, SpeedupCheck, TrendCheck,
                     VectorLevelCheck, VectorStatisticCheck, bootstrap_indices, cluster_of, convergence_start, first_level_decision, paired_difference,
                     paired_sums)
from .concavity import ConcavityCheck, slope_drop
from .decisions import (Decision, cells_significantly_above, cells_significantly_below, decide_directional, decide_equivalence, decide_every,
                        decide_exact, decide_trend, power_statement)
from .recording import SEED_DEPENDENT, STABLE_MARK, checked_claim, evaluate, seed_stability, to_claim
from .rules import MIN_EFFECT, PARTLY, RULES, TIE_TOLERANCE, Rule
from . import registry
from .registry import annotate, entry_for, load_registry, size_of

__all__ = ["Rule", "RULES", "PARTLY", "MIN_EFFECT", "TIE_TOLERANCE", "Decision", "decide_directional", "decide_equivalence",
           "decide_exact", "decide_every", "decide_trend", "power_statement", "cells_significantly_above",
           "cells_significantly_below", "ConcavityCheck", "slope_drop",
           "cluster_of", "paired_sums",
           "bootstrap_indices", "paired_difference", "GainCheck", "TrendCheck", "EveryCheck", "AllOfCheck", "claimed_sign", "IdentityCheck", "ModelGapCheck",
           "VectorStatisticCheck", "VectorLevelCheck", "SpeedupCheck",
           "first_level_decision", "convergence_start",
           "evaluate", "seed_stability", "to_claim", "checked_claim", "SEED_DEPENDENT", "STABLE_MARK", "NOTEBOOK_RULES",
           "rule_entry", "rule_for", "TIES", "registry", "load_registry", "entry_for", "annotate", "size_of"]
