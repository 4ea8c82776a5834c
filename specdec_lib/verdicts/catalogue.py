"""Which rule decides each notebook claim (`NOTEBOOK_RULES`, `rule_for`) and the table of ties: method
pairs equal in law or in expectation, with the theorem and the test that proves it (`TIES`).

`NOTEBOOK_RULES` maps the claim texts as the notebooks' code writes them (f-string fields kept) to a rule
kind; the claims registry (`registry`) holds every reported claim with its rule kind, parameters and null
test, and its kind agrees with `rule_for` for every reported claim (tests/test_claim_registry.py).
`registry_entry` finds a claim's registry entry."""

from __future__ import annotations

from .registry import claim_pattern, entry_for

# ----------------------------------------------------------------------------------------- mapping

NOTEBOOK_RULES: tuple[tuple[str, str, str, str], ...] = (
    # (notebook, claim text prefix, today's hand-written expression, rule)
    ("00_distill_draft", "held-out mean acceptance at T=1 >= 0.6", "mean_acceptance >= 0.6", "threshold"),
    ("00_distill_draft", "draft forward <= 1/4 of the target's", "ratio <= 0.25", "threshold"),
    ("00_distill_draft", "untrained truncations are poor drafts", "untrained_acceptance <= 0.18", "threshold"),
    ("00_distill_draft", "distillation improves on the untrained truncation", "mean > untrained", "superiority"),
    ("00_distill_draft", "feature draft (EAGLE family): held-out acceptance at T=1 >= 0.6", "mean_acceptance >= 0.6",
     "threshold"),
    ("00_distill_draft", "quantized self-draft (target requantized to 4 bits): held-out acceptance at T=1 in the papers' ",
     "0.6 <= CI low and CI high <= 0.8", "threshold"),
    ("00_distill_draft", "feature draft above the independent draft on the same held-out positions",
     "checked_claim(GainCheck feature vs independent, per prompt)", "superiority"),
    ("07_regime", "[synthetic draft] The interpolated family reaches the goal acceptances", "hit and monotone",
     "threshold"),
    ("07_regime", "[synthetic draft] Gains at the papers' acceptance (0.6–0.8) exceed the real draft's",
     "checked_claim(regime_growth.GrowthCheck: trend rule per comparison, every rule over them)", "every"),
    ("07_regime", "[synthetic draft, tokens/step] Block verification is optimal among chain verifiers",
     "asps - block <= 0", "noninferiority"),
    ("07_regime", "[synthetic draft, tokens/step] {title} at acceptance 0.6–0.8", "regime.range_verdict",
     "superiority"),
    ("07_regime", "[real draft in the regime, tokens/step] {title} with {regime}", "regime.range_verdict",
     "superiority"),
    ("01_asps", "Table 1: maximal coupling", "abs(t1 - 1.8) < 1e-12", "exact"),
    ("01_asps", "Exact fixture B", "err < 1e-9", "exact"),
    ("01_asps", "n = 1: ASpS = SpS", "diff1 < 1e-9 (max per tree)", "exact"),
    ("01_asps", "n = {n}: ASpS > SpS in tokens per step", "checked_claim(GainCheck asps vs token, n)", "superiority"),
    ("01_asps", "n = {nmax}, {cat}: ASpS > SpS", "checked_claim(GainCheck, one category)", "superiority"),
    ("01_asps", "[second drafter] n = {nmax}: ASpS > SpS in tokens per step",
     "checked_claim(GainCheck asps vs token, n, the second drafter)", "superiority"),
    ("01_asps", "The gain generally grows with n", "checked_claim(TrendCheck over n = 2, 5, nmax)", "trend"),
    ("01_asps", "ATN saturates with n", "checked_claim(ConcavityCheck of SpS over n = 2, 5, nmax)", "trend"),
    ("01_asps", "PPL unchanged (distribution preserved)",
     "checked_claim(GainCheck asps vs token on nll_per_token, equivalence, difference)", "equivalence"),
    ("01_asps", "PTT improves with ASpS, by less than ATN",
     "checked_claim(AllOfCheck: SpeedupCheck tokens/s, SpeedupCheck seconds per step; end to end)", "every"),
    ("02_traversal", "Tra.V > Tok.V in acceptance length", "checked_claim(GainCheck traversal_rb vs token)",
     "superiority"),
    ("02_traversal", "Tra.V > Tok.V on binary trees drafted without replacement",
     "checked_claim(GainCheck traversal_rb vs token, RRSw-drafted trees)", "superiority"),
    ("02_traversal", "Tra.V > Tok.V on EAGLE's sparse tree drafted without replacement", "checked_claim(GainCheck traversal_rb vs token)",
     "superiority"),
    ("02_traversal", "[second drafter] Tra.V > Tok.V", "checked_claim(GainCheck traversal_rb vs token, the second drafter)", "superiority"),
    ("02_traversal", "Gain grows with {shape} depth", "checked_claim(TrendCheck over depth, traversal_rb)", "trend"),
    ("02_traversal", "P(τ ≥ 1) is the same for Tra.V and Tok.V",
     "checked_claim(IdentityCheck traversal_rb vs token on p_accept_first)", "exact"),
    ("02_traversal", "On chains Tra.V equals Block Verification", "checked_claim(IdentityCheck)", "exact"),
    ("02_traversal", "Gain grows with temperature", "checked_claim(TrendCheck over temperature)", "trend"),
    ("02_traversal", "Tok.V acceptance length falls with temperature", "checked_claim(TrendCheck level over temperature)",
     "trend"),
    ("02_traversal", "Throughput gain < acceptance gain",
     "checked_claim(SpeedupCheck traversal vs token on verify_s / steps, end to end)", "superiority"),
    ("03_erss", "ERSS matches GSS under τ* at every drafted k", "checked_claim(EveryCheck of equivalence GainChecks, margin 5%)",
     "every"),
    ("03_erss", "k = 1: GSS accepts the first draft at least as often as ERSS", "r_GSS(1) >= r_ERSS(1) - 1e-9",
     "exact"),
    ("03_erss", "C1 batch, k = 1: GSS > ERSS", "checked_claim(GainCheck, direction '<')", "superiority"),
    ("03_erss", "C1 batch, k ≥ 3: ERSS > GSS", "checked_claim(GainCheck)", "superiority"),
    ("03_erss", "[second drafter] C1 batch, k ≥ 3: ERSS > GSS", "checked_claim(GainCheck, the second drafter)", "superiority"),
    ("03_erss", "C2 sequence: GSS > ERSS", "checked_claim(GainCheck, direction '<')", "superiority"),
    ("03_erss", "C3 empirical sequence curve plateaus above",
     "checked_claim(EveryCheck over method, ModelGapCheck sequence vs 0th-order G from r at the same contexts)",
     "every"),
    ("03_erss", "C4 SpecInfer tree", "checked_claim(EveryCheck over method, GainCheck specinfer vs sequence at equal k, per context)",
     "every"),
    ("03_erss", "C5 τ* is the best strategy",
     "checked_claim(EveryCheck over method x other strategy, GainCheck τ* vs it, paired per context)", "every"),
    ("03_erss", "τ* theory ≥ every other theoretical curve", "ts >= max - 1e-9 (deterministic)", "exact"),
    ("03_erss", "Lemma 4.3 bound ≥ τ* theory", "bound >= ts - 1e-9 (deterministic)", "exact"),
    ("03_erss", "C6 under τ*, GSS and ERSS converge",
     "checked_claim(TrendCheck over k of ERSS vs GSS under τ*, towards 0, from the widest 0th-order gap (convergence_start), per prompt)", "trend"),
    ("04_block", "Figure 3: exact CCDF", "err < 6e-5 (printed to 4 decimals)", "exact"),
    ("04_block", "Toy γ = 10: E[τ] token vs block", "abs(e - paper) < 1e-5", "exact"),
    ("04_block", "BE(block) > BE(token)", "checked_claim(GainCheck block vs token)", "superiority"),
    ("04_block", "Gain grows with γ", "checked_claim(TrendCheck over γ)", "trend"),
    ("04_block", "[second drafter] BE(block) > BE(token)", "checked_claim(GainCheck block vs token)", "superiority"),
    ("04_block", "The better drafter gains more", "checked_claim(TrendCheck over the drafters' acceptance)", "trend"),
    ("04_block", "BE grows with γ (token verification)", "checked_claim(TrendCheck over γ, level)", "trend"),
    ("04_block", "Gain grows with temperature", "checked_claim(TrendCheck over temperature)", "trend"),
    ("04_block", "At T = 0 (greedy) block verification keeps the tokens token verification keeps",
     "decide_exact(max |block - token| tokens per step at T = 0)", "exact"),
    ("04_block", "Gain {in every / not negative in any} prompt category", "checked_claim(EveryCheck of superiority cells)", "every"),
    ("04_block", "Wall-clock gain of block over token", "checked_claim(SpeedupCheck block vs token, end to end)",
     "superiority"),
    ("04_block", "Table 4 ordering on the toy", "token < greedy < block (both inequalities)", "every"),
    ("04_block", "Table 4: greedy block (Alg. 6) beats token", "checked_claim(GainCheck)", "superiority"),
    ("04_block", "Table 4: block beats greedy block", "checked_claim(GainCheck)", "superiority"),
    ("04_block", "HSD is lossless", "worst exact error < 1e-9", "exact"),
    ("04_block", "HSD Algorithm 2 is lossless", "max |output law - target| < 1e-9 (exact enumeration)", "exact"),
    ("04_block", "HSD Algorithm 2 has Block Verification's one-step law", "max |law - Block's law| < 1e-12", "exact"),
    ("04_block", "HSD's released code is not lossless", "max |output law - target| > 1e-3", "threshold"),
    ("04_block", "HSD's released code > Block Verification in tokens per step",
     "checked_claim(GainCheck hsd_released vs block)", "superiority"),
    ("04_block", "HSD > token in tokens per step", "checked_claim(GainCheck hsd vs token)", "superiority"),
    ("04_block", "HSD > Block Verification in tokens per step", "checked_claim(GainCheck hsd vs block)", "superiority"),
    ("05_sequoia", "Figure 3: Sequoia's rejection rate {below / ≤} SpecInfer's and top-k's",
     "every cell significantly below (cells_significantly_below: Holm, family-wise 5%)", "every"),
    ("05_sequoia", "Figure 3: Sequoia's rejection rate {below / ≤} SpecTr's",
     "every cell with k >= 2 significantly below (cells_significantly_below: Holm, family-wise 5%)", "every"),
    ("05_sequoia", "Sequoia's rejection rate falls as a power law in k",
     "checked_claim(AllOfCheck: VectorLevelCheck b and fit gain per temperature)", "every"),
    ("05_sequoia", "k = 1: Sequoia = SpecInfer", "d1 < 1e-9 (max per context)", "exact"),
    ("05_sequoia", "SpecInfer degrades at low temperature", "ratio(T_lo) > ratio(T_hi)", "trend"),
    ("05_sequoia", "Top-k degrades at high temperature", "ratio(T_hi) > ratio(T_lo)", "trend"),
    ("05_sequoia", "Sequoia trees give more tokens per step than SpecInfer", "checked_claim(GainCheck, paired per prompt)", "superiority"),
    ("05_sequoia", "[second drafter] Sequoia trees give more tokens per step than SpecInfer",
     "checked_claim(GainCheck, paired per context, the second drafter)", "superiority"),
    ("05_sequoia", "Sequoia trees beat full k-ary trees", "checked_claim(GainCheck, paired per prompt)", "superiority"),
    ("05_sequoia", "Sequoia trees beat branching k-ary trees", "checked_claim(GainCheck, paired per prompt)", "superiority"),
    ("05_sequoia", "Scalability: Sequoia keeps growing", "growth(sq) > growth(kl), partly sq grows", "trend"),
    ("05_sequoia", "Table 1: k×L and k-ary trees stay below their upper bounds",
     "checked_claim(AllOfCheck: ModelGapCheck measured vs Table 1 bound per tree and size, '<')", "every"),
    ("05_sequoia", "Measured tokens per step close to F(T)",
     "checked_claim(AllOfCheck over sizes, ModelGapCheck '=' margin 10%: Sequoia tree vs F(T) from the vectors at the same contexts)",
     "every"),
    ("05_sequoia", "Optimal trees are deeper at low temperature",
     "checked_claim(VectorStatisticCheck: DP depth from the vector at Tlo minus at Thi, prompts resampled)", "trend"),
    ("05_sequoia", "Top-p = {tp}: Sequoia sampling beats SpecInfer", "checked_claim(GainCheck, paired per prompt)", "superiority"),
    ("05_sequoia", "Hardware-aware optimizer: flatter t(n)", "plan_flat.size > plan.size (deterministic)", "exact"),
    ("05_sequoia", "The optimizer's tree is the fastest of the timed trees",
     "checked_claim(AllOfCheck over the other trees, SpeedupCheck noninferiority margin 5%: interleaved runs paired by prompt)",
     "every"),
    ("05_sequoia", "The optimizer's predicted speedups match",
     "checked_claim(AllOfCheck over trees, SpeedupCheck '=' margin 20%: measured / predicted speedup - 1, prompts resampled; the prediction, Eq. 1 "
     "with the decoder's measured overhead per step (hardware.overhead), recomputed from each resample's per-round profiles and overheads)",
     "every"),
    ("05_sequoia", "End-to-end speedup of the optimizer's tree",
     "checked_claim(SpeedupCheck '>': pooled tokens/s over autoregressive's, interleaved runs paired by prompt)",
     "superiority"),
    ("05_sequoia", "Larger targets get smaller optimal trees",
     "size(13B) <= size(7B) at every T and < at one, partly <= only (deterministic, recorded GPU profiles)", "exact"),
    ("05_sequoia", "The optimal acceptance is at least as high without replacement", "decide_exact(min difference)",
     "exact"),
    ("05_sequoia", "Existing verifiers (RRS) fall short of the optimal acceptance",
     "decide_directional(least paired gap, +-1.96 SE over contexts)", "superiority"),
    ("06_leaderboard", "HSD above Block Verification on every chain tested", "checked_claim(EveryCheck hsd vs block)",
     "every"),
    ("06_leaderboard", "HSD's released code above Block Verification on every chain tested",
     "checked_claim(EveryCheck hsd_released vs block)", "every"),
    ("06_leaderboard", "{m} ≥ {b} in tokens per step on every shape",
     "checked_claim(EveryCheck of noninferiority GainChecks)", "every"),
    ("06_leaderboard", "Traversal = block on chains", "checked_claim(IdentityCheck)", "exact"),
    ("06_leaderboard", "ERSS vs GSS on the same Sequoia tree shape",
     "checked_claim(EveryCheck of equivalence GainChecks, margin 5%)", "every"),
    ("06_leaderboard", "Among the shapes tested, a Sequoia DP tree",
     "checked_claim(AllOfCheck of superiority GainChecks, Sequoia vs the tree of its size, paired by prompt)", "every"),
    ("06_leaderboard", "Tokens per second of speculative decoding",
     "checked_claim(SpeedupCheck of the selection prompts' fastest arm, on the confirmation prompts)", "superiority"),
    ("06_leaderboard", "RRS's and SpecTr's first levels are at most the optimal acceptance",
     "decide_exact(largest excess over the optimum)", "exact"),
)
"""Every claim written in notebooks/00-06 (text prefix as in the notebook, f-string fields kept) ->
the hand-written verdict expression today -> the rule that replaces it. Claims recorded with
`results.not_applicable` map to the rule ``not_applicable``."""


