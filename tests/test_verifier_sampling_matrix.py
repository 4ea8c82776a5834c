"""Every verifier x sampling mode pair is either rejected by the verifier's ``check`` (ValueError) or
proven lossless by a test (issue 3: "exact losslessness for every verifier x every sampling mode it
accepts"; docs/ARCHITECTURE.md: "a verifier given a tree it cannot handle raises a ValueError").

`ACCEPTED` is the table of pairs each verifier accepts, on a chain and on a branching tree; `PROOF`
names the test that proves each accepted pair lossless. A verifier that starts accepting a new pair
fails `test_acceptance_matrix` until the pair gets a proof. The pairs not covered elsewhere are proven
here: the chain verifiers on without-replacement chains (exact enumeration) and every race-tree pair
except ``erss`` (those verifiers ignore the race times, and race children have the law of sampling
without replacement, tests/test_drafting.py::test_ordered_sample_without_replacement_law, so a race
tree is verified exactly as the same tree labelled ``without_replacement``, whose law is exact-tested).
"""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from specdec_lib import exact
from specdec_lib.drafting import context_draft_fn, context_target_fn, draw_tree
from specdec_lib.models.synthetic import random_markov_pair
from specdec_lib.tree import DraftTree, chain_parents
from specdec_lib.verifiers import VERIFIERS, exact_law, verify

SAMPLINGS = ("iid", "without_replacement", "topk", "race")
KINDS = {"chain": chain_parents(3), "tree": [-1, 0, 0, 1, 1, 2]}
CHAIN_ONLY = ("asps", "block", "greedy_block")

ACCEPTED = {
    ("chain", "iid"): {"token", "asps", "block", "greedy_block", "traversal", "spectr", "match"},
    ("chain", "without_replacement"): {"token", "asps", "block", "greedy_block", "traversal", "spectr", "match"},
    ("chain", "topk"): {"token", "traversal", "match"},
    ("chain", "race"): {"token", "asps", "block", "greedy_block", "traversal", "erss", "spectr", "match"},
    ("tree", "iid"): {"token", "traversal", "spectr", "match"},
    ("tree", "without_replacement"): {"token", "traversal", "match"},
    ("tree", "topk"): {"token", "traversal", "match"},
    ("tree", "race"): {"token", "traversal", "erss", "match"},
}

_CHAIN = "test_chain_verifiers_exact.py::test_exact_law_equals_target"
_TREE = "test_tree_verifiers_exact.py::test_exact_losslessness"
_RACE = "test_verifier_sampling_matrix.py::test_race_trees_are_verified_as_without_replacement_trees"
_WR_CHAIN = "test_verifier_sampling_matrix.py::test_chain_verifiers_on_without_replacement_chains"
_ERSS = "test_tree_verifiers_exact.py::test_end_to_end_sampling_is_target_distributed[erss-race]"


def _proof(kind, sampling, name):
    if sampling == "race":
        return _ERSS if name == "erss" else _RACE
    if name in CHAIN_ONLY:
        return _CHAIN if sampling == "iid" else _WR_CHAIN
    if name == "spectr" and sampling == "without_replacement":
        return "test_tree_verifiers_exact.py::test_spectr_on_a_without_replacement_chain"
    return _CHAIN if (kind, sampling, name) == ("chain", "iid", "token") else _TREE


@lru_cache(maxsize=None)
def _tree(kind, sampling, seed=3, vocab=4):
    target, draft = random_markov_pair(vocab, 0.8, seed=seed, eos=False)
    prefix = (1,)
    return draw_tree(KINDS[kind], prefix[-1], context_draft_fn(draft.probs, prefix), sampling,
                     torch.Generator().manual_seed(seed)).scored_by(context_target_fn(target.probs, prefix))


def _relabelled(tree, sampling):
    return DraftTree(tree.tokens, tree.parents, tree.draft_probs, tree.target_probs, sampling)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_acceptance_matrix(kind, sampling):
    tree = _tree(kind, sampling)
    accepted = set()
    for name, v in VERIFIERS.items():
        try:
            v.check(tree)
        except ValueError as err:
            assert len(str(err)) > 20, (name, str(err))   # says why
            with pytest.raises(ValueError):
                verify(name, tree, torch.Generator())
            continue
        accepted.add(name)
        assert _proof(kind, sampling, name)
    assert accepted == ACCEPTED[(kind, sampling)]


@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_chain_verifiers_on_without_replacement_chains(gamma):
    """A chain drawn "without replacement" (one child per node) is a chain of draws from q: the chain
    verifiers stay exactly lossless on it (greedy_block across steps, Block Verification Alg. 6)."""
    target, draft = random_markov_pair(4, 0.7, seed=5, eos=True)
    parents, horizon = chain_parents(gamma), gamma + 1
    want = exact.target_law(target, (0,), horizon)
    for name in ("token", "asps", "block"):
        got = exact.step_output_law(name, target, draft, (0,), parents, "without_replacement", horizon)
        assert exact.max_abs_diff(got, want) < 1e-9, name
    if gamma <= 2:
        got = exact.multistep_output_law("greedy_block", target, draft, (0,), parents, "without_replacement",
                                         horizon)
        assert exact.max_abs_diff(got, want) < 1e-9
    # control: the single-step greedy_block law (no modification of the next step) is lossy
    if gamma >= 2:
        got = exact.step_output_law("greedy_block", target, draft, (0,), parents, "without_replacement", horizon)
        assert exact.max_abs_diff(got, want) > 1e-4


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("seed", [3, 4, 5])
def test_race_trees_are_verified_as_without_replacement_trees(kind, seed):
    """Every verifier but erss ignores the race times: on a race tree its exact law and its sampled
    verdicts are those on the same tree labelled without_replacement."""
    tree = _tree(kind, "race", seed=seed)
    twin = _relabelled(tree, "without_replacement")
    names = sorted(ACCEPTED[(kind, "race")] - {"erss"})
    assert names
    for name in names:
        assert torch.allclose(exact_law(name, tree), exact_law(name, twin), atol=1e-15, rtol=0), name
        for s in range(5):
            a = verify(name, tree, torch.Generator().manual_seed(s))
            b = verify(name, twin, torch.Generator().manual_seed(s))
            assert (a.path, a.token) == (b.path, b.token), name
