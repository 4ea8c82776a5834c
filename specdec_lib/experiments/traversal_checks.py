"""Traversal Verification's identities checked on drafted trees of a pair (real or toy): the P(tau >= 1)
identity tree by tree (`collect_first_level`), the depth trend of the gain over token-level verification
(`collect_depth_trend`) and both together on the project's pair (`real_pair_check`). The exact quantities
per tree come from `specdec_lib.theory.traversal_identity`; the verdicts from `specdec_lib.verdicts`.

Command line: ``python -m specdec_lib.experiments.traversal_checks`` (one thread, about two minutes).
"""

from __future__ import annotations

import gc
from typing import Sequence

import pandas as pd
import torch

from .. import verdicts as V
from ..reporting.results import save_results
from ..theory.traversal_identity import depth_trend_frame, first_level_frame, martingale_z
from .collection import collect_trees
from .setup import load_pair, prompts_for


def collect_first_level(pair, prompts, shape: str = "binary:3", copies: int = 32, temperature: float = 1.0,
                        max_new_tokens: int = 12, seed: int = 5, top_p: float = 1.0):
    """`first_level_frame` on real drafted trees: per prompt, `experiments.collect_trees` with ``copies``
    independent i.i.d. trees per context (one prompt's trees held at a time), then the exact per-tree
    quantities. With a depth-2 shape ("binary:3") every tree also gets its Rao-Blackwellised traversal
    value, which must equal token's tree by tree on the real rows."""
    frames = []
    for prompt in prompts:
        records = collect_trees(pair, [prompt], shape, "iid", temperature, top_p=top_p,
                                max_new_tokens=max_new_tokens, seed=seed, copies=copies, progress=False)
        frames.append(first_level_frame(records))
        del records
        gc.collect()
    return pd.concat(frames, ignore_index=True)


def collect_depth_trend(pair, prompts, depths: Sequence[int] = (1, 2, 3, 4, 5), copies: int = 2,
                        temperature: float = 1.0, max_new_tokens: int = 12, seed: int = 11, top_p: float = 1.0):
    """`depth_trend_frame` on real binary trees of max(depths) drafted levels (Traversal's Figure 3),
    one prompt at a time; returns the long frame (verifier in token / traversal / traversal_rb,
    value expected_tokens) that `verdicts.TrendCheck` and `verdicts.GainCheck` take."""
    frames = []
    for prompt in prompts:
        records = collect_trees(pair, [prompt], f"binary:{max(depths) + 1}", "iid", temperature, top_p=top_p,
                                max_new_tokens=max_new_tokens, seed=seed, copies=copies, progress=False)
        frames.append(depth_trend_frame(records, depths))
        del records
        gc.collect()
    wide = pd.concat(frames, ignore_index=True)
    long = wide.melt(id_vars=["prompt_id", "category", "step", "draw", "depth"],
                     value_vars=["token", "traversal", "traversal_rb"], var_name="verifier",
                     value_name="expected_tokens")
    long["view"] = "d" + long["depth"].astype(str)
    return long


def real_pair_check(profile: str = "default", num_prompts: int = 2, categories: Sequence[str] | None = None,
                    copies: int = 32, depth_copies: int = 2, max_new_tokens: int = 12, temperature: float = 1.0,
                    save: bool = True) -> dict:
    """The P(tau >= 1) identity and the binary depth trend on the project's pair (``profile`` default),
    single-threaded in about two minutes on a CPU with the defaults: `collect_first_level` (depth-2
    binary trees, ``copies`` per context) and `collect_depth_trend` (binary depth 1..5, ``depth_copies``
    per context). Saves both frames under ``data/results/traversal_identity/`` and returns the
    decisions (`verdicts.first_level_decision`, raw and Rao-Blackwellised depth trends and gains)."""
    pair = load_pair(profile)
    cats = list(categories) if categories is not None else (
        ["writing", "qa", "reasoning", "summarization"] if pair.kind == "hf" else None)
    prompts = prompts_for(pair, num_prompts, categories=cats)
    params = dict(profile=profile, num_prompts=num_prompts, categories=cats, copies=copies,
                  depth_copies=depth_copies, max_new_tokens=max_new_tokens, temperature=temperature)
    first = collect_first_level(pair, prompts, copies=copies, temperature=temperature, max_new_tokens=max_new_tokens)
    trend = collect_depth_trend(pair, prompts, copies=depth_copies, temperature=temperature,
                                max_new_tokens=max_new_tokens)
    if save:
        save_results("traversal_identity/first_level", first, params)
        save_results("traversal_identity/depth_trend", trend, params)
    deep = trend[trend["depth"] >= 2]
    out = {"first_level": V.first_level_decision(first), "first_level_z": martingale_z(first)}
    for name in ("traversal", "traversal_rb"):
        out[f"trend_{name}"] = V.TrendCheck(f"{name} gain grows with depth", "depth", name, "token").evaluate(deep)
        out[f"gain_d5_{name}"] = V.GainCheck(f"{name} > token at depth 5", name, "token", {"depth": 5}).evaluate(deep)
    return out


if __name__ == "__main__":  # python -m specdec_lib.experiments.traversal_checks
    torch.set_num_threads(1)
    for key, value in real_pair_check().items():
        print(f"{key}: {value}")