def rule_entry(claim_text: str, notebook: str | None = None) -> tuple[str, str, str, str]:
    """The `NOTEBOOK_RULES` entry of a notebook claim, by its text (f-string fields match anything) and,
    when given, its notebook (some claim texts repeat across notebooks)."""
    for entry in NOTEBOOK_RULES:
        if notebook is not None and entry[0] != notebook:
            continue
        if claim_pattern(entry[1]).match(claim_text):
            return entry
    raise KeyError(f"no rule for claim {claim_text!r}")


def rule_for(claim_text: str, notebook: str | None = None) -> str:
    """The rule kind of a notebook claim, by its text (and notebook)."""
    return rule_entry(claim_text, notebook)[3]


def registry_entry(claim_text: str, notebook: str):
    """The claims-registry entry (`registry.Entry`) of a notebook's claim, by its notebook and text."""
    return entry_for(notebook, claim_text)


# ----------------------------------------------------------------------------------------- ties

TIES: dict[tuple[str, str, str], tuple[str, str]] = {
    ("traversal", "block", "chains"): (
        "Traversal Verification Thm 3.4 (and docs/methods/traversal.md §2.6): on a chain, traversal's rates rho_i and "
        "h_i = S_i / (S_i + 1 - rho_i) are Block Verification's, and its backward scan stops at the last "
        "success of the same coins, so the output law given EVERY chain is identical (stronger than the "
        "paper's equal E[N])",
        "tests/test_tree_verifiers_exact.py::test_traversal_equals_block_on_chains"),
    ("block", "asps", "chains"): (
        "Observed identity, not claimed by either paper: ASpS's per-prefix acceptance D_i equals Block's "
        "rho_i = min(1, rho_{i-1} p/q) (Block Lemma 3's upper bound P(tau >= i | x^i) = rho_i, attained by "
        "both), and their residual emissions agree, so the law given every chain is the same; exact in "
        "rationals on random toy chains",
        "tests/test_verdicts.py::test_tie_asps_equals_block_in_exact_rationals "
        "(float64: tests/test_chain_verifiers_exact.py::test_asps_and_block_have_the_same_law_on_every_chain)"),
    ("asps", "token", "one drafted token"): (
        "With gamma = 1 ASpS, block and traversal all reduce to the maximal coupling (accept min(1, p/q), "
        "residual norm([p - q]_+)): SpS; so n = 1 is equal per draft",
        "tests/test_chain_verifiers_exact.py::test_gamma_one_asps_and_block_equal_token"),
    ("traversal", "token", "stars (depth 1)"): (
        "On a star every child is a leaf: traversal's rho(child) = min(1, r(x)/D(x)) and root updates (rho(root) = 1) "
        "are token-level RRS's, so the law given every star is identical",
        "tests/test_traversal_identity.py::test_traversal_equals_token_on_stars"),
    ("traversal", "token", "P(tau >= 1), any tree"): (
        "Lemma A.2 + identical root updates: E[P_traversal(tau >= 1) | root children] = P_token(tau >= 1 | root "
        "children), averaged over the drafting below level 1 (not per tree); with i.i.d. root children both "
        "equal 1 - prod_j (1 - beta_j) given the root rows",
        "tests/test_traversal_identity.py::test_first_level_identity_given_root_children"),
    ("token (without replacement)", "token (iid)", "k = 1"): (
        "One child: both draw it from q and accept with min(1, p/q): P(accept) = 1 - TV (Sequoia = SpecInfer, "
        "optimal transport)",
        "tests/test_tree_fixtures.py::test_optimal_transport_at_k1"),
    ("token", "match", "top-k trees"): (
        "RRS against point masses accepts child j with probability R[x_j] and removes x_j: the law of drawing "
        "y ~ p once and following the child with token y (Sequoia's top-k baseline)",
        "tests/test_tree_verifiers_exact.py::test_token_on_topk_trees_is_match"),
    ("block, ASpS, traversal", "token", "draft = target (acceptance 1)"): (
        "With q = p token-level accepts every drafted token (min(1, p/q) = 1) and emits depth + 1 tokens, the most "
        "any verifier can emit from a tree of that depth: every gain over token-level is 0 at acceptance 1, so no "
        "gain grows with acceptance all the way to 1; where it peaks depends on the pair and the tree (a toy's "
        "chain gain rises then falls along the synthetic family; 07's growth claim)",
        "tests/test_regime.py::test_every_gain_over_token_vanishes_as_the_draft_becomes_the_target"),
    ("block", "token", "temperature 0"): (
        "One-hot rows: one possible draft, every verifier accepts the same prefix",
        "tests/test_chain_verifiers_exact.py::test_temperature_zero_block_equals_token"),
}
"""(method A, method B, where) -> (theorem / identity, the test that proves it exactly on toys)."""
