"""experiments.rejection: one tree level's verifiers compared per context (rejection gaps, SpecTr, the optimal
multi-draft acceptance), on hand-computed per-context vectors."""

import numpy as np
import pandas as pd
import pytest

from specdec_lib import experiments as E

T = 1.0
# two contexts, K = 3: Sequoia's rejection rates 0.5/0.3 (k=1), 0.2/0.1 (k=2), 0.1/0.1 (k=3)
ACC = {("Sequoia", T): np.array([[0.5, 0.3, 0.1], [0.7, 0.2, 0.0]]),
       ("SpecInfer", T): np.array([[0.5, 0.2, 0.1], [0.7, 0.1, 0.05]])}
# SpecTr's K-SEQ rejection at both contexts for k = 1, 2
SPECTR = {T: pd.DataFrame({"row": [0, 1, 0, 1], "k": [1, 1, 2, 2], "rejection": [0.5, 0.3, 0.3, 0.15]})}
KS = {"SpecInfer": [1, 2], "Sequoia": [1, 2]}
SCHEMES = {"Sequoia": "without_replacement", "SpecInfer": "iid"}
CEILING = {("SpecInfer", T): np.array([[0.6, 0.85], [0.75, 0.9]]), ("Sequoia", T): np.array([[0.6, 0.9], [0.75, 0.95]])}


def test_rejection_gaps_pair_the_contexts_at_every_k():
    gaps = E.rejection_gaps(ACC, [T], ["SpecInfer"])
    assert list(gaps.columns) == ["temperature", "other", "k", "gap", "se"]
    assert gaps["k"].tolist() == [1, 2, 3] and set(gaps["other"]) == {"SpecInfer"}
    assert gaps["gap"].tolist()[:2] == pytest.approx([0.0, -0.1]) and gaps["se"].iloc[1] == pytest.approx(0.0)
    # k = 3: differences -0.1 and -0.05 -> mean -0.075, SE sd / sqrt(2) = 0.025
    assert (gaps["gap"].iloc[2], gaps["se"].iloc[2]) == pytest.approx((-0.075, 0.025))


def test_spectr_gaps_read_spectrs_contexts():
    gaps = E.spectr_gaps(ACC, SPECTR)
    assert list(gaps.columns) == ["temperature", "k", "gap", "se"] and gaps["k"].tolist() == [1, 2]
    assert gaps["gap"].tolist() == pytest.approx([0.0, -0.075]) and gaps["se"].iloc[1] == pytest.approx(0.025)
    only_second = {T: SPECTR[T][SPECTR[T]["row"] == 1]}
    assert E.spectr_gaps(ACC, only_second)["gap"].tolist() == pytest.approx([0.0, -0.05])


def test_first_child_difference_is_the_largest_over_contexts_and_temperatures():
    assert E.first_child_difference(ACC, [T]) == 0.0
    shifted = {**ACC, ("SpecInfer", T): ACC[("SpecInfer", T)] + [[0.02, 0, 0], [-0.03, 0, 0]]}
    assert E.first_child_difference(shifted, [T]) == pytest.approx(0.03)


def test_optimal_acceptance_table_sets_each_verifier_against_its_optimum():
    table = E.optimal_acceptance_table(ACC, CEILING, KS, SCHEMES, SPECTR)
    assert list(table.columns) == ["verifier", "sampling", "temperature", "k", "acceptance", "optimum", "% of optimal",
                                   "gap", "gap_se"]
    assert table["verifier"].tolist() == ["SpecInfer RRS"] * 2 + ["Sequoia RRS"] * 2 + ["SpecTr K-SEQ"] * 2
    row = table.iloc[0]   # SpecInfer k = 1: 0.5, 0.7 against 0.6, 0.75
    assert (row["acceptance"], row["optimum"], row["gap"]) == pytest.approx((0.6, 0.675, 0.075))
    assert row["% of optimal"] == pytest.approx(100 * 0.6 / 0.675) and row["sampling"] == "iid"
    spectr = table.iloc[-1]   # k = 2: 1 - (0.3, 0.15) against the i.i.d. optimum 0.85, 0.9
    assert (spectr["acceptance"], spectr["gap"]) == pytest.approx((0.775, 0.1))
    # a k SpecTr did not measure is left out
    k1_only = {T: SPECTR[T][SPECTR[T]["k"] == 1]}
    assert E.optimal_acceptance_table(ACC, CEILING, KS, SCHEMES, k1_only)["verifier"].tolist().count("SpecTr K-SEQ") == 1


def test_ceiling_differences_and_the_least_rrs_gap():
    assert E.ceiling_differences(CEILING, KS, k=2) == pytest.approx([0.05, 0.05])
    assert E.ceiling_differences(CEILING, {"SpecInfer": [1, 2], "Sequoia": [1]}, k=2) is None
    table = E.optimal_acceptance_table(ACC, CEILING, KS, SCHEMES, SPECTR)
    worst = E.least_rrs_gap(table)
    rrs2 = table[(table["k"] == 2) & table["verifier"].str.endswith("RRS")]
    assert worst["gap"] == rrs2["gap"].min() and worst["k"] == 2
    assert E.least_rrs_gap(table[table["k"] == 1]) is None
