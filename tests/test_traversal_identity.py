"""Traversal Verification's "same P(tau >= 1) as token-level" (docs/methods/traversal.md §3.4 P3), pinned exactly:
the identity holds given the root's children, averaged over the drafting below level 1 (Lemma A.2), at
every context, with i.i.d. or without-replacement siblings, a sub-vocabulary draft and top-p on the
target; it does not hold per drafted tree; it breaks when the children are not drawn from the rows
the verifier is given. The level-l generalisation (Rao-Blackwellised CCDF) is checked the same way.
All by exact enumeration (specdec_lib.theory.traversal_identity docstring)."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction as F

import numpy as np
import pandas as pd
import pytest
import torch

from specdec_lib import experiments as E
from specdec_lib.theory import traversal_identity as TI
from specdec_lib.exact import enumerate_drafts
from specdec_lib.experiments import TreeRecord
from specdec_lib.models.synthetic import ContextIndependentLM, ToyLM, random_markov_pair
from specdec_lib.sampling import process_logits
from specdec_lib.tree import DraftTree, batch, binary
from specdec_lib.verifiers import exact_law

EXACT = 1e-12
PREFIX = (0,)
FIG1 = [-1, 0, 0, 1, 1, 2]
UNBALANCED = [-1, 0, 0, 1, 3]
DEEP = [-1, 0, 0, 1, 1, 2, 3]  # three drafted levels, small enough to enumerate (V = 3: 729 trees)


class SubVocabulary(ToyLM):
    """A draft that never proposes ``banned`` tokens (the project's sub-vocabulary head, in small)."""

    def __init__(self, base: ToyLM, banned):
        super().__init__(base.vocab_size)
        self.base, self.banned = base, list(banned)

    def _next(self, context):
        row = self.base.probs(context).clone()
        row[self.banned] = 0.0
        return row / row.sum()


class TopP(ToyLM):
    """The target with nucleus filtering (top-p on the target only, `sampling` convention)."""

    def __init__(self, base: ToyLM, top_p: float):
        super().__init__(base.vocab_size)
        self.base, self.top_p = base, top_p

    def _next(self, context):
        return process_logits(torch.log(self.base.probs(context)), 1.0, self.top_p).to(torch.float64)


def models(kind: str, seed: int = 0):
    target, draft = random_markov_pair(3, 0.8, seed, eos=False)
    if kind == "subvocab":
        draft = SubVocabulary(draft, [2])
    elif kind == "top_p":
        target = TopP(target, 0.75)
    elif kind == "toy":
        target, draft = ContextIndependentLM([.3, .4, .3]), ContextIndependentLM([.6, .3, .1])
    return target, draft


def _grouped(trees, level: int):
    """Enumerated trees grouped by their tokens at depth <= level: {key: [(prob, tree), ...]}."""
    groups = defaultdict(list)
    for prob, tree in trees:
        key = tuple(int(tree.tokens[i]) for i, d in enumerate(tree.depths) if d <= level)
        groups[key].append((prob, tree))
    return groups


# ----- closed forms ---------------------------------------------------------------------------------

def test_first_level_closed_forms_match_the_spec_toys():
    # docs/methods/traversal.md T2 / T5: two children, P_b = [.3, .4, .3], P_s = [.6, .3, .1]
    p, q = [.3, .4, .3], [.6, .3, .1]
    assert TI.first_level_acceptance_iid(p, q, 1) == pytest.approx(0.7, abs=EXACT)
    assert TI.first_level_acceptance_iid(p, q, 2) == pytest.approx(float(F(41, 50)), abs=EXACT)
    assert TI.first_level_acceptance(p, q, 2, "without_replacement") == pytest.approx(float(F(7, 8)), abs=EXACT)
    assert TI.first_level_acceptance_iid(p, q, 0) == 0.0
    assert TI.first_level_acceptance_iid([.5, .5], [.5, .5], 3) == pytest.approx(1.0, abs=EXACT)


@pytest.mark.parametrize("seed", range(6))
def test_lemma_a2_at_one_node(seed):
    """E over the children (and grandchildren) of P(traversal accepts through the node) = rho, for any
    rho, any current target row and any rows below: closed form and brute force through the verifier."""
    gen = torch.Generator().manual_seed(seed)
    vocab = 3
    dirichlet = torch.distributions.Dirichlet(torch.full((vocab,), 0.6))
    torch.manual_seed(seed)
    r, q = dirichlet.sample().double(), dirichlet.sample().double()
    rows = [dirichlet.sample().double() for _ in range(vocab)]
    rho = float(torch.rand(1, generator=gen))
    for k in (1, 2, 3):
        assert TI.node_subtree_acceptance_iid_leaves(rho, r, q, k) == pytest.approx(rho, abs=EXACT)
    assert TI.node_subtree_acceptance_enumerated(rho, r, q, rows, 2) == pytest.approx(rho, abs=EXACT)
    for sampling in ("iid", "without_replacement"):
        got = TI.node_subtree_acceptance_enumerated(rho, r, q, rows, 2, grandchildren=2, sampling=sampling)
        assert got == pytest.approx(rho, abs=1e-11), sampling


# ----- the identity, given the root's children ------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "subvocab", "top_p", "toy"])
@pytest.mark.parametrize("sampling", ["iid", "without_replacement"])
@pytest.mark.parametrize("shape", ["binary3", "figure1", "unbalanced"])
def test_first_level_identity_given_root_children(kind, sampling, shape):
    """E[P_traversal(tau >= 1) | root children] == P_token(tau >= 1 | root children), exactly, and per
    tree they differ (the identity is over the drafting below level 1, not per tree)."""
    parents = {"binary3": binary(3), "figure1": FIG1, "unbalanced": UNBALANCED}[shape]
    target, draft = models(kind)
    trees = enumerate_drafts(target, draft, PREFIX, parents, sampling)
    worst, per_tree = 0.0, 0.0
    for group in _grouped(trees, 1).values():
        mass = sum(p for p, _ in group)
        tra = sum(p * TI.level_ccdf("traversal", t)[1] for p, t in group) / mass
        tok = [TI.level_ccdf("token", t)[1] for _, t in group]
        assert max(tok) - min(tok) < EXACT  # token's P(tau >= 1) only looks at level 1
        worst = max(worst, abs(tra - tok[0]))
        per_tree = max(per_tree, max(abs(TI.level_ccdf("traversal", t)[1] - tok[0]) for _, t in group))
    assert worst < 1e-12
    assert per_tree > 1e-3


@pytest.mark.parametrize("kind", ["plain", "subvocab", "top_p"])
def test_first_level_closed_form_is_the_average_over_all_drafting(kind):
    """With i.i.d. root children both verifiers' P(tau >= 1), averaged over the whole tree, equal
    1 - prod_j (1 - beta_j) computed from the two root rows alone."""
    target, draft = models(kind, seed=3)
    for parents in (binary(3), FIG1, batch(3, 2)):
        trees = enumerate_drafts(target, draft, PREFIX, parents, "iid")
        want = TI.first_level_acceptance_iid(target.probs(PREFIX), draft.probs(PREFIX), parents.count(0))
        for verifier in ("token", "traversal"):
            got = sum(p * TI.level_ccdf(verifier, t)[1] for p, t in trees)
            assert got == pytest.approx(want, abs=1e-12), verifier


def test_identity_breaks_when_children_are_not_drawn_from_the_given_rows():
    """Control: grandchildren drawn from one draft but verified against another's rows (a verifier given
    the wrong draft rows) -- the averaged P(tau >= 1) of traversal then differs from token's."""
    target, draft = models("plain", seed=1)
    _, other = random_markov_pair(3, 0.8, 7, eos=False)
    worst = 0.0
    for group in _grouped(enumerate_drafts(target, draft, PREFIX, binary(3), "iid"), 1).values():
        mass, tra, tok = 0.0, 0.0, None
        for prob, tree in group:
            rows = tree.draft_probs.clone()
            for i, d in enumerate(tree.depths):
                if d == 1:  # the rows the verifier sees at the root's children
                    rows[i] = other.probs(PREFIX + (int(tree.tokens[i]),))
            wrong = DraftTree(tree.tokens, tree.parents, rows, tree.target_probs, sampling="iid")
            mass += prob
            tra += prob * TI.level_ccdf("traversal", wrong)[1]
            tok = TI.level_ccdf("token", wrong)[1]
        worst = max(worst, abs(tra / mass - tok))
    assert worst > 1e-3


def test_traversal_equals_token_on_stars():
    """Depth 1 (a star): every child is a leaf, so traversal is token-level RRS tree by tree."""
    for kind in ("plain", "subvocab", "top_p"):
        target, draft = models(kind, seed=2)
        for sampling in ("iid", "without_replacement"):
            for _, tree in enumerate_drafts(target, draft, PREFIX, batch(3, 1), sampling):
                assert torch.allclose(exact_law("traversal", tree), exact_law("token", tree), atol=1e-15, rtol=0)


# ----- deeper levels: the Rao-Blackwellised CCDF -----------------------------------------------------

@pytest.mark.parametrize("sampling", ["iid", "without_replacement"])
@pytest.mark.parametrize("kind", ["plain", "top_p"])
def test_rao_blackwell_ccdf_is_the_conditional_expectation(sampling, kind):
    """E[P^(D)(tau >= l) | levels <= l] = P^(l)(tau >= l) (the tree restricted to l levels), every l."""
    target, draft = models(kind, seed=4)
    trees = enumerate_drafts(target, draft, PREFIX, DEEP, sampling)
    depth = max(trees[0][1].depths)
    for level in range(1, depth + 1):
        for group in _grouped(trees, level).values():
            mass = sum(p for p, _ in group)
            full = sum(p * TI.level_ccdf("traversal", t)[level] for p, t in group) / mass
            assert full == pytest.approx(TI.rao_blackwell_ccdf(group[0][1])[level], abs=1e-12)
    # token-level never looks below level l: its RB CCDF is its CCDF
    for _, tree in trees[:20]:
        assert np.allclose(TI.rao_blackwell_ccdf(tree, "token"), TI.level_ccdf("token", tree), atol=1e-14)


def test_depth_trend_frame_is_unbiased_and_nested():
    target, draft = models("plain", seed=5)
    trees = enumerate_drafts(target, draft, PREFIX, DEEP, "iid")
    records = [TreeRecord("p", "c", i, t, 1) for i, (_, t) in enumerate(trees)]
    frame = TI.depth_trend_frame(records, [1, 2, 3])
    probs = np.array([p for p, _ in trees])
    for d, part in frame.groupby("depth"):
        w = probs[part["step"].to_numpy()]
        assert float(w @ part["traversal"]) == pytest.approx(float(w @ part["traversal_rb"]), abs=1e-12)
        if d == 1:
            assert np.allclose(part["traversal"], part["token"], atol=1e-14)
            assert np.allclose(part["traversal_rb"], part["token"], atol=1e-14)
        assert np.allclose(part["p1_token"], frame.query("depth == 1")["p1_token"].to_numpy(), atol=1e-14)
    # per tree the RB estimate differs from the raw one (it is an average over the deeper drafting)
    d3 = frame.query("depth == 3")
    assert float((d3["traversal"] - d3["traversal_rb"]).abs().max()) > 1e-3


# ----- per-tree decomposition and the sampled difference ---------------------------------------------

def test_first_level_decomposition_and_frame():
    target, draft = models("plain", seed=6)
    trees = enumerate_drafts(target, draft, PREFIX, binary(3), "iid")
    records = [TreeRecord("p", "c", 0, t, 1, draw=i) for i, (_, t) in enumerate(trees)]
    frame = TI.first_level_frame(records)
    assert float((frame["traversal_rb"] - frame["token"]).abs().max()) < 1e-12
    probs = np.array([p for p, _ in trees])
    assert float(probs @ frame["difference"]) == pytest.approx(0.0, abs=1e-12)
    assert float(frame["difference"].abs().max()) > 1e-3
    assert np.allclose(frame["exact"], TI.first_level_acceptance_iid(target.probs(PREFIX), draft.probs(PREFIX), 2))
    # without replacement: no closed form for the RB value, NaN
    wr = enumerate_drafts(target, draft, PREFIX, binary(3), "without_replacement")[0][1]
    assert np.isnan(TI.first_level_decomposition(wr)["traversal_rb"])


def test_martingale_z():
    frame = pd.DataFrame({"prompt_id": ["a"] * 4 + ["b"] * 4, "step": [0, 0, 1, 1] * 2,
                          "difference": [0.1, 0.3, -0.2, 0.0, 0.2, 0.2, 0.0, -0.4]})
    z = TI.martingale_z(frame)
    per = np.array([0.2, -0.1, 0.2, -0.2])
    assert z["mean"] == pytest.approx(per.mean())
    assert z["se"] == pytest.approx(per.std(ddof=1) / 2)
    assert z["contexts"] == 4 and z["trees"] == 8


def test_collectors_on_the_toy_pair():
    pair = E.toy_pair(4, 0.7, 1)
    prompts = E.prompts_for(pair, 2)
    first = E.collect_first_level(pair, prompts, copies=3, max_new_tokens=4)
    assert len(first) and float((first["traversal_rb"] - first["token"]).abs().max()) < 1e-12
    trend = E.collect_depth_trend(pair, prompts, depths=(1, 2, 3), copies=2, max_new_tokens=4)
    assert set(trend["verifier"]) == {"token", "traversal", "traversal_rb"} and set(trend["depth"]) == {1, 2, 3}
    out = E.real_pair_check("smoke", num_prompts=2, copies=2, max_new_tokens=4, save=False)
    assert out["first_level"].verdict == "reproduced"


def test_paired_expected_tokens_takes_the_rao_blackwellised_estimator():
    """'traversal_rb' in `paired_expected_tokens` is `rao_blackwell_ccdf` per tree: same mean as traversal over
    the exact drafting law, token's P(tau >= 1) tree by tree."""
    target, draft = models("plain", seed=5)
    trees = enumerate_drafts(target, draft, PREFIX, DEEP, "iid")
    records = [TreeRecord("p", "c", i, t, 1) for i, (_, t) in enumerate(trees)]
    frame = E.paired_expected_tokens(records, ["token", "traversal", "traversal_rb"])
    wide = frame.pivot_table(index="step", columns="verifier", values=["expected_tokens", "p_accept_first"])
    probs = np.array([p for p, _ in trees])[wide.index.to_numpy()]
    tokens = wide["expected_tokens"]
    assert float(probs @ tokens["traversal"]) == pytest.approx(float(probs @ tokens["traversal_rb"]), abs=1e-12)
    assert np.allclose(wide["p_accept_first"]["traversal_rb"], wide["p_accept_first"]["token"], atol=1e-14)
    assert float((tokens["traversal"] - tokens["traversal_rb"]).abs().max()) > 1e-3


# ----- the control-variate estimator -------------------------------------------------------------------

@pytest.mark.parametrize("sampling", ["iid", "without_replacement"])
def test_control_variate_ccdf_has_traversals_mean_and_a_control_misses(sampling):
    """rb + w (rb - raw) has traversal's exact mean over every drafted tree, level by level, for any fixed w;
    the control, corrected by token-level's CCDF instead of traversal's own, misses it."""
    target, draft = models("plain", seed=7)
    trees = enumerate_drafts(target, draft, PREFIX, DEEP, sampling)
    probs = np.array([p for p, _ in trees])
    raw = np.stack([TI.level_ccdf("traversal", t) for _, t in trees])
    for weight in (TI.CONTROL_VARIATE_WEIGHT, 1.0, -0.3):
        cv = np.stack([TI.control_variate_ccdf(t, weight) for _, t in trees])
        # a caller's own Rao-Blackwellised CCDF (experiments.paired shares it between estimators) gives the same
        given = np.stack([TI.control_variate_ccdf(t, weight, rb=TI.rao_blackwell_ccdf(t)) for _, t in trees[:50]])
        assert np.array_equal(given, cv[:50])
        assert np.allclose(probs @ cv, probs @ raw, atol=1e-12)
        assert float(np.abs(cv - raw).max()) > 1e-3  # per tree it is another number
    rb = np.stack([TI.rao_blackwell_ccdf(t) for _, t in trees])
    token = np.stack([TI.level_ccdf("token", t) for _, t in trees])
    control = rb + TI.CONTROL_VARIATE_WEIGHT * (rb - token)
    assert float(np.abs(probs @ control - probs @ raw).max()) > 1e-3


def test_paired_expected_tokens_takes_the_control_variate_estimator():
    target, draft = models("plain", seed=5)
    trees = enumerate_drafts(target, draft, PREFIX, DEEP, "iid")
    records = [TreeRecord("p", "c", i, t, 1) for i, (_, t) in enumerate(trees)]
    frame = E.paired_expected_tokens(records, ["traversal", "traversal_rb", "traversal_cv"])
    wide = frame.pivot_table(index="step", columns="verifier", values=["expected_tokens", "p_accept_first"])
    tokens, first = wide["expected_tokens"], wide["p_accept_first"]
    w = TI.CONTROL_VARIATE_WEIGHT
    for part in (tokens, first):
        assert np.allclose(part["traversal_cv"], part["traversal_rb"] + w * (part["traversal_rb"] - part["traversal"]),
                           atol=1e-12)
    probs = np.array([p for p, _ in trees])[wide.index.to_numpy()]
    assert float(probs @ tokens["traversal_cv"]) == pytest.approx(float(probs @ tokens["traversal"]), abs=1e-12)


@pytest.mark.parametrize("weight", [float("nan"), True, "0.5", None])
def test_control_variate_weight_must_be_a_finite_number(weight):
    target, draft = models("plain", seed=5)
    tree = enumerate_drafts(target, draft, PREFIX, FIG1, "iid")[0][1]
    with pytest.raises(ValueError, match="weight"):
        TI.control_variate_ccdf(tree, weight)
