"""The optimal multi-draft acceptance (Hu et al., ICLR 2025): the prefix scan equals the exhaustive cut
minimisation and the primal LP, is 1 - TV at one draft, and is at least every verifier's first level."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from specdec_lib.optimal_multidraft import (brute_force_lp_acceptance, exhaustive_acceptance,
                                            optimal_acceptance)
from specdec_lib.traversal_identity import first_level_acceptance


def _pair(vocab: int, seed: int, zeros: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.full(vocab, 0.6)), rng.dirichlet(np.full(vocab, 0.6))
    if zeros:  # a token the draft never proposes and one the target never emits
        q[0], p[-1] = 0.0, 0.0
        p, q = p / p.sum(), q / q.sum()
    return p, q


CASES = [(v, k, s, seed) for v in (3, 4, 5) for k in (1, 2, 3) for s in ("iid", "without_replacement")
         for seed in range(3) if not (s == "without_replacement" and k > v - 1)]


@pytest.mark.parametrize("vocab, k, sampling, seed", CASES)
def test_prefix_scan_equals_the_linear_program_and_every_cut(vocab, k, sampling, seed):
    p, q = _pair(vocab, seed, zeros=seed == 2)
    lp = brute_force_lp_acceptance(p, q, k, sampling)
    assert exhaustive_acceptance(p, q, k, sampling) == pytest.approx(lp, abs=1e-9)
    assert optimal_acceptance(p, q, k, sampling) == pytest.approx(lp, abs=1e-9)


@pytest.mark.parametrize("sampling", ["iid", "without_replacement"])
def test_prefix_scan_equals_every_cut_on_larger_vocabularies(sampling):
    for seed in range(20):
        p, q = _pair(9, 100 + seed)
        for k in (2, 3):
            assert optimal_acceptance(p, q, k, sampling) == pytest.approx(
                exhaustive_acceptance(p, q, k, sampling), abs=1e-12), (seed, k)


def test_one_draft_is_one_minus_total_variation():
    for seed in range(10):
        p, q = _pair(7, seed)
        tv = 0.5 * np.abs(p - q).sum()
        for sampling in ("iid", "without_replacement"):
            assert optimal_acceptance(p, q, 1, sampling) == pytest.approx(1 - tv, abs=1e-12)


def test_without_replacement_is_at_least_iid_and_both_grow_with_k():
    for seed in range(15):
        p, q = _pair(6, 200 + seed)
        prev = 0.0
        for k in (1, 2, 3):
            iid = optimal_acceptance(p, q, k, "iid")
            wr = optimal_acceptance(p, q, k, "without_replacement")
            assert wr >= iid - 1e-12 and iid >= prev - 1e-12
            prev = iid


@pytest.mark.parametrize("sampling", ["iid", "without_replacement"])
def test_the_optimum_is_a_ceiling_of_recursive_rejection_sampling(sampling):
    """Token-level RRS (SpecInfer i.i.d., Sequoia without replacement) -- and by Lemma A.2 traversal's first
    level -- accepts at most alpha*; at one draft they are equal (both are the maximal coupling)."""
    for seed in range(12):
        p, q = _pair(5, 300 + seed)
        for k in (1, 2, 3):
            rrs = first_level_acceptance(torch.tensor(p), torch.tensor(q), k, sampling)
            best = optimal_acceptance(p, q, k, sampling)
            assert rrs <= best + 1e-12
            if k == 1:
                assert rrs == pytest.approx(best, abs=1e-12)


def test_the_gap_to_the_ceiling_is_real():
    """Existing verifiers fall short of the optimum on some instances (Hu et al.'s finding)."""
    gaps = []
    for seed in range(30):
        p, q = _pair(5, 400 + seed)
        gaps.append(optimal_acceptance(p, q, 2, "iid") - first_level_acceptance(torch.tensor(p), torch.tensor(q), 2))
    assert max(gaps) > 1e-3


def test_full_vocabulary_is_fast_and_exact_against_small_slices():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(49152, generator=g, dtype=torch.float64) * 3, 0)
    q = torch.softmax(torch.randn(49152, generator=g, dtype=torch.float64) * 3, 0)
    start = time.perf_counter()
    for k in (1, 2, 4, 8):
        value = optimal_acceptance(p, q, k, "iid")
        assert 0.0 <= value <= 1.0
    value_wr = optimal_acceptance(p, q, 2, "without_replacement")
    assert value_wr >= optimal_acceptance(p, q, 2, "iid") - 1e-12
    assert time.perf_counter() - start < 120  # generous: a correctness guard against O(V^2), not a benchmark
    tv = 0.5 * float((p - q).abs().sum())
    assert optimal_acceptance(p, q, 1, "iid") == pytest.approx(1 - tv, abs=1e-12)


@pytest.mark.parametrize("args, match", [
    (([0.5, 0.5], [1.0], 1, "iid"), "same length"),
    (([0.5, 0.6], [0.5, 0.5], 1, "iid"), "p must sum to 1"),
    (([0.5, 0.5], [0.5, 0.5], 0, "iid"), "num_drafts"),
    (([0.5, 0.5], [0.5, 0.5], 1, "race"), "sampling"),
    (([0.5, 0.5], [1.0, 0.0], 2, "without_replacement"), "without replacement"),
    (([[0.5, 0.5]], [[0.5, 0.5]], 1, "iid"), "1-D"),
])
def test_bad_input_names_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        optimal_acceptance(*args)


def test_rows_version_matches_row_by_row():
    from specdec_lib.optimal_multidraft import optimal_acceptance_rows

    pairs = [_pair(6, s) for s in range(3)]
    P = torch.tensor(np.stack([a for a, _ in pairs]))
    Q = torch.tensor(np.stack([b for _, b in pairs]))
    table = optimal_acceptance_rows(P, Q, [1, 2], "without_replacement")
    assert table.shape == (3, 2)
    assert table[1, 1] == pytest.approx(optimal_acceptance(pairs[1][0], pairs[1][1], 2, "without_replacement"))
    with pytest.raises(ValueError, match="matched"):
        optimal_acceptance_rows(P, Q[:2], [1])


def test_peaked_draft_rows_keep_without_replacement_above_iid():
    """Low temperature: the draft row's top token has 1 - q ~ 1e-14; the scan must not lose its digits
    (found on the real pair at T = 0.2: -3.9e-3 before the stable form)."""
    rng = np.random.default_rng(7)
    for vocab in (6, 49152):
        for eps in (1e-6, 1e-10, 1e-14):
            q = np.zeros(vocab)
            q[:5] = [1.0, eps / 2, eps / 4, eps / 8, eps / 8]
            q /= q.sum()
            p = rng.dirichlet(np.full(vocab, 0.3)) if eps > 1e-9 else q.copy()
            if eps <= 1e-9:  # low temperature: the target agrees on the top token, differs in the tail
                p[1:5] = p[1:5][::-1]
                p[5:] = rng.dirichlet(np.full(vocab - 5, 0.3)) * 1e-13
                p /= p.sum()
            iid, wr = optimal_acceptance(p, q, 2, "iid"), optimal_acceptance(p, q, 2, "without_replacement")
            assert wr >= iid - 1e-12, (vocab, eps, wr - iid)
            if vocab == 6:
                assert wr == pytest.approx(exhaustive_acceptance(p, q, 2, "without_replacement"), abs=1e-9)
