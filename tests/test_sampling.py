"""process_logits: temperature, greedy one-hot, Sequoia's top-p (target only)."""

from __future__ import annotations

import math

import pytest
import torch

from specdec_lib.sampling import _top_p_mask_by_sort, process_logits, top_p_mask


def _logits(probs):
    return torch.log(torch.tensor(probs, dtype=torch.float64))


def test_temperature_softmax_and_float64_rows():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]])
    out = process_logits(logits, 0.5)
    assert out.dtype == torch.float64
    assert torch.allclose(out, torch.softmax(logits.double() / 0.5, -1))
    big = torch.randn(3, 49152) * 4
    assert (process_logits(big, 1.0).sum(-1) - 1).abs().max() < 1e-12


def test_temperature_zero_is_one_hot_argmax_first_tie():
    out = process_logits(torch.tensor([0.1, 3.0, 3.0, -1.0]), 0)
    assert out.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_top_p_keeps_the_token_that_crosses_p():
    probs = [0.5, 0.3, 0.15, 0.05]
    kept = process_logits(_logits(probs), 1.0, 0.7)
    assert torch.allclose(kept, torch.tensor([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0], dtype=torch.float64))
    kept = process_logits(_logits(probs), 1.0, 0.81)
    assert torch.allclose(kept, torch.tensor([0.5, 0.3, 0.15, 0.0], dtype=torch.float64) / 0.95)
    # the most likely token is always kept, whatever p
    assert process_logits(_logits(probs), 1.0, 0.01).tolist() == [1.0, 0.0, 0.0, 0.0]
    # order of the vocabulary does not matter
    shuffled = process_logits(_logits([0.05, 0.3, 0.5, 0.15]), 1.0, 0.7)
    assert torch.allclose(shuffled, torch.tensor([0, 0.375, 0.625, 0], dtype=torch.float64))


def test_top_p_mask_is_computed_after_temperature():
    logits = _logits([0.6, 0.3, 0.1])
    # at T=1 p=0.6 keeps only the first token; at T=3 the distribution flattens and keeps two
    assert top_p_mask(torch.softmax(logits, -1), 0.6).tolist() == [True, False, False]
    flat = torch.softmax(logits / 3.0, -1)
    assert flat[0] < 0.6
    out = process_logits(logits, 3.0, 0.6)
    assert (out > 0).tolist() == [True, True, False]
    assert math.isclose(float(out.sum()), 1.0, abs_tol=1e-12)


def test_draft_gets_no_top_p():
    logits = _logits([0.5, 0.3, 0.15, 0.05])
    draft = process_logits(logits, 1.0, 0.7, apply_top_p=False)
    assert torch.allclose(draft, torch.exp(logits))


def test_matches_sequoia_reference_filter():
    """Sequoia's code path: sort, cumulative softmax(sorted / T), drop tokens whose preceding mass
    already reached p, renormalise softmax(filtered / T); random logits over a real-size vocabulary."""
    g = torch.Generator().manual_seed(0)
    for t, p in [(1.0, 0.9), (0.6, 0.8), (1.3, 0.95)]:
        logits = torch.randn(4, 1000, generator=g, dtype=torch.float64) * 3
        s, idx = torch.sort(logits, descending=True)
        cum = torch.cumsum(torch.softmax(s / t, -1), -1)
        remove = torch.zeros_like(cum, dtype=torch.bool)
        remove[:, 1:] = cum[:, :-1] >= p
        filtered = torch.full_like(logits, -math.inf).scatter(-1, idx, s.masked_fill(remove, -math.inf))
        ref = torch.softmax(filtered / t, -1)
        assert torch.allclose(process_logits(logits, t, p), ref, atol=1e-12)


@pytest.mark.parametrize("t,p", [(-0.1, 1.0), (float("nan"), 1.0), (float("inf"), 1.0), (1.0, 0.0), (1.0, 1.5)])
def test_bad_arguments(t, p):
    with pytest.raises(ValueError):
        process_logits(torch.zeros(3), t, p)


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99, 0.999999])
def test_top_p_mask_equals_the_full_stable_sort(top_p):
    """The head-only mask is the definition's (full stable sort) exactly: on ~50k-token rows at several
    temperatures (nuclei from one token to most of the vocabulary), with ties at the cut, on 1-D input."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 49152, generator=gen, dtype=torch.float64) * 3
    for T in (0.3, 1.0, 4.0):
        probs = torch.softmax(logits / T, -1)
        assert torch.equal(top_p_mask(probs, top_p), _top_p_mask_by_sort(probs, top_p))
    tied = torch.tensor([[0.1] * 10, [0.3, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.0, 0.0, 0.0]], dtype=torch.float64)
    tied = tied / tied.sum(-1, keepdim=True)
    assert torch.equal(top_p_mask(tied, top_p), _top_p_mask_by_sort(tied, top_p))
    assert torch.equal(top_p_mask(tied[1], top_p), _top_p_mask_by_sort(tied[1], top_p))
    one_hot = torch.zeros(3, 300, dtype=torch.float64)
    one_hot[:, 7] = 1.0
    assert torch.equal(top_p_mask(one_hot, top_p), _top_p_mask_by_sort(one_hot, top_p))
