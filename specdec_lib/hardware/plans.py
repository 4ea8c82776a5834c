"""The optimizer's plans as a notebook shows them (Sequoia Sec. 3.3, Tables 3-4): the costs it plans with on
this machine (measured on a real pair, a synthetic CPU-like profile on a toy pair), its plans on those costs
and on an emulated offloading profile, and its plans for the papers' target shapes from forward times
measured on a GPU.

* `machine_costs` (`measured_costs`, `toy_costs`): t(n), the drafts' level costs and the decoder's overheads;
* `optimizer_plans`, `optimizer_table`: the plans with and without the decoder's overhead, for sections 1-3's
  draft and for a flat t(n), as one table;
* `shape_plans`, `time_table`: per target shape and temperature the plan, the best trees of fixed sizes 128
  and 256 and the paper's row beside them; t(n) / t(1) of several profiles as one frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from .cost_model import TreePlan, best_at_size, level_cost, normalised_times, optimize_tree
from .overhead import dp_tree_overheads
from .profiling import profile

PROFILED_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
"""The target sizes profiled on this machine (those up to the largest size asked for)."""
TOY_TIMES = {1: 1.0, 2: 1.05, 4: 1.2, 8: 1.5, 16: 2.1, 32: 3.4}
"""A CPU-like synthetic t(n) / t(1) for a toy pair (nothing of a toy pair is worth timing)."""
TOY_DRAFT_COST = 0.2
FLAT_TIMES = {n: 1.0 for n in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]}
"""An emulated offloading profile: t(n) flat up to 512 new tokens, with a level cost of `FLAT_DRAFT_COST`."""
FLAT_DRAFT_COST = 0.02


@dataclass(frozen=True)
class MachineCosts:
    """What the optimizer plans with. ``target``: a target profile (`profiling.profile`) or {n: t(n)};
    ``draft`` / ``regime_draft``: the timed draft's and sections 1-3's draft's profiles (or level costs);
    ``overheads``: {(n, d): the decoder's seconds per step} (`overhead.dp_tree_overheads`) or one number;
    ``ar_overhead``: the autoregressive decoder's; ``timed_name`` / ``regime_name``: the drafts' names
    (None on the toy profile; ``regime_name`` also None when the timed draft is sections 1-3's)."""
    target: Any
    draft: Any
    regime_draft: Any
    overheads: Any
    ar_overhead: float
    timed_name: str | None = None
    regime_name: str | None = None

    @property
    def measured(self) -> bool:
        return self.timed_name is not None

    @property
    def times(self) -> dict[int, float]:
        """t(n) / t(1) of the target."""
        return normalised_times(self.target) if self.measured else dict(self.target)

    def profiles(self) -> dict:
        """The measured profiles, keyed target, draft and regime_draft."""
        return {"target": self.target, "draft": self.draft, "regime_draft": self.regime_draft}

    def overhead_table(self) -> pd.DataFrame:
        """One row per scored tree (size, depth, overhead_s), then the autoregressive decoder's (depth 0)."""
        return pd.DataFrame([{"size": n, "depth": d, "overhead_s": s} for (n, d), s in self.overheads.items()]
                            + [{"size": 1, "depth": 0, "overhead_s": self.ar_overhead}])

    def level_cost_note(self) -> str:
        t1 = self.target["median_s"][self.target["sizes"].index(1)]
        return (f"draft level cost / target t(1): timed draft {level_cost(self.draft) / t1:.3f}, "
                f"sections 1-3's draft {level_cost(self.regime_draft) / t1:.3f}")


def toy_costs() -> MachineCosts:
    """`TOY_TIMES`, `TOY_DRAFT_COST` for both drafts and no decoder overhead."""
    return MachineCosts(dict(TOY_TIMES), TOY_DRAFT_COST, TOY_DRAFT_COST, 0.0, 0.0)


def measured_costs(target, timed_draft, regime_draft, acceptance: Sequence[float], max_size: int, max_depth: int,
                   temperature: float) -> MachineCosts:
    """Profiles of ``target`` (the `PROFILED_SIZES` up to ``max_size``, 15 runs), ``timed_draft``'s and
    ``regime_draft``'s one-token forwards (10 runs each; ``regime_draft`` None: the timed draft's), then the
    decoder's overhead of every tree the optimizer scores from ``acceptance`` (48-token null decodes)."""
    sizes = [n for n in PROFILED_SIZES if n <= max_size]
    tprof = profile(target, sizes, prefix_len=128, repeats=15, warmup=2, label="target")
    dprof = profile(timed_draft, [1], prefix_len=128, repeats=10, warmup=2, label="draft")
    dprof_regime = dprof if regime_draft is None else profile(regime_draft, [1], prefix_len=128, repeats=10, warmup=2,
                                                              label="draft (sections 1-3)")
    overheads, ar_overhead = dp_tree_overheads(target.vocab_size, acceptance, sizes, max_depth, temperature=temperature,
                                               dtype=target.dtype, tokens=48, device=target.device)
    return MachineCosts(tprof, dprof, dprof_regime, overheads, ar_overhead, timed_draft.name,
                        None if regime_draft is None else regime_draft.name)


def machine_costs(pair, timing_pair, acceptance: Sequence[float], max_size: int, max_depth: int,
                  temperature: float) -> MachineCosts:
    """`measured_costs` of a real pair (``pair.kind == "hf"``: its target, ``timing_pair``'s draft and, when
    that is another model, ``pair``'s draft), `toy_costs` of any other."""
    if pair.kind != "hf":
        return toy_costs()
    return measured_costs(pair.target, timing_pair.draft, None if timing_pair is pair else pair.draft, acceptance,
                          max_size, max_depth, temperature)


@dataclass(frozen=True)
class OptimizerPlans:
    """``choice``: Eq. 1 with the decoder's overheads; ``eq1``: Eq. 1 alone; ``regime``: the choice for
    sections 1-3's draft; ``flat``: Eq. 1 on `FLAT_TIMES`."""
    choice: TreePlan
    eq1: TreePlan
    regime: TreePlan
    flat: TreePlan


def optimizer_plans(acceptance: Sequence[float], regime_acceptance: Sequence[float], costs: MachineCosts,
                    max_depth: int) -> OptimizerPlans:
    """The optimizer on ``costs`` over every profiled size: for the timed draft's ``acceptance`` vector with and
    without the decoder's overheads, for sections 1-3's draft (``regime_acceptance``), and on a flat t(n)."""
    size = max(costs.times)
    extra = dict(step_overhead=costs.overheads, baseline_overhead=costs.ar_overhead)
    return OptimizerPlans(
        choice=optimize_tree(acceptance, costs.target, costs.draft, max_size=size, max_depth=max_depth, **extra),
        eq1=optimize_tree(acceptance, costs.target, costs.draft, max_size=size, max_depth=max_depth),
        regime=optimize_tree(regime_acceptance, costs.target, costs.regime_draft, max_size=size, max_depth=max_depth,
                             **extra),
        flat=optimize_tree(acceptance, FLAT_TIMES, FLAT_DRAFT_COST, max_size=max(FLAT_TIMES), max_depth=max_depth))


def _plan_row(label: str, plan: TreePlan) -> dict:
    return {"profile": label, "size": plan.size, "depth": plan.depth, "G": plan.expected_tokens,
            "predicted speedup": plan.speedup}


def optimizer_table(plans: OptimizerPlans, costs: MachineCosts) -> pd.DataFrame:
    """One row per plan (profile, size, depth, G, predicted speedup): this machine's choice, Eq. 1 alone,
    sections 1-3's draft when it is not the timed one, and the emulated offloading profile."""
    if costs.measured:
        labels = [f"timed draft ({costs.timed_name})", "timed draft, Eq. 1 alone (no decoder overhead)",
                  f"sections 1-3's draft ({costs.regime_name})"]
    else:
        labels = ["toy", "toy, Eq. 1", "toy"]
    shown = [plans.choice, plans.eq1] + ([plans.regime] if costs.regime_name is not None else [])
    return pd.DataFrame([_plan_row(f"this machine, {label}", p) for label, p in zip(labels, shown)]
                        + [_plan_row(f"emulated offloading (flat t(n), c = {FLAT_DRAFT_COST})", plans.flat)])


def table4_temperature(T: float) -> float | None:
    """The temperature of Sequoia's Table 4 shown beside ours: 0 (greedy) for T <= 0.3, 0.6 within 0.1 of it."""
    return 0.0 if T <= 0.3 else (0.6 if abs(T - 0.6) < 0.1 else None)


def shape_plans(vectors: Mapping[float, Sequence[float]], targets: Mapping[str, Any], draft_profile, max_depth: int,
                paper: Mapping[tuple[str, float], str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The optimizer (Eq. 1 alone) for each target profile of ``targets`` (name -> profile) at each temperature of
    ``vectors`` (T -> acceptance vector), with ``draft_profile``'s level cost, over the target's profiled sizes.

    Returns (plans, curves). plans: one row per (target, T) with the plan (size, depth, G, predicted speedup),
    the best tree held to 128 and to 256 nodes ("speedup× (G)") and ``paper``'s Table 4 entry at (target,
    `table4_temperature` of T), "—" when none. curves: the best predicted speedup at every scored size."""
    paper = paper or {}
    rows, curves = [], []
    for name, target in targets.items():
        for T, vector in vectors.items():
            plan = optimize_tree(vector, target, draft_profile, max_size=max(target["sizes"]), max_depth=max_depth)
            row = {"target": name, "T": T, "size": plan.size, "depth": plan.depth, "G": plan.expected_tokens,
                   "predicted speedup": plan.speedup}
            for n in (128, 256):
                _, g, s = best_at_size(plan, n)
                row[f"fixed {n}: speedup (G)"] = f"{s:.2f}× ({g:.2f})"
            row["paper, A100 C4: (size, depth) speedup (G)"] = paper.get((name, table4_temperature(T)), "—")
            rows.append(row)
            curves += [{"target": name, "T": T, "size": n, "predicted speedup": best_at_size(plan, n)[2]}
                       for n in sorted({c[0] for c in plan.candidates})]
    return pd.DataFrame(rows), pd.DataFrame(curves)


def time_table(profiles: Mapping[str, Any]) -> pd.DataFrame:
    """t(n) / t(1) of each profile (name -> profile): columns model, n, t(n)/t(1)."""
    return pd.DataFrame([{"model": name, "n": n, "t(n)/t(1)": v}
                         for name, p in profiles.items() for n, v in normalised_times(p).items()])
