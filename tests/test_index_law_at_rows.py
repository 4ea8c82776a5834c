"""`experiments.index_law_at_rows`: per context, the probability that GSS (token verifier) or ERSS accepts the
i-th child of a race-drafted star, with the star integrated out.

Checked against the verifiers themselves: on small vocabularies, stars are drafted by races
(`drafting.draw_children`, race times kept) and `verifiers.exact_law` gives each child's acceptance
probability; their mean over many stars must match the function (exact schemes at V = 5). The control: the
i.i.d. scheme (SpecInfer's children drawn with replacement) is a different law and must not match GSS on
race-drawn stars."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from specdec_lib import experiments as E
from specdec_lib.drafting import draw_children
from specdec_lib.theory import positional_acceptance
from specdec_lib.tree import DraftTree
from specdec_lib.verifiers import exact_law, expected_tokens

V, K, STARS = 5, 3, 6000


def _rows(m, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(m, V, generator=g, dtype=torch.float64), 1)
    q = torch.softmax(2 * torch.randn(m, V, generator=g, dtype=torch.float64), 1)
    return p, q


def _index(m):
    return pd.DataFrame({"prompt_id": [f"qa-{i:02d}" for i in range(m)], "category": "qa", "step": range(m)})


def _mean_star_law(p, q, verifier, seed=0):
    """Mean over race-drafted stars of exact_law's probability that child i is the accepted one."""
    g = torch.Generator().manual_seed(seed)
    total = torch.zeros(K, dtype=torch.float64)
    for _ in range(STARS):
        kids, race = draw_children(q, K, "race", g)
        tokens = torch.cat([torch.zeros(1, dtype=torch.long), kids])
        draft = torch.zeros(K + 1, V, dtype=torch.float64)
        draft[0] = q
        races = torch.ones(K + 1, V, dtype=torch.float64)  # the leaves' races only shape the bonus token
        races[0] = race
        tree = DraftTree(tokens, torch.tensor([-1] + [0] * K), draft, p.expand(K + 1, -1).clone(), sampling="race",
                         race=races)
        law = exact_law(verifier, tree)
        total += torch.stack([law[c].sum() for c in range(1, K + 1)])
    return total / STARS


@pytest.mark.parametrize("verifier", ["token", "erss"])
def test_matches_the_verifier_on_race_drafted_stars(verifier):
    p, q = _rows(2, 1)
    law = E.index_law_at_rows(p, q, _index(2), K, verifier)
    assert list(law.columns) == ["prompt_id", "category", "step", "p1", "p2", "p3"]
    for m in range(2):
        measured = _mean_star_law(p[m], q[m], verifier, seed=m)
        ours = torch.tensor(law.loc[m, ["p1", "p2", "p3"]].to_numpy(dtype=float))
        assert torch.allclose(ours, measured, atol=0.02), (verifier, ours, measured)


def test_first_index_is_the_closed_form():
    p, q = _rows(3, 2)
    gss = E.index_law_at_rows(p, q, _index(3), K, "token")
    assert torch.allclose(torch.tensor(gss["p1"].to_numpy()), 1 - 0.5 * (p - q).abs().sum(1), atol=1e-12)


@pytest.mark.parametrize("verifier", ["token", "erss"])
def test_max_index_1_is_the_first_index_alone_without_monte_carlo(verifier, monkeypatch):
    """p1 alone (a chain's 0th-order G reads it only) equals the p1 of the full law, whatever the Monte Carlo, and
    runs no Monte Carlo at all (the positional-acceptance sampler must not be called)."""
    from specdec_lib.experiments import stars

    p, q = _rows(4, 3)
    full = E.index_law_at_rows(p, q, _index(4), K, verifier, num_samples=4, seed=1)

    def no_monte_carlo(*args, **kwargs):
        raise AssertionError("max_index = 1 must not sample")

    monkeypatch.setattr(stars, "positional_acceptance", no_monte_carlo)
    first = E.index_law_at_rows(p, q, _index(4), 1, verifier, num_samples=1, seed=9)
    assert list(first.columns) == ["prompt_id", "category", "step", "p1"]
    assert torch.allclose(torch.tensor(first["p1"].to_numpy()), torch.tensor(full["p1"].to_numpy()), atol=1e-12)


def test_control_iid_children_are_a_different_law():
    p, q = _rows(2, 1)
    iid = positional_acceptance(p, q, K, "iid", per_row=True)[0]
    measured = _mean_star_law(p[0], q[0], "token")
    assert (iid - measured).abs().max() > 0.05


@pytest.mark.parametrize("kwargs,needle", [({"verifier": "spectr"}, "verifier"), ({"max_index": 0}, "max_index"),
                                           ({"max_index": 2.0}, "max_index"), ({"index": _index(1)}, "index"),
                                           ({"index": [0, 1]}, "index must be a DataFrame")])
