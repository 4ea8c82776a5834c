"""`drafting.draw_tree` / `draw_forest` / `draw_children`: the law of each sampling mode, one draft call
per level (for a whole forest), seeded reproducibility and clear errors (docs/methods/sequoia.md §2.5 / §3.1, docs/methods/erss.md §2.6)."""

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from specdec_lib.drafting import (
    DraftPieces, context_draft_fn, context_target_fn, draw_children, draw_forest, draw_tree,
)
from specdec_lib.exact import enumerate_drafts
from specdec_lib.models.synthetic import random_markov_pair
from specdec_lib.tree import DraftTree, binary, level_order, parse_shape
from specdec_lib.verifiers import erss

P_VALUE = 1e-4


def _chi2(counts: Counter, law: dict) -> float:
    keys = sorted(law)
    n = sum(counts.values())
    assert set(counts) <= set(keys), f"outcomes outside the law: {set(counts) - set(keys)}"
    return float(chisquare([counts.get(k, 0) for k in keys], [n * law[k] for k in keys]).pvalue)


# Sequoia §3.1 sampler test: ordered pairs without replacement from Q = [0.5, 0.3, 0.2], k = 2.
SEQUOIA_PAIRS = {(0, 1): 0.3, (0, 2): 0.2, (1, 0): 0.3 * 0.5 / 0.7, (1, 2): 0.3 * 0.2 / 0.7,
                 (2, 0): 0.2 * 0.5 / 0.8, (2, 1): 0.2 * 0.3 / 0.8}


def test_sequoia_pair_table_values():
    assert SEQUOIA_PAIRS[(1, 0)] == pytest.approx(0.2142857, abs=1e-7)
    assert SEQUOIA_PAIRS[(1, 2)] == pytest.approx(0.0857143, abs=1e-7)
    assert SEQUOIA_PAIRS[(2, 0)] == pytest.approx(0.125)
    assert SEQUOIA_PAIRS[(2, 1)] == pytest.approx(0.075)


@pytest.mark.parametrize("sampling", ["without_replacement", "race"])
def test_ordered_sample_without_replacement_law(sampling):
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    gen = torch.Generator().manual_seed(11)
    counts = Counter(tuple(draw_children(q, 2, sampling, gen)[0].tolist()) for _ in range(6000))
    assert _chi2(counts, SEQUOIA_PAIRS) > P_VALUE


def test_iid_children_law_allows_duplicates():
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    gen = torch.Generator().manual_seed(3)
    counts = Counter(tuple(draw_children(q, 2, "iid", gen)[0].tolist()) for _ in range(6000))
    law = {(a, b): float(q[a] * q[b]) for a in range(3) for b in range(3)}
    assert _chi2(counts, law) > P_VALUE
    assert counts[(0, 0)] > 0


