"""The eight written rules (`RULES`), the one meaning of "partly" (`PARTLY`) and the minimum effects."""

from __future__ import annotations

from dataclasses import dataclass

PARTLY = ("partly = the point estimate is on the claimed side (beyond the null in the claimed direction, or "
          "inside the equivalence margin), but the claim is not established: the 95% CI reaches the null or "
          "leaves the margin under either bootstrap seed (`checked_claim`), or the estimate is below the minimum "
          "effect that counts (trends: or two neighbouring cells are significantly reversed)")

MIN_EFFECT = {
    "superiority": 0.005,     # relative gain in tokens per step (or the quantity's own unit, see Rule)
    "noninferiority": 0.005,  # margin below the null that still counts as ">="
    "equivalence": 0.01,      # +- margin (relative) for "equal in expectation"
    "exact": 1e-9,            # absolute tolerance of an exact (float64) identity
    "trend": 0.005,           # contrast last - first of the compared gains (absolute, in gain units)
    "every": 0.005,           # per cell, as superiority / noninferiority
    "threshold": 0.0,         # beyond the paper's bound itself
}
"""Default minimum effects. A claim whose paper effect is smaller than twice the default uses half the
paper's effect (`GainCheck.min_effect_for`): a rule must never demand more than the paper claims."""

TIE_TOLERANCE = MIN_EFFECT["exact"]
"""A directional estimate within this of its null is a tie (equal laws up to float64 rounding, the exact
rule's tolerance): "not reproduced", so that the verdict of an exact tie does not follow the sign of the
rounding."""


@dataclass(frozen=True)
class Rule:
    """One written rule (module docstring)."""

    kind: str
    quantity: str
    design: str
    exact: str
    unit: str
    min_effect: str
    reproduced: str
    partly: str
    not_reproduced: str

    def text(self) -> str:
        return (f"[{self.kind}] quantity: {self.quantity} | design: {self.design} | exact: {self.exact} | "
                f"CI unit: {self.unit} | minimum effect: {self.min_effect} | reproduced: {self.reproduced} | "
                f"partly: {self.partly} | not reproduced: {self.not_reproduced}")


_UNIT = ("prompts: bootstrap (2000 resamples) over whole prompts, read as the expanded percentile interval "
         "(intervals.percentile_interval: wider quantiles for few prompts, 1.44x at 6, 1.07x at 26); a prompt's "
         "steps, copies and drafting seeds stay together (`cluster_of` strips the '/s<seed>' suffix)")
_EXACT_TREE = ("per drafted tree the exact expectation of each verifier (exact_law), the copies drafted at one "
               "context averaged first; traversal's P(tau >= l) terms may be Rao-Blackwellised over the levels "
               "below l (traversal_identity.rao_blackwell_ccdf)")

