"""Pooled means per group with bootstrap confidence intervals over prompts, and paired gains."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..shapes import shape_nodes
from ..verdicts.intervals import percentile_interval
from ..reporting.results import verdict_from_ci

def _pooled_by_prompt(frame, by: Sequence[str], value: str):
    """Per (group, prompt): sum and count of ``value`` (pooled means are ratios of these sums)."""
    return frame.groupby(list(by) + ["prompt_id"], dropna=False)[value].agg(["sum", "count"]).reset_index()


def bootstrap_ratio(sums: np.ndarray, counts: np.ndarray, n_boot: int = 1000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float, float]:
    """Pooled mean sum(sums)/sum(counts) over units (prompts) and its bootstrap CI over units (the expanded
    percentile interval, `intervals.percentile_interval`)."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    point = float(sums.sum() / counts.sum())
    if len(sums) < 2:
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(sums), size=(n_boot, len(sums)))
    boots = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return (point, *percentile_interval(boots, len(sums), level))


def summarize(frame, by: Sequence[str], value: str = "expected_tokens", n_boot: int = 1000, seed: int = 0):
    """Pooled mean of ``value`` per group (over all steps of all prompts: tokens per target call), its
    bootstrap 95% CI over prompts, the median per-prompt mean, and the number of prompts and steps."""
    per = _pooled_by_prompt(frame, by, value)
    rows = []
    for key, g in per.groupby(list(by), dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        point, lo, hi = bootstrap_ratio(g["sum"].to_numpy(), g["count"].to_numpy(), n_boot, seed)
        rows.append({**dict(zip(by, key)), "mean": point, "ci_low": lo, "ci_high": hi,
                     "median_prompt": float(np.median(g["sum"] / g["count"])), "prompts": len(g),
                     "steps": int(g["count"].sum())})
    return pd.DataFrame(rows)


def paired_gain(frame, method: str, baseline: str, by: Sequence[str] = (), value: str = "expected_tokens",
                column: str = "verifier", n_boot: int = 1000, seed: int = 0, pair_on: str = "tree"):
    """Relative gain ``mean(method) / mean(baseline) - 1`` per group, with a paired bootstrap 95% CI over
    prompts (the same resampled prompts for both), the median per-prompt gain and the fraction of prompts
    with a positive gain.

    ``pair_on="tree"``: both were evaluated on the same drafted trees (rows matched on prompt, step and
    view; only trees evaluated by both are used). ``pair_on="prompt"``: the two come from different
    drafted trees (e.g. two sampling schemes), so each prompt's mean is used (the pairing is by prompt).
    """
    by = list(by)
    if pair_on not in ("tree", "prompt"):
        raise ValueError("pair_on must be 'tree' or 'prompt'")
    keys = by + ["prompt_id"] + (["step", "view"] if pair_on == "tree" else [])
    keys = [k for k in dict.fromkeys(keys) if k in frame.columns]
    a = frame[frame[column] == method].groupby(keys)[value].mean()
    b = frame[frame[column] == baseline].groupby(keys)[value].mean()
    both = pd.concat({"a": a, "b": b}, axis=1, join="inner").reset_index()
    if both.empty:
        raise ValueError(f"no trees evaluated by both {method!r} and {baseline!r}")
    rows = []
    groups = both.groupby(by, dropna=False, sort=True) if by else [((), both)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        per = g.groupby("prompt_id")[["a", "b"]].sum()
        sa, sb = per["a"].to_numpy(), per["b"].to_numpy()
        point = float(sa.sum() / sb.sum() - 1)
        if len(per) >= 2:
            rng = np.random.default_rng(seed)
            idx = rng.integers(0, len(per), size=(n_boot, len(per)))
            boots = sa[idx].sum(axis=1) / sb[idx].sum(axis=1) - 1
            lo, hi = percentile_interval(boots, len(per))
        else:
            lo = hi = float("nan")
        rows.append({**dict(zip(by, key)), "method": method, "baseline": baseline,
                     "mean_method": float(sa.sum() / g.shape[0]), "mean_baseline": float(sb.sum() / g.shape[0]),
                     "gain": point, "ci_low": lo, "ci_high": hi, "median_prompt_gain": float(np.median(sa / sb - 1)),
                     "positive_prompts": float(np.mean(sa > sb)), "prompts": len(per), "steps": int(g.shape[0])})
    return pd.DataFrame(rows)


def gain_verdict(gain_row: Mapping[str, Any], threshold: float = 0.0) -> str:
    """`results.verdict_from_ci` for "gain > threshold" of one `paired_gain` row (point estimate when
    the CI is undefined: fewer than two prompts)."""
    lo, hi = gain_row["ci_low"], gain_row["ci_high"]
    if isinstance(lo, float) and math.isnan(lo):
        lo = hi = gain_row["gain"]
    return verdict_from_ci(lo, hi, threshold)


def fmt_gain(row: Mapping[str, Any]) -> str:
    """A gain row as text: ``+3.2% [1.1, 5.0]``."""
    g, lo, hi = 100 * row["gain"], 100 * row["ci_low"], 100 * row["ci_high"]
    if math.isnan(lo):
        return f"{g:+.2f}%"
    return f"{g:+.2f}% [{lo:+.2f}, {hi:+.2f}]"


def equal_size_pairs(sizes: Sequence[int], baselines: Sequence[str]) -> list[tuple[str, str]]:
    """("sequoia:N", baseline) for every baseline shape whose node count (root included, `shapes.shape_nodes`)
    is one of the Sequoia ``sizes``: the trees a Sequoia tree is compared with at equal size. A ValueError
    when no baseline matches any size (a comparison that could not be made must not pass silently)."""
    if isinstance(baselines, str) or not baselines:
        raise ValueError(f"baselines must be a non-empty list of shape strings, got {baselines!r}")
    wanted = {int(n) for n in sizes}
    pairs = [(f"sequoia:{shape_nodes(b)}", b) for b in baselines if shape_nodes(b) in wanted]
    if not pairs:
        raise ValueError(f"sizes {sorted(wanted)}: no baseline among {list(baselines)} has one of these node counts "
                         f"({', '.join(f'{b}: {shape_nodes(b)}' for b in baselines)})")
    return pairs
