"""Trees of each size for a tokens-per-step comparison (Sequoia Figures 2 / 5a): Sequoia's DP tree, the best
k independent sequences (SpecInfer k×L), the best full k-ary tree and the best full k-ary tree that branches
(k >= 2, Medusa's tree), all under one depth bound (root counted: the same number of sequential draft
forwards), with the positional model's prediction F(T) of each, and the tables of their measurement.

* `size_arms`: the trees of every size as arms for `shared_contexts.paired_tokens_at_shared_contexts`;
* `SizeArms.label`: a measured frame's arm names turned into tree, size and drafted columns;
* `estimator_table`: mean and SD over contexts of each estimator's expected tokens per tree;
* `size_summary`: pooled tokens per step with bootstrap CIs beside F(T), and the prediction's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from .. import theory
from ..shapes import resolve_shape
from ..tree import parent_depths
from .summaries import summarize

SEQUOIA = "Sequoia DP"
K_SEQUENCES = "k×L (SpecInfer)"
KARY = "k-ary"
BRANCHING_KARY = "k-ary, k ≥ 2"


@dataclass(frozen=True)
class SizeArms:
    """``arms``: (tree, size) -> (shape, sampling); ``drafted``: (tree, size) -> how the tree was drafted (its
    shape string, or the DP tree's depth); ``predicted``: one row per tree (tree, size, nodes, predicted F(T));
    ``sequoia_trees``: size -> the DP tree's parents; ``branching``: (tree, size) -> k of the k×L and k-ary
    trees."""
    arms: dict[tuple[str, int], tuple]
    drafted: dict[tuple[str, int], str]
    predicted: pd.DataFrame
    sequoia_trees: dict[int, list[int]]
    branching: dict[tuple[str, int], int]

    def by_label(self) -> dict[str, tuple]:
        """The arms keyed "<tree> @ <size>", as a shared-contexts run takes them."""
        return {f"{name} @ {n}": arm for (name, n), arm in self.arms.items()}

    def label(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A copy of ``frame`` (an ``arm`` column of `by_label`'s keys) with columns tree, size and drafted."""
        arm_of = {f"{name} @ {n}": (name, n) for name, n in self.arms}
        out = frame.copy()
        out["tree"] = out["arm"].map(lambda a: arm_of[a][0])
        out["size"] = out["arm"].map(lambda a: arm_of[a][1])
        out["drafted"] = out["arm"].map(lambda a: self.drafted[arm_of[a]])
        return out


def size_arms(p_wr: Sequence[float], p_iid: Sequence[float], sizes: Sequence[int], max_depth: int) -> SizeArms:
    """The four trees of every size in ``sizes`` with depth at most min(``max_depth``, size): Sequoia's DP
    tree, the best full k-ary trees (any k and k >= 2) from the without-replacement vector ``p_wr``
    (drafted without replacement), and the best k×L sequences from the i.i.d. vector ``p_iid`` (drafted
    i.i.d.); each tree's F(T) from the vector of its sampling."""
    if not sizes or any(int(n) < 1 for n in sizes) or int(max_depth) < 1:
        raise ValueError(f"sizes and max_depth must be positive, got {list(sizes)!r} and {max_depth!r}")
    arms, drafted, predicted, sequoia_trees, branching = {}, {}, [], {}, {}
    for n in sizes:
        depth = min(max_depth, n)
        seq_parents, _ = theory.sequoia_tree(p_wr, size=n, depth=depth)
        sequoia_trees[n] = seq_parents
        _, k_seq, l_seq = theory.best_k_sequences(p_iid, n, depth=depth)
        _, k_ary, lv = theory.best_kary(p_wr, n, depth=depth)
        _, k_br, lv_br = theory.best_kary(p_wr, n, depth=depth, min_branching=2)
        branching[(K_SEQUENCES, n)], branching[(KARY, n)] = k_seq, k_ary
        for name, (shape, sampling) in {SEQUOIA: (seq_parents, "without_replacement"),
                                        K_SEQUENCES: (f"batch:{k_seq}x{l_seq}", "iid"),
                                        KARY: (f"kary:{k_ary}x{lv + 1}", "without_replacement"),
                                        BRANCHING_KARY: (f"kary:{k_br}x{lv_br + 1}", "without_replacement")}.items():
            arms[(name, n)] = (shape, sampling)
            parents = resolve_shape(shape)
            drafted[(name, n)] = shape if isinstance(shape, str) else f"DP depth {max(parent_depths(parents)) + 1}"
            pvec = p_iid if name == K_SEQUENCES else p_wr
            predicted.append({"tree": name, "size": n, "nodes": len(parents),
                              "predicted": theory.expected_tokens_positional(parents, pvec)})
    return SizeArms(arms, drafted, pd.DataFrame(predicted), sequoia_trees, branching)


def estimator_table(frame: pd.DataFrame, value: str = "expected_tokens") -> pd.DataFrame:
    """Per (tree, size): the mean of ``value`` under each verifier column of ``frame`` and its SD over the
    contexts (prompt_id, step), side by side."""
    means = frame.pivot_table(index=["tree", "size"], columns="verifier", values=value)
    sd = frame.pivot_table(index=["tree", "size", "prompt_id", "step"], columns="verifier",
                           values=value).groupby(["tree", "size"]).std()
    return means.join(sd.add_suffix(" SD over contexts"))


def size_summary(steps: pd.DataFrame, arms: SizeArms) -> pd.DataFrame:
    """`summaries.summarize` of ``steps`` per (tree, size, drafted) merged with the trees' F(T), and the
    prediction's error in percent of the measured mean ("error %")."""
    out = summarize(steps, ["tree", "size", "drafted"]).merge(arms.predicted, on=["tree", "size"])
    out["error %"] = 100 * (out["predicted"] / out["mean"] - 1)
    return out