def test_uniform_fallback_once_the_support_is_used_up():
    q = torch.tensor([0.7, 0.3, 0.0, 0.0, 0.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(5)
    thirds, fourths = Counter(), Counter()
    for _ in range(3000):
        kids = draw_children(q, 4, "without_replacement", gen)[0].tolist()
        assert len(set(kids)) == 4 and set(kids[:2]) == {0, 1}
        thirds[kids[2]] += 1
        fourths[(kids[2], kids[3])] += 1
    assert _chi2(thirds, {2: 1 / 3, 3: 1 / 3, 4: 1 / 3}) > P_VALUE
    everything = draw_children(q, 5, "without_replacement", gen)[0].tolist()
    assert sorted(everything) == [0, 1, 2, 3, 4] and set(everything[:2]) == {0, 1}
    assert _chi2(fourths, {(a, b): 1 / 6 for a in (2, 3, 4) for b in (2, 3, 4) if a != b}) > P_VALUE


def test_topk_is_deterministic_with_ties_to_the_lower_id():
    q = torch.tensor([0.2, 0.3, 0.2, 0.3], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    assert draw_children(q, 3, "topk", gen)[0].tolist() == [1, 3, 0]
    assert draw_children(q, 4, "topk", gen)[0].tolist() == [1, 3, 0, 2]


def test_race_children_are_the_first_arrivals():
    q = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64)
    gen = torch.Generator().manual_seed(2)
    kids, race = draw_children(q, 3, "race", gen)
    arrival = race / q
    assert kids.tolist() == torch.argsort(arrival)[:3].tolist()
    assert bool((race > 0).all())


def test_children_errors():
    gen = torch.Generator().manual_seed(0)
    q = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="a race cannot draft 3 children"):
        draw_children(q, 3, "race", gen)
    with pytest.raises(ValueError, match="cannot be drawn from 3 tokens"):
        draw_children(q, 4, "without_replacement", gen)
    with pytest.raises(ValueError, match="unknown sampling mode"):
        draw_children(q, 1, "nucleus", gen)


class _Recorder:
    """A draft_fn over a random Markov draft that records its calls."""

    def __init__(self, draft, prefix):
        self.inner = context_draft_fn(draft.probs, prefix)
        self.calls = []

    def __call__(self, tokens, parents, nodes):
        self.calls.append((tokens.clone(), list(parents), list(nodes)))
        return self.inner(tokens, parents, nodes)


@pytest.mark.parametrize("sampling", ["iid", "without_replacement", "topk", "race"])
def test_one_draft_call_per_level(sampling):
    target, draft = random_markov_pair(5, 0.5, seed=1, eos=False)
    prefix = (3, 1)
    parents = parse_shape("parents:-1,0,0,1,1,2,3,3")  # levels: {0}, {1,2}, {3,4,5}, {6,7}
    rec = _Recorder(draft, prefix)
    tree = draw_tree(parents, prefix[-1], rec, sampling, torch.Generator().manual_seed(0)).scored_by(
        context_target_fn(target.probs, prefix))
    assert isinstance(tree, DraftTree) and tree.sampling == sampling
    assert [c[2] for c in rec.calls] == [[0], [1, 2], [3]]  # internal nodes only, per level
    assert [len(c[1]) for c in rec.calls] == [1, 3, 6]      # the tree drawn so far
    for tokens, par, _ in rec.calls:
        assert tokens.tolist() == tree.tokens[: len(par)].tolist()
    assert float(tree.draft_probs[7].abs().sum()) == 0.0     # leaves: "not computed"
    assert (sampling == "race") == (tree.race is not None)
    if sampling == "race":
        erss.check(tree)  # children are the first arrivals of the stored races


def test_same_seed_same_tree_and_pieces_without_target():
    target, draft = random_markov_pair(6, 0.5, seed=2, eos=False)
    prefix = (0,)
    fn = context_draft_fn(draft.probs, prefix)
    a = draw_tree(binary(4), 0, fn, "race", torch.Generator().manual_seed(9))
    b = draw_tree(binary(4), 0, fn, "race", torch.Generator().manual_seed(9))
    c = draw_tree(binary(4), 0, fn, "race", torch.Generator().manual_seed(10))
    assert isinstance(a, DraftPieces)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.race, b.race)
    assert not torch.equal(a.race, c.race)
    tree = a.with_target(context_target_fn(target.probs, prefix)(a.tokens, a.parents.tolist()))
    assert tree.num_nodes == 15 and tree.sampling == "race"


@pytest.mark.parametrize("sampling", ["iid", "without_replacement"])
def test_tree_law_matches_exact_enumeration(sampling):
    # the joint law of all drafted tokens equals the harness's enumeration (H1's exact.py)
    target, draft = random_markov_pair(3, 0.6, seed=4, eos=False)
    prefix = (1,)
    parents = [-1, 0, 0, 1]
    law = {tuple(t.tokens.tolist()): p for p, t in enumerate_drafts(target, draft, prefix, parents, sampling)}
    gen = torch.Generator().manual_seed(1)
    fn = context_draft_fn(draft.probs, prefix)
    counts = Counter(tuple(draw_tree(parents, 1, fn, sampling, gen).tokens.tolist()) for _ in range(3000))
    assert _chi2(counts, law) > P_VALUE


