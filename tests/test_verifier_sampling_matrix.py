"""Every verifier's declaration (``Verifier.accepts``: the (shape kind, sampling) pairs, ``lossless``) is
what its ``check`` enforces, and every declared pair is proven lossless (issue 3: "exact losslessness for
every verifier x every sampling mode it accepts"; docs/ARCHITECTURE.md: "a verifier given a tree it cannot
handle raises a ValueError"). Nothing here names a verifier: the cases come from the registries.

Where each declared pair is proven: chains with iid children in test_chain_verifiers_exact.py
(`test_exact_law_equals_target`), chains with without-replacement / top-k children here
(`test_declared_chain_pairs_are_lossless`), branching trees in test_tree_verifiers_exact.py
(`test_exact_losslessness`), race trees here for a verifier that also declares without replacement on
that shape (it must verify a race tree exactly as the same tree labelled without replacement, which is
exact-tested; race children have that law, tests/test_drafting.py), and otherwise by Monte Carlo
(test_tree_verifiers_exact.py::test_end_to_end_sampling_is_target_distributed).
"""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from specdec_lib import exact
from specdec_lib.drafting import context_draft_fn, context_target_fn, draw_tree
from specdec_lib.models.synthetic import random_markov_pair
from specdec_lib.tree import SAMPLING_MODES, DraftTree, batch, chain_parents
from specdec_lib.verifiers import NOT_LOSSLESS, VERIFIERS, declared_pairs, exact_law, verify
from specdec_lib.verifiers import block, match
from specdec_lib.verifiers.base import SHAPE_KINDS, Verifier, accepted_pairs, shape_kind

ALL = {**VERIFIERS, **NOT_LOSSLESS}
# concrete shapes of each kind: a chain; a binary tree, a one-level star, two chains from the root
KINDS = {"chain": (tuple(chain_parents(3)),), "tree": ((-1, 0, 0, 1, 1, 2), (-1, 0, 0, 0), tuple(batch(2, 2)))}
assert set(KINDS) == set(SHAPE_KINDS)


@lru_cache(maxsize=None)
def _tree(parents, sampling, seed=3, vocab=4):
    target, draft = random_markov_pair(vocab, 0.8, seed=seed, eos=False)
    prefix = (1,)
    return draw_tree(list(parents), prefix[-1], context_draft_fn(draft.probs, prefix), sampling,
                     torch.Generator().manual_seed(seed)).scored_by(context_target_fn(target.probs, prefix))


def _relabelled(tree, sampling):
    return DraftTree(tree.tokens, tree.parents, tree.draft_probs, tree.target_probs, sampling)


# ----- the declarations --------------------------------------------------------------------------

def test_every_registered_verifier_declares_itself():
    assert not set(VERIFIERS) & set(NOT_LOSSLESS)
    for registry, lossless in ((VERIFIERS, True), (NOT_LOSSLESS, False)):
        for name, v in registry.items():
            assert v.name == name
            assert v.accepts is not None, f"verifier {name!r} declares no accepts (Verifier(accepts=...))"
            assert v.lossless is lossless, f"verifier {name!r}: lossless={v.lossless!r}, registered as {lossless}"
            assert not lossless or v.law is not None, f"lossless verifier {name!r} needs an exact law (tests)"


def _declaration_mismatches(v: Verifier) -> list[str]:
    """Every (shape, sampling) tree on which ``v.check`` disagrees with ``v.accepts``."""
    out = []
    for kind, shapes in KINDS.items():
        for parents in shapes:
            for sampling in SAMPLING_MODES:
                tree = _tree(parents, sampling)
                assert shape_kind(tree) == kind
                try:
                    v.check(tree)
                    accepted = True
                except ValueError as err:
                    assert len(str(err)) > 20, (v.name, str(err))   # says why
                    accepted = False
                if accepted != ((kind, sampling) in v.accepts):
                    out.append(f"{kind} {list(parents)} {sampling}: check {'accepts' if accepted else 'refuses'}")
    return out


@pytest.mark.parametrize("name", sorted(ALL))
def test_check_enforces_the_declaration(name):
    """``check`` accepts exactly the declared pairs; `verify` refuses the others too."""
    v = ALL[name]
    assert v.accepts is not None, f"verifier {name!r} declares no accepts"
    assert _declaration_mismatches(v) == []
    for kind, shapes in KINDS.items():
        for sampling in SAMPLING_MODES:
            if (kind, sampling) not in v.accepts:
                with pytest.raises(ValueError):
                    verify(name, _tree(shapes[0], sampling), torch.Generator())


def test_a_declaration_that_check_does_not_enforce_is_caught():
    """Controls: a check looser (any tree, declared chains only) or stricter (chains only, declared
    everything) than the declaration fails the comparison above."""
    loose = Verifier("loose", match.sample, match.law, lambda tree: None,
                     accepts=accepted_pairs(("chain",), SAMPLING_MODES), lossless=True)
    strict = Verifier("strict", block.sample, block.law, block.check,
                      accepts=accepted_pairs(SHAPE_KINDS, SAMPLING_MODES), lossless=True)
    assert any("tree" in m and "check accepts" in m for m in _declaration_mismatches(loose))
    assert any("topk" in m and "check refuses" in m for m in _declaration_mismatches(strict))