def test_bad_arguments_are_value_errors(kwargs, needle):
    p, q = _rows(2, 1)
    args = {"index": _index(2), "max_index": K, "verifier": "token", **kwargs}
    with pytest.raises(ValueError, match=needle):
        E.index_law_at_rows(p, q, args.pop("index"), args.pop("max_index"), args.pop("verifier"))


def test_rows_may_overshoot_but_their_mean_is_the_law():
    """Near acceptance 1, ERSS's Monte Carlo (winners beyond each row's likeliest tokens are sampled) can put more
    on p2 than the 1 - p1 left beside an exact p1 close to 1:
    such a row sums above 1 (so rows are deliberately not capped: capping only them would bias the tail down),
    and with few samples per row even their mean may; `capped_vector` makes a mean a sub-distribution, keeping p1."""
    g, vocab = torch.Generator().manual_seed(0), 40  # past exact enumeration: the race law is Monte Carlo
    q = torch.softmax(2 * torch.randn(400, vocab, generator=g, dtype=torch.float64), 1)
    p = q * (1 + 0.05 * torch.rand(400, vocab, generator=g, dtype=torch.float64))
    p = p / p.sum(1, keepdim=True)
    law = E.index_law_at_rows(p, q, _index(400), K, "erss", num_samples=1)
    rows = law[["p1", "p2", "p3"]].to_numpy()
    assert (rows.sum(1) > 1).any()
    capped = E.capped_vector(rows.mean(0))
    assert capped[0] == rows.mean(0)[0] and capped.sum() <= 1 + 1e-12


@pytest.mark.parametrize("verifier", ["token", "erss"])
def test_batch_tokens_by_context_is_the_verifiers_mean_on_race_drafted_stars(verifier):
    """1 + p1 + ... + pk per row: the mean over race-drafted stars of the verifier's exact expected tokens
    (accepted child and bonus token) on the star's first k children, which are a race-drafted star of k."""
    p, q = _rows(1, 3)
    frame = E.batch_tokens_by_context(E.index_law_at_rows(p, q, _index(1), K, verifier), [1, 2, 3])
    assert list(frame.columns) == ["prompt_id", "category", "step", "view", "expected_tokens", "p_accept_first"]
    g = torch.Generator().manual_seed(5)
    total = torch.zeros(K, dtype=torch.float64)
    for _ in range(STARS):
        kids, race = draw_children(q[0], K, "race", g)
        for k in range(1, K + 1):
            draft = torch.zeros(k + 1, V, dtype=torch.float64)
            draft[0] = q[0]
            races = torch.ones(k + 1, V, dtype=torch.float64)
            races[0] = race
            tree = DraftTree(torch.cat([torch.zeros(1, dtype=torch.long), kids[:k]]), torch.tensor([-1] + [0] * k),
                             draft, p[0].expand(k + 1, -1).clone(), sampling="race", race=races)
            total[k - 1] += expected_tokens(verifier, tree)
    measured = total / STARS
    ours = torch.tensor(frame.sort_values("view")["expected_tokens"].to_numpy(dtype=float))
    assert torch.allclose(ours, measured, atol=0.02), (ours, measured)
    # the control: leaving out the bonus token (p1 + ... + pk) is off by one token
    assert (ours - 1 - measured).abs().min() > 0.9
    # the control that must fail: batch(k) from the i.i.d. scheme's law (SpecInfer's children drawn with
    # replacement) is a different law: it fails the same tolerance on the race-drafted stars
    iid = _index(1).assign(**{f"p{i + 1}": [float(v)] for i, v in enumerate(positional_acceptance(p, q, K, "iid"))})
    wrong = torch.tensor(E.batch_tokens_by_context(iid, [2, 3]).sort_values("view")["expected_tokens"].to_numpy(dtype=float))
    assert not torch.allclose(wrong, measured[1:], atol=0.02), (wrong, measured)


def test_batch_tokens_by_context_arithmetic_and_bad_arguments():
    law = _index(2).assign(p1=[0.5, 0.25], p2=[0.25, 0.25], p3=[0.125, 0.0])
    frame = E.batch_tokens_by_context(law, [1, 3, 5])
    assert frame["view"].tolist() == [1, 1, 3, 3, 5, 5]
    assert frame["expected_tokens"].tolist() == [1.5, 1.25, 1.875, 1.5, 1.875, 1.5]  # k > K uses p1..pK
    assert frame["p_accept_first"].tolist() == [0.5, 0.25] * 3
    with pytest.raises(ValueError, match="ks"):
        E.batch_tokens_by_context(law, [0])
    with pytest.raises(ValueError, match="p1..pK"):
        E.batch_tokens_by_context(_index(2), [1])
