"""Verdict rules: one written rule per kind of claim, the checks that apply them to stored per-step
data, a power statement, a seed-stability check, and the table of ties (methods equal in expectation).

Every claim a notebook records is one of eight kinds (`RULES`). A rule states the quantity, the paired
design, what is computed exactly instead of sampled, the resampling unit of the CI (whole prompts, read
as the expanded percentile interval of `intervals`) and the minimum effect that counts (`MIN_EFFECT`).
"partly" (`PARTLY`) has one meaning: the estimate is on the claimed side but the claim is not
established. An estimate within `TIE_TOLERANCE` of the null is a tie. `power_statement` tells "decided"
from "underpowered"; `seed_stability` and `checked_claim` test verdicts under two bootstrap seeds (and
other Monte Carlo seeds). `NOTEBOOK_RULES` maps every notebook claim to its rule, `TIES` lists the
proven identities, and `registry` holds every reported claim.

The rules in full: docs/ARCHITECTURE.md, "Verdicts: written rules".

Modules: `rules` (the written rules), `decisions` (estimate + CI -> verdict), `checks` (rules applied to
stored frames), `recording` (seed stability, claim rows), `catalogue` (notebook claim -> rule, ties),
`registry` (the claims registry), `intervals` (the expanded percentile interval), `concavity` (a curve's
saturation).
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
