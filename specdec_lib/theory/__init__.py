"""Theory of tree drafting: Sequoia's positional model and DP, ERSS's tau* tree and bounds, closed forms.

Everything here is a pure float64 function of acceptance statistics; nothing runs a model. The papers
in our words, with the corrected pseudo-code and the golden numbers the tests check, are
docs/methods/sequoia.md and docs/methods/erss.md.

Conventions (docs/ARCHITECTURE.md, docs/methods/sequoia.md §2.0)
----------------------------------------------------
* A tree is a parents list in the ``DraftTree`` convention: ``parents[0] == -1``, ``parents[i] < i`` and
  siblings ordered by index, so the k-th child (by index) of a node is its k-th drafted child.
* Size and depth count the root: a chain of 8 drafted tokens has size 9 and depth 9.
* ``acceptance_vector[k-1] = p_k`` is Sequoia's *positional acceptance*: the marginal probability that the
  k-th child of an accepted node is *the* accepted child (children 1..k-1 rejected, child k accepted), so
  ``sum(p) <= 1`` (docs/methods/sequoia.md §2.1, Defs 3.1-3.2). ERSS's 0th-order index distribution ``r(i)``
  (docs/methods/erss.md §3.2) is the same object: the probability that the i-th draft at a node is accepted.
* Expected tokens per step count the bonus / correction token (the root contributes 1).

Modules
-------
* `closed_forms`: the positional model, ``expected_tokens_positional`` (Prop. 3.4), closed forms for chains
  (Leviathan), k independent sequences, full k-ary trees, Sequoia's Table 1 bounds and the best baselines
  per size.
* `sequoia`: Sequoia's dynamic programme (App. C.2, Algorithms 4-5 with the erratum fixed):
  ``sequoia_table``, ``sequoia_tree``; power-law acceptance and Thm 3.6 / C.3.
* `erss`: ERSS's optimal tree tau* (Algorithm 3), closed forms, entropy, Theorem 4.2 and Lemma 4.3 bounds.
* `acceptance`: measuring acceptance from matched target / draft rows: ``positional_acceptance`` (Sequoia's
  p_k for several drafting/verification schemes) and ``erss_index_distribution`` (ERSS's r).
* `divergences`: total variation, KL, harmonic-mean divergence, ERSS's exact first acceptance.
* `checks`: the input checks they share.
"""

from __future__ import annotations

from .acceptance import ACCEPTANCE_SCHEMES, acceptance_by_scheme, erss_index_distribution, positional_acceptance
from .closed_forms import (
    SEQUOIA_REPO_COUNTS, SEQUOIA_REPO_NONE, best_k_sequences, best_kary, chain_expected_tokens, chain_speedup,
    expected_tokens_positional, k_sequences_expected_tokens, kary_expected_tokens, sequoia_repo_acceptance,
    table1_bounds,
)
from .divergences import (erss_first_acceptance, erss_joint_acceptance, harmonic_mean_divergence, kl_divergence,
                          total_variation)
from .erss import (
    Lemma43Result, batch_expected_tokens, erss_specinfer_expected_tokens, index_entropy, lemma43_bound,
    lemma43_fixed_curve, STRATEGIES, strategy_shape, tau_star_tree, tau_star_vertices, tunstall_bound,
)
from .sequoia import (
    SequoiaTable, geometric_acceptance, growth_threshold, power_law_acceptance, power_law_construction, power_law_fit,
    sequoia_growth_lower_bound,
    sequoia_table, sequoia_tree,
)

__all__ = [
    # positional model
    "expected_tokens_positional", "chain_expected_tokens", "chain_speedup", "k_sequences_expected_tokens",
    "kary_expected_tokens", "best_k_sequences", "best_kary", "table1_bounds",
    "SEQUOIA_REPO_COUNTS", "SEQUOIA_REPO_NONE", "sequoia_repo_acceptance",
    # DP
    "SequoiaTable", "sequoia_table", "sequoia_tree",
    # power law
    "geometric_acceptance", "power_law_acceptance", "power_law_construction", "power_law_fit",
    "sequoia_growth_lower_bound", "growth_threshold",
    # ERSS
    "tau_star_tree", "tau_star_vertices", "STRATEGIES", "strategy_shape", "batch_expected_tokens",
    "erss_specinfer_expected_tokens",
    "index_entropy", "tunstall_bound", "Lemma43Result", "lemma43_bound", "lemma43_fixed_curve",
    # measurement
    "ACCEPTANCE_SCHEMES", "positional_acceptance", "acceptance_by_scheme", "erss_index_distribution", "total_variation",
    "kl_divergence", "harmonic_mean_divergence", "erss_first_acceptance", "erss_joint_acceptance",
]
