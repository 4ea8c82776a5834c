"""Every malformed DraftTree is refused at construction with a ValueError that names the problem."""

from __future__ import annotations

import pytest
import torch

from specdec_lib.tree import DraftTree, chain_parents

V = 4
ROW = [0.1, 0.2, 0.3, 0.4]


def make(tokens=(0, 1, 2), parents=(-1, 0, 1), draft=None, target=None, sampling="iid", race=None):
    n = len(tokens)
    draft = torch.tensor([ROW] * n, dtype=torch.float64) if draft is None else draft
    target = torch.tensor([ROW] * n, dtype=torch.float64) if target is None else target
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), draft, target, sampling, race)


def rows(n, **overrides):
    """n copies of ROW with some rows replaced: rows(3, **{"1": [...]})."""
    out = torch.tensor([ROW] * n, dtype=torch.float64)
    for i, row in overrides.items():
        out[int(i)] = torch.tensor(row, dtype=torch.float64)
    return out


def test_valid_trees_are_accepted():
    chain = make()
    assert chain.is_chain and chain.num_nodes == 3 and chain.vocab_size == V and chain.depth == 3
    assert chain.path_to(2) == (1, 2) and chain.children == [[1], [2], []]
    tree = make(tokens=(0, 1, 2, 3), parents=(-1, 0, 0, 1))
    assert not tree.is_chain and tree.depths == [0, 1, 1, 2]
    # a leaf's draft row may be all zeros ("not computed")
    make(draft=rows(3, **{"2": [0, 0, 0, 0]}))
    # without replacement / top-k may draft a token the draft row gives probability 0
    make(tokens=(0, 0), parents=(-1, 0), draft=rows(2, **{"0": [0, 0.5, 0.5, 0]}),
         sampling="without_replacement")
    # a root-only tree
    make(tokens=(3,), parents=(-1,))
    assert chain.with_target_probs(rows(3, **{"1": [0.25] * 4})).target_probs[1, 0] == 0.25


