"""The optimizer's prediction checked end to end (Sequoia Sec. 3.3; Tables 3-4 analogue): the trees timed
against its choice, their prediction recomputed from profiles measured before every prompt's round
(`profiling.round_profile`, `overhead.round_decoder_overhead`), and the table of predicted against measured
tokens per step, seconds per step and speedups.

A check is a dict: tree (its name), size, depth, parents, predicted tokens/step (G) and predicted speedup.

* `timed_trees`: the optimizer's choice and the best tree of each other size to time;
* `timing_arms`: those trees as arms of `experiments.interleaved_timing`, after autoregressive decoding;
* `round_speedup`, `rescored_checks`: the prediction from per-round profiles;
* `pooled_steps`, `check_table`, `with_measured`: the predicted-against-measured table.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from .. import theory
from .cost_model import TreePlan, best_at_size, predicted_step_seconds, profile_from_columns, speedup_from_round_profiles
from .overhead import overhead_column

CHOICE = "optimizer's choice"
BASELINE = "autoregressive"


def timed_trees(plan: TreePlan, acceptance: Sequence[float], times: Mapping[int, float], sizes: Sequence[int],
                max_depth: int) -> list[dict]:
    """The checks to time: ``plan``'s tree, then the best tree (depth and DP tree from ``acceptance``) of each
    other size among ``sizes`` that was profiled (``times``' keys) and of the profiled sizes next to the
    choice (half and twice its size), in increasing size."""
    dp = theory.sequoia_table(acceptance, max(times), max_depth)
    checks = [{"tree": CHOICE, "size": plan.size, "depth": plan.depth, "parents": plan.tree,
               "predicted tokens/step": plan.expected_tokens, "predicted speedup": plan.speedup}]
    profiled = sorted(times)
    at = profiled.index(plan.size)
    neighbours = set(profiled[max(0, at - 1): at + 2])
    for n in sorted(({s for s in sizes if s in times} | neighbours) - {plan.size}):
        d, g, sp = best_at_size(plan, n)
        checks.append({"tree": f"fixed size {n}", "size": n, "depth": d, "parents": dp.tree(n, d),
                       "predicted tokens/step": g, "predicted speedup": sp})
    return checks


def timing_arms(checks: Sequence[dict], verifier: str = "token", sampling: str = "without_replacement") -> dict:
    """{"autoregressive": None, tree: (verifier, parents, sampling) for each check}."""
    return {BASELINE: None} | {c["tree"]: (verifier, c["parents"], sampling) for c in checks}


def round_speedup(rounds: pd.DataFrame, check: Mapping) -> float:
    """The check's predicted speedup from the per-round profiles and decoder overheads in ``rounds``' columns
    (`cost_model.speedup_from_round_profiles`, medians over the rounds)."""
    return speedup_from_round_profiles(rounds, check["predicted tokens/step"], check["size"], check["depth"],
                                       step_overhead=overhead_column(check["tree"]),
                                       baseline_overhead=overhead_column(BASELINE))


def rescored_checks(checks: Sequence[dict], rounds: pd.DataFrame) -> list[dict]:
    """Copies of ``checks`` whose prediction comes from ``rounds`` (one row per prompt's round): the speedup
    before the runs kept as "optimizer's speedup (profile before)", then predicted speedup (`round_speedup`),
    Eq. 1 alone speedup, decoder overhead s/step and predicted step s."""
    t_rounds, c_rounds = profile_from_columns(rounds, "target"), profile_from_columns(rounds, "draft")[1]
    out = []
    for check in checks:
        c = dict(check)
        c["optimizer's speedup (profile before)"] = c.pop("predicted speedup")
        c["predicted speedup"] = round_speedup(rounds, c)
        c["Eq. 1 alone speedup"] = speedup_from_round_profiles(rounds, c["predicted tokens/step"], c["size"], c["depth"])
        c["decoder overhead s/step"] = float(rounds[overhead_column(c["tree"])].median())
        c["predicted step s"] = predicted_step_seconds(t_rounds, c_rounds, c["size"], c["depth"],
                                                       c["decoder overhead s/step"])
        out.append(c)
    return out


def pooled_steps(timing: pd.DataFrame, column: str = "tree") -> pd.DataFrame:
    """Per arm (``column``): tokens, seconds, steps and draft_s summed over prompts."""
    return timing.groupby(column)[["tokens", "seconds", "steps", "draft_s"]].sum()


def check_table(checks: Sequence[dict], pooled: pd.DataFrame, level_s: float) -> pd.DataFrame:
    """The checks indexed by tree (without parents) beside their measurement (`pooled_steps`): measured tokens
    per step, measured step s, and the draft's seconds per step predicted (depth × ``level_s``) and measured."""
    check = pd.DataFrame(list(checks)).drop(columns="parents").set_index("tree")
    check["measured tokens/step"] = pooled["tokens"] / pooled["steps"]
    check["measured step s"] = pooled["seconds"] / pooled["steps"]
    check["predicted draft s/step"] = check["depth"] * level_s
    check["measured draft s/step"] = pooled["draft_s"] / pooled["steps"]
    return check


def with_measured(check: pd.DataFrame, measured: Mapping[str, object]) -> pd.DataFrame:
    """``check`` with the measured speedup of each tree: ``measured`` maps the trees, in ``check``'s order, to
    decisions on measured / predicted - 1 (``estimate``, ``ci_low``, ``ci_high``; `verdicts.SpeedupCheck`)."""
    if list(measured) != list(check.index):
        raise ValueError(f"measured must hold the trees {list(check.index)!r} in order, got {list(measured)!r}")
    out = check.copy()
    out["measured speedup"] = [out.loc[m, "predicted speedup"] * (1 + d.estimate) for m, d in measured.items()]
    out["measured / predicted - 1"] = [d.estimate for d in measured.values()]
    out["CI low"] = [d.ci_low for d in measured.values()]
    out["CI high"] = [d.ci_high for d in measured.values()]
    out["measured / Eq. 1 alone - 1"] = out["measured speedup"] / out["Eq. 1 alone speedup"] - 1
    return out
