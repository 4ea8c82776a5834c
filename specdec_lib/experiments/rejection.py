"""One tree level's verifiers compared context by context (Sequoia Figure 3; Hu et al.'s optimal multi-draft
acceptance), from per-context positional acceptance vectors measured at the same contexts.

``per_row_acc`` maps (scheme, temperature) to an [M, K] array (`theory.acceptance_by_scheme`): row m holds
p_1..p_K at context m, so the rejection rate with k children is 1 - (p_1 + ... + p_k) and the first-level
acceptance is p_1 + ... + p_k. SpecTr's frames are `stars.kseq_rejection_from_rows`'s (row, k, rejection).

* `rejection_gaps`: one scheme's rejection rate minus others' per (temperature, k), paired per context;
* `spectr_gaps`: the same against SpecTr's exact K-SEQ rejection at SpecTr's contexts;
* `first_child_difference`: the largest per-context difference of two schemes' p_1;
* `optimal_acceptance_table`: each verifier's first-level acceptance against the optimum of its sampling;
* `ceiling_differences`: the optimum without replacement minus the i.i.d. optimum, per context;
* `least_rrs_gap`: recursive rejection sampling's row closest to its optimum at k >= 2.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..verdicts.checks import paired_difference

Vectors = Mapping[tuple[str, float], np.ndarray]


def _rejection(acc: np.ndarray, k: int) -> np.ndarray:
    return 1 - acc[:, :k].sum(1)


def rejection_gaps(per_row_acc: Vectors, temperatures: Sequence[float], others: Sequence[str],
                   base: str = "Sequoia") -> pd.DataFrame:
    """Per (temperature, other scheme, k = 1..K): the mean over contexts of ``base``'s rejection rate minus the
    other's, and its standard error (`verdicts.paired_difference`). Columns temperature, other, k, gap, se."""
    rows = []
    for T in temperatures:
        for other in others:
            for k in range(1, per_row_acc[(base, T)].shape[1] + 1):
                m, se = paired_difference(_rejection(per_row_acc[(base, T)], k), _rejection(per_row_acc[(other, T)], k))
                rows.append({"temperature": T, "other": other, "k": k, "gap": m, "se": se})
    return pd.DataFrame(rows)


def spectr_gaps(per_row_acc: Vectors, spectr_rows: Mapping[float, pd.DataFrame], base: str = "Sequoia") -> pd.DataFrame:
    """Per (temperature, k) of SpecTr's frames: ``base``'s rejection rate minus SpecTr's at the contexts SpecTr
    was measured on (its ``row`` column indexes ``base``'s rows). Columns temperature, k, gap, se."""
    rows = []
    for T, frame in spectr_rows.items():
        for k, g in frame.groupby("k"):
            ours = 1 - per_row_acc[(base, T)][g["row"].to_numpy(), :k].sum(1)
            m, se = paired_difference(ours, g["rejection"].to_numpy())
            rows.append({"temperature": T, "k": k, "gap": m, "se": se})
    return pd.DataFrame(rows)


def first_child_difference(per_row_acc: Vectors, temperatures: Sequence[float], a: str = "Sequoia",
                           b: str = "SpecInfer") -> float:
    """max over temperatures and contexts of |p_1(a) - p_1(b)|: zero when both accept the first child alike."""
    return max(float(np.abs(per_row_acc[(a, T)][:, 0] - per_row_acc[(b, T)][:, 0]).max()) for T in temperatures)


def _row(verifier: str, sampling: str, T: float, k: int, achieved: np.ndarray, best: np.ndarray) -> dict:
    mean_gap, se_gap = paired_difference(best, achieved)
    return {"verifier": verifier, "sampling": sampling, "temperature": T, "k": k, "acceptance": achieved.mean(),
            "optimum": best.mean(), "% of optimal": 100 * achieved.mean() / best.mean(), "gap": mean_gap,
            "gap_se": se_gap}


def optimal_acceptance_table(per_row_acc: Vectors, ceiling: Vectors, ceiling_ks: Mapping[str, Sequence[int]],
                             schemes: Mapping[str, str], spectr_rows: Mapping[float, pd.DataFrame]) -> pd.DataFrame:
    """First-level acceptance against the optimal multi-draft acceptance (`theory.optimal_multidraft`).

    ``ceiling[(scheme, T)]`` is an [M, len(ceiling_ks[scheme])] array of the optimum per context at those k.
    One row per (scheme, T, k) for recursive rejection sampling ("<scheme> RRS", p_1 + ... + p_k), then per
    (T, k) for SpecTr's K-SEQ with i.i.d. drafts (1 - its rejection) against the i.i.d. optimum of SpecInfer's
    ks at the same contexts (k SpecTr did not measure are skipped). Columns verifier, sampling, temperature,
    k, acceptance, optimum, % of optimal, gap (optimum - acceptance, mean over contexts), gap_se."""
    rows = []
    for (name, T), table in ceiling.items():
        for j, k in enumerate(ceiling_ks[name]):
            rows.append(_row(f"{name} RRS", schemes[name], T, k, per_row_acc[(name, T)][:, :k].sum(1), table[:, j]))
    for T, frame in spectr_rows.items():
        for j, k in enumerate(ceiling_ks["SpecInfer"]):
            part = frame[frame["k"] == k]
            if not len(part):
                continue
            rows.append(_row("SpecTr K-SEQ", "iid", T, k, 1 - part["rejection"].to_numpy(),
                             ceiling[("SpecInfer", T)][part["row"].to_numpy(), j]))
    return pd.DataFrame(rows)


def ceiling_differences(ceiling: Vectors, ceiling_ks: Mapping[str, Sequence[int]], k: int = 2,
                        high: str = "Sequoia", low: str = "SpecInfer") -> np.ndarray | None:
    """The optimum of ``high``'s sampling minus ``low``'s at ``k`` drafts, per context, every temperature of
    ``ceiling`` concatenated in order; None when ``high`` was not solved at ``k``."""
    temperatures = [T for name, T in ceiling if name == high]
    if k not in ceiling_ks[high] or not temperatures:
        return None
    return np.concatenate([ceiling[(high, T)][:, ceiling_ks[high].index(k)] - ceiling[(low, T)][:, ceiling_ks[low].index(k)]
                           for T in temperatures])


def least_rrs_gap(table: pd.DataFrame) -> pd.Series | None:
    """The recursive-rejection-sampling row of `optimal_acceptance_table` with the smallest gap to its optimum
    among k >= 2 (None when there is none)."""
    rrs = table[(table["k"] > 1) & table["verifier"].str.endswith("RRS")]
    return rrs.sort_values("gap").iloc[0] if len(rrs) else None