def test_root_only_tree():
    target, draft = random_markov_pair(4, 0.5, seed=0, eos=False)
    tree = draw_tree([-1], 2, context_draft_fn(draft.probs, (2,)), "iid", torch.Generator()).scored_by(
        context_target_fn(target.probs, (2,)))
    assert tree.num_nodes == 1 and tree.vocab_size == 4


def test_draw_tree_errors():
    target, draft = random_markov_pair(4, 0.5, seed=0, eos=False)
    fn = context_draft_fn(draft.probs, (0,))
    gen = torch.Generator()
    depth_first = [-1, 0, 1, 0]
    with pytest.raises(ValueError, match="level order"):
        draw_tree(depth_first, 0, fn, "iid", gen)
    draw_tree(level_order(depth_first), 0, fn, "iid", gen)
    with pytest.raises(ValueError, match="unknown sampling mode"):
        draw_tree([-1, 0], 0, fn, "greedy", gen)
    with pytest.raises(ValueError, match="sums to 0.0"):
        draw_tree([-1, 0], 0, lambda t, p, n: torch.zeros(len(n), 4), "iid", gen)
    with pytest.raises(ValueError, match=r"must return a \[1, V\] tensor"):
        draw_tree([-1, 0], 0, lambda t, p, n: torch.ones(4) / 4, "iid", gen)
    with pytest.raises(ValueError, match="negative or non-finite"):
        draw_tree([-1, 0], 0, lambda t, p, n: torch.tensor([[1.5, -0.5]]), "iid", gen)
    with pytest.raises(ValueError, match="must start with -1"):
        draw_tree([0, 0], 0, fn, "iid", gen)


def test_a_forest_drafts_each_tree_as_draw_tree_does_with_one_draft_call_per_level():
    """Trees drafted in lockstep get exactly `draw_tree`'s draws with the same generators, the draft runs
    once per level of the deepest tree, and one target call on the merged tree scores them all."""
    target, draft = random_markov_pair(6, 0.5, seed=3, eos=False)
    prefix = (2, 4)
    shapes = [("parents:-1,0,0,1,1,2,3,3", "iid"), ("chain:5", "race"), ("kary:2x3", "without_replacement"),
              ("parents:-1", "race"), ("batch:3x1", "topk")]
    arms = [(parse_shape(s), sampling, torch.Generator().manual_seed(10 + a)) for a, (s, sampling) in enumerate(shapes)]
    rec = _Recorder(draft, prefix)
    forest = draw_forest(arms, prefix[-1], rec)
    assert len(rec.calls) == 5  # chain:5 has five levels to draft; the others ride along
    trees = forest.scored_by(context_target_fn(target.probs, prefix))
    fn = context_draft_fn(draft.probs, prefix)
    for a, (parents, sampling, _) in enumerate(arms):
        alone = draw_tree(parents, prefix[-1], fn, sampling, torch.Generator().manual_seed(10 + a))
        tree = trees[a]
        assert torch.equal(tree.tokens, alone.tokens) and tree.parent_list == list(parents)
        assert torch.allclose(tree.draft_probs, alone.draft_probs)
        assert (alone.race is None) == (tree.race is None)
        if alone.race is not None:
            assert torch.equal(tree.race, alone.race)
        exact = context_target_fn(target.probs, prefix)(alone.tokens, list(parents))
        assert torch.allclose(tree.target_probs, exact)
    assert forest.parents[0] == -1 and len(forest.parents) == 1 + sum(len(p) - 1 for p, _, _ in arms)


def test_forest_errors():
    _, draft = random_markov_pair(4, 0.5, seed=0, eos=False)
    fn = context_draft_fn(draft.probs, (0,))
    with pytest.raises(ValueError, match="at least one"):
        draw_forest([], 0, fn)
    with pytest.raises(ValueError, match="unknown sampling mode"):
        draw_forest([([-1, 0], "iid", torch.Generator()), ([-1, 0], "greedy", torch.Generator())], 0, fn)
    with pytest.raises(ValueError, match="generator"):
        draw_forest([([-1, 0], "iid", None)], 0, fn)
