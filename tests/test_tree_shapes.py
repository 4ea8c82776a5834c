"""Tree shape builders and `parse_shape` (specdec_lib/tree.py): sizes, depths (counting the root),
level order, and clear errors for unknown or malformed specs."""

import pytest
import torch

from specdec_lib.tree import (
    DraftTree, batch, binary, chain_parents, eagle_sparse, erss_specinfer, is_level_order, kary,
    level_order, parent_depths, parse_shape, specinfer, validate_parents,
)


def _tree(parents, vocab=4):
    n = len(parents)
    rows = torch.full((n, vocab), 1.0 / vocab, dtype=torch.float64)
    return DraftTree(torch.zeros(n, dtype=torch.long), torch.tensor(parents), rows, rows, "iid")


def _level_counts(parents):
    d = parent_depths(parents)
    return [d.count(level) for level in range(max(d) + 1)]


@pytest.mark.parametrize("parents, size, depth", [
    (chain_parents(8), 9, 9),
    (batch(3, 4), 13, 5),
    (specinfer(5, 8), 41, 9),
    (kary(3, 3), 13, 3),
    (binary(3), 7, 3),
    (binary(6), 63, 6),          # Traversal's "binary depth 5" (62 draft tokens)
    (kary(1, 4), 4, 4),          # a 1-ary tree is a chain
    (erss_specinfer(8), 9, 5),
    (eagle_sparse(), 26, 6),
    (batch(4, 0), 1, 1),
])
def test_size_and_depth_count_the_root(parents, size, depth):
    tree = _tree(parents)
    assert tree.num_nodes == size
    assert tree.depth == depth
    assert is_level_order(parents)


def test_batch_is_k_independent_sequences():
    parents = batch(3, 2)
    tree = _tree(parents)
    assert tree.children[0] == [1, 2, 3]
    assert [tree.children[i] for i in (1, 2, 3)] == [[4], [5], [6]]
    assert specinfer(3, 2) == parents
    assert batch(1, 5) == chain_parents(5)


def test_kary_and_binary_structure():
    tree = _tree(kary(3, 3))
    assert [len(tree.children[i]) for i in range(tree.num_nodes)] == [3] * 4 + [0] * 9
    assert _level_counts(binary(5)) == [1, 2, 4, 8, 16]
    assert binary(1) == [-1]


def test_erss_specinfer_tree():
    # equals sequence(k) for k <= 3; then three branches below the shared chain, round-robin
    for k in range(4):
        assert erss_specinfer(k) == chain_parents(k)
    parents = erss_specinfer(8)
    assert parents == [-1, 0, 1, 2, 2, 2, 3, 4, 5]
    assert _level_counts(erss_specinfer(11)) == [1, 1, 1, 3, 3, 3]


def test_eagle_sparse_tree_matches_the_spec():
    tree = _tree(eagle_sparse())
    assert _level_counts(eagle_sparse()) == [1, 4, 8, 8, 3, 2]
    assert len(tree.children[0]) == 4
    first = [len(tree.children[c]) for c in tree.children[0]]
    assert first == [3, 2, 2, 1]
    # the first chain visited by traversal goes 0,0,0,0,0 (first child five times)
    node = 0
    for _ in range(5):
        node = tree.children[node][0]
    assert tree.depths[node] == 5


@pytest.mark.parametrize("spec, expected", [
    ("chain:8", chain_parents(8)),
    ("chain:0", [-1]),
    ("batch:2x3", batch(2, 3)),
    ("specinfer:5x8", specinfer(5, 8)),
    ("kary:3x3", kary(3, 3)),
    ("binary:4", binary(4)),
    ("erss_specinfer:5", erss_specinfer(5)),
    ("eagle", eagle_sparse()),
    ("parents:-1,0,0,1", [-1, 0, 0, 1]),
    (" Chain:3 ", chain_parents(3)),
])
def test_parse_shape(spec, expected):
    assert parse_shape(spec) == expected


@pytest.mark.parametrize("spec, message", [
    ("star:3", "known forms"),
    ("chain", "expected 'chain:N'"),
    ("chain:x", "expected 'chain:N'"),
    ("batch:3", "expected 'batch:KxN'"),
    ("kary:0x3", "k must be an integer >= 1"),
    ("binary:0", "depth must be an integer >= 1"),
    ("parents:0,1", "must start with -1"),
    ("parents:-1,1", "parent 1 must satisfy"),
    ("parents:-1,a", "comma-separated integers"),
    ("chain:-2", "chain length must be >= 0"),
])
def test_parse_shape_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_shape(spec)


def test_parse_shape_rejects_non_strings():
    with pytest.raises(ValueError, match="shape spec must be a string"):
        parse_shape(8)


def test_level_order_relabels_keeping_sibling_order():
    parents = [-1, 0, 1, 0, 3, 1]      # depth-first numbering
    assert not is_level_order(parents)
    relabelled = level_order(parents)
    assert is_level_order(relabelled)
    assert relabelled == [-1, 0, 0, 1, 1, 2]
    # same shape: children counts in BFS order agree
    assert level_order(relabelled) == relabelled
    with pytest.raises(ValueError):
        validate_parents([-1, 2, 0])