def test_declarations_are_validated():
    with pytest.raises(ValueError, match="samplings"):
        accepted_pairs(("chain",), ("beam",))
    with pytest.raises(ValueError, match="shapes"):
        accepted_pairs((), ("iid",))
    with pytest.raises(ValueError, match="accepts"):
        Verifier("x", match.sample, match.law, match.check, accepts=frozenset({("star", "iid")}))
    with pytest.raises(TypeError, match="accepts"):
        Verifier("x", match.sample, match.law, match.check, accepts={("chain", "iid")})
    with pytest.raises(TypeError, match="lossless"):
        Verifier("x", match.sample, match.law, match.check, accepts=block.CHAIN_ACCEPTS, lossless="yes")


# ----- the proofs that live here -------------------------------------------------------------------

CHAIN_MODES = ("without_replacement", "topk")


def chain_cases(registry) -> list[tuple[str, str]]:
    """(name, sampling) for every chain pair with without-replacement or top-k children."""
    return [(name, s) for name, kind, s in declared_pairs(registry) if kind == "chain" and s in CHAIN_MODES]


def race_reduction_names(registry, kind) -> list[str]:
    """Verifiers declaring race trees of ``kind`` and without-replacement trees of the same kind."""
    return [name for name, v in registry.items() if v.accepts and {(kind, "race"), (kind, "without_replacement")}
            <= v.accepts]


def test_a_new_declaration_is_picked_up():
    """A registered verifier needs no edit here: its declared pairs become cases by themselves."""
    dummy = Verifier("dummy", match.sample, match.law, match.check, lossless=True,
                     accepts=accepted_pairs(SHAPE_KINDS, ("without_replacement", "race")))
    registry = {**VERIFIERS, "dummy": dummy}
    assert [c for c in declared_pairs(registry) if c[0] == "dummy"] == [
        ("dummy", "chain", "race"), ("dummy", "chain", "without_replacement"),
        ("dummy", "tree", "race"), ("dummy", "tree", "without_replacement")]
    assert ("dummy", "without_replacement") in chain_cases(registry)
    assert ("dummy", "without_replacement") not in chain_cases(VERIFIERS)
    assert all("dummy" in race_reduction_names(registry, kind) for kind in SHAPE_KINDS)
    assert _declaration_mismatches(dummy) == [
        f"{kind} {list(p)} {s}: check accepts" for kind, shapes in KINDS.items() for p in shapes
        for s in SAMPLING_MODES if s in ("iid", "topk")]


@pytest.mark.parametrize("name, sampling", chain_cases(VERIFIERS))
def test_declared_chain_pairs_are_lossless(name, sampling):
    """A chain drawn without replacement (one child per node) is a chain of draws from q; a top-k chain is
    the greedy draft. Exact enumeration over gamma = 1..3 (stateful verifiers: across steps, gamma <= 2)."""
    target, draft = random_markov_pair(4, 0.7, seed=5, eos=True)
    stateful = VERIFIERS[name].next_state is not None
    for gamma in (1, 2, 3):
        parents, horizon = chain_parents(gamma), gamma + 1
        want = exact.target_law(target, (0,), horizon)
        if stateful and gamma > 2:
            continue
        law = exact.multistep_output_law if stateful else exact.step_output_law
        got = law(name, target, draft, (0,), parents, sampling, horizon)
        assert exact.max_abs_diff(got, want) < 1e-9, (name, gamma)


def test_greedy_block_single_step_on_without_replacement_chains_is_lossy():
    """Control for the test above: greedy_block's one-step law (no modification of the next step)."""
    target, draft = random_markov_pair(4, 0.7, seed=5, eos=True)
    for gamma in (2, 3):
        got = exact.step_output_law("greedy_block", target, draft, (0,), chain_parents(gamma),
                                    "without_replacement", gamma + 1)
        assert exact.max_abs_diff(got, exact.target_law(target, (0,), gamma + 1)) > 1e-4


@pytest.mark.parametrize("kind", SHAPE_KINDS)
@pytest.mark.parametrize("seed", [3, 4, 5])
def test_race_trees_are_verified_as_without_replacement_trees(kind, seed):
    """A verifier declaring race and without-replacement trees of one kind ignores the race times: on a
    race tree its exact law and its sampled outcomes are those on the tree labelled without_replacement."""
    names = race_reduction_names(VERIFIERS, kind)
    assert names
    for parents in KINDS[kind]:
        tree = _tree(parents, "race", seed=seed)
        twin = _relabelled(tree, "without_replacement")
        for name in names:
            assert torch.allclose(exact_law(name, tree), exact_law(name, twin), atol=1e-15, rtol=0), name
            for s in range(5):
                a = verify(name, tree, torch.Generator().manual_seed(s))
                b = verify(name, twin, torch.Generator().manual_seed(s))
                assert (a.path, a.token) == (b.path, b.token), name