CASES = {
    "unknown sampling": (dict(sampling="beam"), "unknown sampling mode"),
    "tokens not 1-D": (dict(tokens=((0, 1),), parents=(-1,)), "1-D"),
    "no root": (dict(tokens=(), parents=(), draft=torch.zeros(0, V), target=torch.zeros(0, V)),
                "at least the root"),
    "parents length": (dict(parents=(-1, 0)), "parents has 2 entries"),
    "draft shape": (dict(draft=torch.full((2, V), 0.25)), "draft_probs must have shape"),
    "target shape": (dict(target=torch.full((3, V, 1), 0.25)), "target_probs must have shape"),
    "vocab mismatch": (dict(draft=torch.full((3, 5), 0.2)), "draft vocabulary 5 differs"),
    "root parent": (dict(parents=(0, 0, 1)), "root and must have parent -1"),
    "parent after child": (dict(parents=(-1, 2, 1)), "node 1: parent 2"),
    "negative parent": (dict(parents=(-1, 0, -1)), "node 2: parent -1"),
    "self parent": (dict(parents=(-1, 1, 1)), "node 1: parent 1"),
    "token too large": (dict(tokens=(0, 4, 1)), "token id 4 out of range"),
    "negative token": (dict(tokens=(0, -1, 1)), "token id -1 out of range"),
    "target row sum": (dict(target=rows(3, **{"1": [0.5, 0.5, 0.5, 0]})), "target_probs row sums to"),
    "target negative": (dict(target=rows(3, **{"2": [1.2, -0.2, 0, 0]})), "negative entries"),
    "target nan": (dict(target=rows(3, **{"0": [float("nan"), 0.5, 0.5, 0]})), "non-finite"),
    "internal draft row sum": (dict(draft=rows(3, **{"1": [0, 0, 0, 0]})), "draft_probs row sums to"),
    "internal draft negative": (dict(draft=rows(3, **{"0": [-0.1, 0.3, 0.4, 0.4]})), "negative entries"),
    "internal draft inf": (dict(draft=rows(3, **{"0": [float("inf"), 0, 0, 0]})), "non-finite"),
    "leaf draft row sum": (dict(draft=rows(3, **{"2": [0.5, 0, 0, 0]})), "leaf draft_probs row sums"),
    "leaf draft negative": (dict(draft=rows(3, **{"2": [-0.5, 1.5, 0, 0]})), "leaf draft_probs row has negative entries"),
    "zero draft prob iid": (dict(draft=rows(3, **{"0": [0.5, 0, 0.5, 0]})), "draft probability 0"),
    "duplicate siblings wr": (dict(tokens=(0, 2, 2), parents=(-1, 0, 0), sampling="without_replacement"),
                              "duplicate sibling tokens"),
    "duplicate siblings topk": (dict(tokens=(0, 1, 1), parents=(-1, 0, 0), sampling="topk"),
                                "duplicate sibling tokens"),
    "race missing": (dict(sampling="race"), "needs the race arrival times"),
    "race shape": (dict(sampling="race", race=torch.ones(2, V)), "race must have shape"),
    "race non-positive": (dict(sampling="race", race=torch.zeros(3, V)), "must be positive"),
    "race on iid tree": (dict(race=torch.ones(3, V)), "only 'race' trees carry them"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_tree_raises(case):
    kwargs, message = CASES[case]
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_race_tree_and_duplicates_in_iid_are_fine():
    make(tokens=(0, 1, 2), parents=(-1, 0, 0), sampling="race", race=torch.rand(3, V) + 0.1)
    make(tokens=(0, 2, 2), parents=(-1, 0, 0))   # iid draws may repeat a token


def test_chain_parents():
    assert chain_parents(0) == [-1] and chain_parents(3) == [-1, 0, 1, 2]
    with pytest.raises(ValueError, match="chain length"):
        chain_parents(-1)


# ----- argument types (issue #13: bad input) ----------------------------------------------------------

def test_float_tokens_and_parents_are_refused():
    """1.5 is no token id and no parent: float tensors are refused, not truncated to 1."""
    with pytest.raises(ValueError, match="tokens must hold integers"):
        make(tokens=(0.0, 1.5, 2.0))
    with pytest.raises(ValueError, match="parents must hold integers"):
        make(parents=(-1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="tokens must hold integers"):
        make(tokens=(True, False, True))


def test_plain_lists_are_converted_or_refused_by_name():
    tree = DraftTree([0, 1, 2], [-1, 0, 1], [ROW] * 3, [ROW] * 3)
    assert tree.tokens.dtype == torch.long and tree.target_probs.dtype == torch.float64
    assert tree.is_chain and tree.path_to(2) == (1, 2)
    race = DraftTree((0, 1, 2), (-1, 0, 0), [ROW] * 3, [ROW] * 3, "race", [[1.0] * V] * 3)
    assert race.race.dtype == torch.float64
    with pytest.raises(ValueError, match="tokens must hold integers"):
        DraftTree([0, 1.5, 2], [-1, 0, 1], [ROW] * 3, [ROW] * 3)
    with pytest.raises(ValueError, match="DraftTree target_probs"):
        DraftTree([0, 1, 2], [-1, 0, 1], [ROW] * 3, "not rows")
    with pytest.raises(ValueError, match="DraftTree draft_probs"):
        DraftTree([0, 1, 2], [-1, 0, 1], [[0.5], ROW, ROW], [ROW] * 3)


def test_low_precision_rows_are_summed_in_float64():
    """bfloat16 / float16 rows: the sum is taken in float64 against the dtype's own rounding."""
    # a normalised float64 row over 1000 tokens rounded once to bfloat16: its exact sum misses 1 by
    # more than 1e-5 but less than bfloat16's eps; the bfloat16 sum would be rounded to 8 bits
    g = torch.Generator().manual_seed(0)
    vocab = 1000
    row64 = torch.rand(vocab, generator=g, dtype=torch.float64)
    row64 /= row64.sum()
    row = row64.to(torch.bfloat16)
    assert abs(float(row.to(torch.float64).sum()) - 1) > 1e-5
    full = row.expand(2, vocab).clone()
    DraftTree(torch.tensor([0, 1]), torch.tensor([-1, 0]), full, full)
    # a float16 row whose float16 sum overflows: reported as a bad sum, not as non-finite entries
    big = torch.zeros(2, 4, dtype=torch.float16)
    big[:, 0] = big[:, 1] = 40000.0
    with pytest.raises(ValueError, match="row sums to 80000"):
        DraftTree(torch.tensor([0, 1]), torch.tensor([-1, 0]), big, big)
    # a bfloat16 row 2% off is refused (tolerance is bfloat16's eps, 0.0078)
    off = torch.tensor([[0.51, 0.51, 0.0, 0.0]] * 2, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="target_probs row sums to"):
        DraftTree(torch.tensor([0, 1]), torch.tensor([-1, 0]), off, off)