RULES: dict[str, Rule] = {
    "superiority": Rule(
        "superiority",
        "relative gain mean(A) / mean(B) - 1 of the pooled means over all steps (tokens per target call); "
        "for absolute quantities (rejection rates, r(1)) the difference of the means; against a model's prediction "
        "(0th-order G from measured r) the relative gap measured / predicted - 1, the prediction recomputed from "
        "the vectors measured at the same contexts in every resample (`ModelGapCheck`); for wall clock the speedup "
        "pooled tokens / pooled seconds over the baseline's (`SpeedupCheck`)",
        "same contexts and the same drafted trees for both arms (pair_on='tree'); where the arms need "
        "different trees (two sampling schemes, two tree shapes) each arm drafts its own tree at the same "
        "target-sampled contexts (experiments.paired_tokens_at_shared_contexts), paired per context "
        "(pair_on='tree'), or, where a verifier must advance the text itself, the same prompts and drafting "
        "seeds, paired by prompt (pair_on='prompt'); common random numbers in drafting; wall-clock arms decode "
        "each prompt back to back with the same seed (experiments.interleaved_timing), paired by prompt",
        _EXACT_TREE, _UNIT,
        "0.5% relative (half the paper's effect when that is below 1%)",
        "CI entirely beyond the null in the claimed direction and point estimate >= minimum effect",
        PARTLY, "point estimate at or beyond the null on the wrong side, or within 1e-9 of the null (a tie: "
        "equal laws up to float rounding)"),
    "noninferiority": Rule(
        "noninferiority",
        "as superiority, for a '>=' claim (a theorem that A is never worse than B)",
        "as superiority", _EXACT_TREE, _UNIT,
        "margin 0.5% relative: A counts as '>=' B unless it is more than 0.5% below",
        "CI lower end above -margin", PARTLY, "point estimate below -margin"),
    "equivalence": Rule(
        "equivalence",
        "relative difference mean(A) / mean(B) - 1 (or a difference of exact per-context quantities)",
        "as superiority; for identities in expectation over drafting, Rao-Blackwellise first so the paired "
        "difference is exact per tree (then the 'exact' rule applies)",
        _EXACT_TREE, _UNIT, "margin +-1% relative unless the claim states its own (e.g. 'comparable': 5%)",
        "CI inside (-margin, +margin)", PARTLY, "point estimate outside the margin"),
    "exact": Rule(
        "exact",
        "max absolute difference between ours and the exact value (toy numbers, per-tree identities, "
        "deterministic model outputs such as DP trees, bounds, optimizer choices)",
        "the same tree / rows for both sides: no sampling at all",
        "everything (exact laws, fractions where the test uses them)",
        "none (no sampling noise)", "tolerance 1e-9 (float64 laws); the claim's own rounding for printed numbers",
        "max |difference| <= tolerance (for an exact inequality: every unit satisfies it up to the tolerance)",
        "never (an exact check has no 'partly')", "max |difference| > tolerance"),
    "trend": Rule(
        "trend",
        "contrast = gain at the last value of the parameter minus gain at the first (depth, gamma, n, "
        "temperature, size), with the monotone steps between neighbours",
        "for nested views (depths, chain lengths) the same trees in every cell; for separately drafted "
        "cells (temperatures, sizes) the same prompts and seeds, paired by prompt; the bootstrap resamples "
        "the same prompts for every cell", _EXACT_TREE + "; traversal depth trends use the Rao-Blackwellised "
        "expected tokens (traversal_identity.depth_trend_frame)", _UNIT,
        "contrast >= 0.5 percentage points of gain",
        "contrast CI beyond 0 in the claimed direction, contrast >= minimum effect and no neighbouring step "
        "significantly reversed", PARTLY, "contrast point estimate at or beyond 0 on the wrong side"),
    "every": Rule(
        "every",
        "the cell quantities of a 'holds in every cell' claim (every category, temperature, shape, k)",
        "each cell as its own rule (superiority / noninferiority / equivalence)", _EXACT_TREE, _UNIT,
        "the cell rule's", "every cell reproduced (for 'A <= B in every cell' claims tested as 'no cell "
        "significantly above': Holm's family-wise 5% over the cells, `cells_significantly_above`, so that a "
        "true tie in many cells does not flag one by chance)",
        PARTLY + " (here: every cell's point estimate is on the claimed side, some cell is not established)",
        "some cell's point estimate on the wrong side"),
    "threshold": Rule(
        "threshold",
        "an absolute quantity against the paper's bound (acceptance >= 0.6, speedup > 1, error < 10%)",
        "the quantity measured on this project's pair and prompts; wall-clock ratios paired per prompt "
        "(same prompts, same seeds, interleaved runs)",
        "tokens per step from the exact per-tree expectation where the quantity is a ratio to it",
        _UNIT + " (a single measured number without a CI is decided on its point estimate)",
        "0 beyond the bound (the paper's bound is the effect)",
        "CI entirely beyond the bound on the claimed side", PARTLY, "point estimate on the wrong side of the bound"),
    "not_applicable": Rule(
        "not_applicable", "-", "-", "-", "-", "-", "-", "-",
        "never: the claim needs hardware, models or data that are not available offline "
        "(verdict 'not applicable offline')"),
}
