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
