"""Exact losslessness of the tree verifiers: every registered verifier on every branching-tree pair it
declares (``Verifier.accepts``), no table of names.

For each declared (tree, sampling) pair, on several tree shapes and vocabularies of 3-5 tokens with
context-dependent (Markov) toy models: the exact law of the first ``depth`` tokens of one step
(enumerating every drafted tree with its probability, continuing the step's output with the target)
equals the target's law within 1e-9, and the same verifier made to redraw its extra token from the
target row fails it. Race pairs not reducible to without-replacement trees are tested by Monte Carlo
over races (chi-square), and so is every sampler against its exact law. Deliberately broken variants of
each verifier fail the same checks; the averaged relations of docs/methods/traversal.md §3.4 are checked.
"""

import functools
from collections import Counter, defaultdict

import pytest
import torch
from scipy.stats import chisquare

from specdec_lib.drafting import context_draft_fn, context_target_fn, draw_tree
from specdec_lib.exact import ENUMERABLE_SAMPLING, enumerate_drafts, max_abs_diff, multistep_output_law, target_law
from specdec_lib.models.synthetic import ContextIndependentLM, random_markov_pair
from specdec_lib.tree import SAMPLING_MODES, DraftTree, batch, binary, chain_parents
from specdec_lib.verifiers import VERIFIERS, declared_pairs, exact_law, expected_tokens, get_verifier, verify
from specdec_lib.verifiers import erss, match, spectr, token_level, traversal
from specdec_lib.verifiers.base import SHAPE_KINDS, Verifier, accepted_pairs

LOSSLESS = 1e-9
BROKEN = 1e-3
P_VALUE = 1e-4
PREFIX = (0,)

FIG1 = (-1, 0, 0, 1, 1, 2)
SHAPES = {  # name: (parents, vocabulary, zero_prob of the toy pair)
    "chain3": (tuple(chain_parents(3)), 5, 0.0),
    "batch2x2": (tuple(batch(2, 2)), 3, 0.0),
    "binary3": (tuple(binary(3)), 3, 0.0),
    "figure1": (FIG1, 3, 0.0),
    "unbalanced": ((-1, 0, 0, 1, 3), 4, 0.0),
    "figure1_zeros": (FIG1, 4, 0.4),   # zero probabilities: exercises the uniform fallback
    "figure1_toy": (FIG1, 3, "toy"),   # Traversal's toy P_b = [.3, .4, .3], P_s = [.6, .3, .1]
}
# the iid sweeps over 729 / 1024 trees run for the reference verifier only, to keep the file fast
HEAVY = {("binary3", "iid"), ("figure1_zeros", "iid")}
REFERENCE = "token"


def kind_of(parents):
    return "chain" if list(parents) == list(range(-1, len(parents) - 1)) else "tree"


@functools.lru_cache(maxsize=None)
def pair(vocab, zero_prob, seed=0):
    if zero_prob == "toy":
        return ContextIndependentLM([.3, .4, .3]), ContextIndependentLM([.6, .3, .1])
    return random_markov_pair(vocab, 0.7, seed=seed, eos=False, zero_prob=zero_prob)


@functools.lru_cache(maxsize=None)
def drafts(shape, sampling, seed=0):
    parents, vocab, zero_prob = SHAPES[shape]
    target, draft = pair(vocab, zero_prob, seed)
    return enumerate_drafts(target, draft, PREFIX, list(parents), sampling)


def depth_of(parents):
    d = [0] * len(parents)
    for i in range(1, len(parents)):
        d[i] = d[parents[i]] + 1
    return max(d) + 1


def output_law(verifier, shape, sampling, seed=0):
    """Exact law of the first `depth` tokens of one step, continued by the target."""
    v = verifier if isinstance(verifier, Verifier) else get_verifier(verifier)
    parents, vocab, zero_prob = SHAPES[shape]
    target, draft = pair(vocab, zero_prob, seed)
    horizon = depth_of(parents)
    if v.next_state is not None:  # lossless across steps only (greedy_block)
        return (multistep_output_law(v, target, draft, PREFIX, list(parents), sampling, horizon),
                target_law(target, PREFIX, horizon))
    emitted = defaultdict(float)
    for pd, tree in drafts(shape, sampling, seed):
        v.check(tree)
        law = v.law(tree, None)
        toks = tree.tokens.tolist()
        nodes, ys = torch.nonzero(law > 0, as_tuple=True)
        for i, y, p in zip(nodes.tolist(), ys.tolist(), law[nodes, ys].tolist()):
            emitted[tuple(toks[j] for j in tree.path_to(i)) + (y,)] += pd * p
    out = defaultdict(float)
    for seq, p in emitted.items():
        for cont, pc in target_law(target, PREFIX + seq, horizon - len(seq)).items():
            out[seq + cont] += p * pc
    return dict(out), target_law(target, PREFIX, horizon)


def exact_cases(registry) -> list[tuple[str, str, str]]:
    """(name, sampling, shape) for every declared (tree, sampling) pair that can be enumerated, on every
    branching shape of `SHAPES` (chains: test_chain_verifiers_exact.py, test_verifier_sampling_matrix.py)."""
    return [(name, s, shape) for name, kind, s in declared_pairs(registry) if kind == "tree"
            and s in ENUMERABLE_SAMPLING for shape in SHAPES if kind_of(SHAPES[shape][0]) == "tree"
            and not ((shape, s) in HEAVY and name != REFERENCE)]


@pytest.mark.parametrize("verifier, sampling, shape", exact_cases(VERIFIERS))
def test_exact_losslessness(verifier, sampling, shape):
    law, target = output_law(verifier, shape, sampling)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert max_abs_diff(law, target) < LOSSLESS


def _redrawing_the_extra_token(name):
    """``name`` with every node's extra token redrawn from the node's target row (mass kept per node)."""
    v = get_verifier(name)

    def law(tree, state):
        good = v.law(tree, state)
        rows = torch.stack([token_level.target_row(tree, i) for i in range(tree.num_nodes)])
        return good.sum(1, keepdim=True) * rows
    return Verifier(f"{name}_redraw", v.sample, law, v.check, next_state=v.next_state)


@pytest.mark.parametrize("verifier, sampling", sorted({(n, s) for n, s, _ in exact_cases(VERIFIERS)}))
def test_every_declared_pair_has_a_failing_control(verifier, sampling):
    """The exact check above can fail on each pair it proves: the same verifier, its extra token redrawn
    from the target row (the residual / rejection rule dropped), is far from lossless."""
    assert _max_error(_redrawing_the_extra_token(verifier), "figure1", sampling) > BROKEN


# ----- broken variants: each must FAIL the same check -------------------------------------------
def _relabelled(tree, sampling):
    return DraftTree(tree.tokens, tree.parents, tree.draft_probs, tree.target_probs, sampling)


def _mismatched(name, drawn_as, verified_as):
    """`name` applied as if the tree had been drawn `verified_as` (the spec's Eq. 2 mismatch)."""
    v = get_verifier(name)
    return Verifier(f"{name}_mismatch", lambda t, g, s: v.sample(_relabelled(t, verified_as), g, s),
                    lambda t, s: v.law(_relabelled(t, verified_as), s), lambda t: None)


def _max_error(verifier, shape, sampling):
    law, target = output_law(verifier, shape, sampling)
    return max_abs_diff(law, target)


def test_broken_token_without_residual(monkeypatch):
    monkeypatch.setattr(token_level, "residual_step", lambda target, rho, proposal: (target, 1.0))
    assert _max_error("token", "figure1", "without_replacement") > BROKEN
    assert _max_error("token", "chain3", "iid") > BROKEN


def test_broken_token_wrong_replacement_rule():
    # drawn without replacement, verified with the with-replacement rule (Eq. 2 skipped)
    assert _max_error(_mismatched("token", "without_replacement", "iid"), "figure1_toy", "without_replacement") > BROKEN


def test_broken_token_topk_with_the_draft_row(monkeypatch):
    # top-k children verified as if sampled from q (the lossy reading of "RRS on top-k")
    monkeypatch.setattr(token_level, "proposal_rule", lambda s: "without_replacement")
    assert _max_error("token", "batch2x2", "topk") > BROKEN


def test_broken_traversal_without_sequence_rate_update(monkeypatch):
    monkeypatch.setattr(traversal, "sequence_rate", lambda mass, rho: rho)
    assert _max_error("traversal", "figure1", "without_replacement") > BROKEN
    assert _max_error("traversal", "chain3", "iid") > BROKEN


def test_broken_traversal_wrong_parentheses_is_only_numerical(monkeypatch):
    # (S + 1) - rho equals S + (1 - rho) in exact arithmetic: still lossless at these sizes
    monkeypatch.setattr(traversal, "sequence_rate", lambda mass, rho: mass / ((mass + 1.0) - rho))
    assert _max_error("traversal", "figure1", "without_replacement") < LOSSLESS


def test_broken_traversal_wrong_replacement_rule():
    assert _max_error(_mismatched("traversal", "without_replacement", "iid"),
                      "figure1_toy", "without_replacement") > BROKEN


def test_broken_spectr_with_rho_one(monkeypatch):
    real = spectr.kseq_rho

    def rho_one(p, q, k):
        return 1.0, real(p, q, 1)[1]

    monkeypatch.setattr(spectr, "kseq_rho", rho_one)
    assert _max_error("spectr", "batch2x2", "iid") > BROKEN


def test_broken_match_redraws_on_mismatch():
    def law(tree, state):
        out = torch.zeros(tree.num_nodes, tree.vocab_size, dtype=torch.float64)
        reach = [0.0] * tree.num_nodes
        reach[0] = 1.0
        for node in range(tree.num_nodes):
            p = token_level.target_row(tree, node)
            kids = {int(tree.tokens[c]): c for c in reversed(tree.children[node])}
            for x, c in kids.items():
                reach[c] = reach[node] * float(p[x])
            miss = 1.0 - sum(float(p[x]) for x in kids)
            out[node] = reach[node] * miss * p  # BUG: a fresh draw instead of the unmatched draw
        return out

    broken = Verifier("match_redraw", match.sample, law, lambda t: None)
    assert _max_error(broken, "batch2x2", "iid") > BROKEN


# ----- samplers against the exact laws ----------------------------------------------------------
def _chi2(counts, law):
    keys = sorted(law, key=lambda k: -law[k])
    n = sum(counts.values())
    assert set(counts) <= set(law), f"sampled outcomes outside the law: {set(counts) - set(law)}"
    expected = [n * law[k] for k in keys]
    observed = [counts.get(k, 0) for k in keys]
    # pool cells with expected count < 5 into one
    big = [(o, e) for o, e in zip(observed, expected) if e >= 5]
    small = [(o, e) for o, e in zip(observed, expected) if e < 5]
    if small:
        big.append((sum(o for o, _ in small), sum(e for _, e in small)))
    obs, exp = zip(*big)
    return float(chisquare(obs, exp).pvalue)


def _random_tree(sampling, parents, vocab=4, seed=3):
    target, draft = random_markov_pair(vocab, 0.8, seed=seed, eos=False)
    prefix = (1,)
    return draw_tree(list(parents), prefix[-1], context_draft_fn(draft.probs, prefix), sampling,
                     torch.Generator().manual_seed(seed)).scored_by(context_target_fn(target.probs, prefix))


FIXED = {"tree": binary(3) + [3, 3], "chain": chain_parents(4)}


def sampler_cases(registry) -> list[tuple[str, str, str]]:
    """(name, sampling, kind): each sampling a verifier declares on branching trees, once, and for a
    chain-only verifier its first declared sampling on a chain (one child per node: the mode only labels
    how it was drawn). Race is left out where without replacement is declared on the same kind (the
    sampled outcomes are those of the relabelled tree, test_verifier_sampling_matrix.py)."""
    out = []
    for name, v in registry.items():
        kinds = {kind for kind, _ in v.accepts or ()}
        kind = "tree" if "tree" in kinds else "chain"
        modes = [s for s in SAMPLING_MODES if (kind, s) in (v.accepts or ())
                 and not (s == "race" and (kind, "without_replacement") in v.accepts)]
        out += [(name, s, kind) for s in (modes if kind == "tree" else modes[:1])]
    return out


@pytest.mark.parametrize("verifier, sampling, kind", sampler_cases(VERIFIERS))
def test_sampler_matches_exact_law_on_a_fixed_tree(verifier, sampling, kind):
    for seed in range(3, 30):  # a tree whose law is not a point mass (for erss: the walk reaches a leaf)
        tree = _random_tree(sampling, FIXED[kind], seed=seed)
        if int((exact_law(verifier, tree) > 0).sum()) > 2:
            break
    _sampler_vs_law(verifier, tree)


@pytest.mark.parametrize("verifier", ["token", "traversal"])
def test_sampler_matches_exact_law_with_the_uniform_fallback(verifier):
    # draft rows with two-token support and three children per node: the support runs out
    gen = torch.Generator().manual_seed(2)
    q = torch.tensor([[.6, 0, .4, 0], [0, .3, 0, .7], [.5, .5, 0, 0], [0, 0, 0, 1.0]], dtype=torch.float64)
    p = torch.softmax(torch.randn(7, 4, generator=gen, dtype=torch.float64), -1)
    parents = [-1, 0, 0, 0, 1, 1, 1]
    tree = draw_tree(parents, 0, lambda toks, par, nodes: q[[t % 4 for t in nodes]], "without_replacement",
                     gen).scored_by(lambda toks, par: p)
    assert tree.tokens[3] in (1, 3) and tree.tokens[6] in (0, 2)  # third children from the fallback
    _sampler_vs_law(verifier, tree)


def _sampler_vs_law(verifier, tree):
    law = exact_law(verifier, tree)
    cells = {(i, y): float(law[i, y]) for i, y in torch.nonzero(law > 0).tolist()}
    gen = torch.Generator().manual_seed(17)
    counts = Counter()
    for _ in range(1500):
        v = verify(verifier, tree, gen)
        counts[(v.path[-1] if v.path else 0, v.token)] += 1
    assert _chi2(counts, cells) > P_VALUE


def _end_to_end_counts(sample, sampling, n, seed, parents=FIG1):
    """draw_tree + a verifier's sampler + target continuation: counts of the first 3 tokens."""
    target, draft = pair(3, 0.0, 1)
    gen = torch.Generator().manual_seed(seed)
    draft_fn = context_draft_fn(draft.probs, PREFIX)
    target_fn = context_target_fn(target.probs, PREFIX)
    counts = Counter()
    for _ in range(n):
        tree = draw_tree(list(parents), PREFIX[-1], draft_fn, sampling, gen).scored_by(target_fn)
        out = sample(tree, gen).emitted(tree)
        while len(out) < 3:
            out.append(int(torch.multinomial(target.probs(PREFIX + tuple(out)), 1, generator=gen)))
        counts[tuple(out[:3])] += 1
    return counts, target_law(target, PREFIX, 3)


END_TO_END = {"tree": FIG1, "chain": tuple(chain_parents(2))}


def race_cases(registry) -> list[tuple[str, str, str]]:
    """(name, "race", kind) for every declared race pair without a declared without-replacement pair on the
    same kind: its losslessness needs the average over the races (Monte Carlo)."""
    return [(name, s, kind) for name, kind, s in declared_pairs(registry) if s == "race"
            and (kind, "without_replacement") not in registry[name].accepts]


# race cases, plus two sampler checks on drafting + verification together
@pytest.mark.parametrize("verifier, sampling, kind", race_cases(VERIFIERS) + [
    ("traversal", "without_replacement", "tree"), ("token", "race", "tree")])
def test_end_to_end_sampling_is_target_distributed(verifier, sampling, kind):
    counts, law = _end_to_end_counts(lambda tree, gen: verify(verifier, tree, gen), sampling, 1200, 23,
                                     END_TO_END[kind])
    assert _chi2(counts, law) > P_VALUE


def test_a_new_declaration_is_picked_up():
    """A registered verifier needs no edit here: its declared pairs become cases by themselves."""
    dummy = Verifier("dummy", match.sample, match.law, match.check, lossless=True,
                     accepts=accepted_pairs(SHAPE_KINDS, ("topk", "race")))
    registry = {**VERIFIERS, "dummy": dummy}
    new = [c for c in exact_cases(registry) if c not in exact_cases(VERIFIERS)]
    assert new == [("dummy", "topk", shape) for shape in SHAPES if kind_of(SHAPES[shape][0]) == "tree"]
    assert [c for c in sampler_cases(registry) if c[0] == "dummy"] == [("dummy", "topk", "tree"),
                                                                      ("dummy", "race", "tree")]
    assert [c for c in race_cases(registry) if c[0] == "dummy"] == [("dummy", "race", "chain"),
                                                                   ("dummy", "race", "tree")]


def test_broken_erss_printed_algorithm_fails(monkeypatch):
    # the printed Algorithm 5 uses Q in the race denominator: it just copies the draft
    def printed(tree, node):
        return token_level.draft_row(tree, node) if tree.children[node] else token_level.target_row(tree, node)

    monkeypatch.setattr(erss, "verification_row", printed)
    counts, law = _end_to_end_counts(erss.sample, "race", 600, 29)
    assert _chi2(counts, law) < 1e-6


def test_erss_law_is_the_sampled_walk():
    gen = torch.Generator().manual_seed(4)
    for seed in range(5):
        tree = _random_tree("race", binary(3), seed=seed)
        law = exact_law("erss", tree)
        assert float(law.sum()) == pytest.approx(1.0, abs=1e-12)
        v = erss.sample(tree, gen)
        end = v.path[-1] if v.path else 0
        assert float(law[end].sum()) == pytest.approx(1.0, abs=1e-12)
        if tree.children[end]:
            assert float(law[end, v.token]) == 1.0


# ----- relations averaged over drafted trees (docs/methods/traversal.md §3.4 P3/P4, Sequoia) ------------
def _tau(verifier, shape, sampling, seed):
    out = defaultdict(float)
    for pd, tree in drafts(shape, sampling, seed):
        law = exact_law(verifier, tree).sum(1).tolist()
        for node, mass in enumerate(law):
            out[tree.depths[node]] += pd * mass
    return [out[t] for t in range(max(out) + 1)]


def _mean(tau):
    return sum((t + 1) * p for t, p in enumerate(tau))


@pytest.mark.parametrize("shape", ["figure1", "batch2x2", "unbalanced"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_averaged_relations(shape, seed):
    tau = {(v, s): _tau(v, shape, s, seed) for v in ("token", "traversal") for s in ("iid", "without_replacement")}
    for s in ("iid", "without_replacement"):
        tra, tok = tau[("traversal", s)], tau[("token", s)]
        assert 1 - tra[0] == pytest.approx(1 - tok[0], abs=1e-12)        # P3: equal P(tau >= 1)
        assert _mean(tra) >= _mean(tok) - 1e-12                          # P4 (conjecture, paper's claim)
        for l in range(1, len(tra)):
            assert sum(tra[l:]) >= sum(tok[l:]) - 1e-12
    for v in ("token", "traversal"):                                      # without >= with replacement
        assert _mean(tau[(v, "without_replacement")]) >= _mean(tau[(v, "iid")]) - 1e-12


# ----- chains: traversal == block, token == Leviathan --------------------------------------------
@pytest.mark.parametrize("vocab, length, seed", [(3, 1, 0), (3, 4, 1), (5, 3, 2), (8, 6, 3), (4, 5, 4)])
def test_traversal_equals_block_on_chains(vocab, length, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(4):
        tree = _random_tree("iid", chain_parents(length), vocab=vocab, seed=int(torch.randint(0, 10**6, (1,), generator=gen)))
        assert torch.allclose(exact_law("traversal", tree), exact_law("block", tree), atol=1e-12, rtol=0)


def test_token_on_a_chain_is_leviathan():
    tree = _random_tree("iid", chain_parents(3), vocab=5, seed=8)
    law = exact_law("token", tree)
    P = tree.target_probs.to(torch.float64)
    Q = tree.draft_probs.to(torch.float64)
    x = tree.tokens.tolist()
    reach = 1.0
    for i in range(3):
        a = min(1.0, float(P[i, x[i + 1]] / Q[i, x[i + 1]]))
        res = (P[i] - Q[i]).clamp_min(0)
        assert torch.allclose(law[i], reach * (1 - a) * res / res.sum(), atol=1e-12)
        reach *= a
    assert torch.allclose(law[3], reach * P[3], atol=1e-12)


# ----- checks, registry, reproducibility -------------------------------------------------------
def test_token_on_topk_trees_is_match():
    for seed in range(3):
        tree = _random_tree("topk", binary(4), vocab=6, seed=seed)
        assert torch.allclose(exact_law("token", tree), exact_law("match", tree), atol=1e-12, rtol=0)


def test_registry_has_the_tree_verifiers():
    for name in ("token", "traversal", "erss", "spectr", "match"):
        assert VERIFIERS[name].name == name and VERIFIERS[name].law is not None


def test_incompatible_trees_raise():
    iid = _random_tree("iid", binary(3))
    race = _random_tree("race", binary(3))
    topk = _random_tree("topk", binary(3))
    wr = _random_tree("without_replacement", binary(3))
    with pytest.raises(ValueError, match="exponential races"):
        verify("erss", iid, torch.Generator())
    with pytest.raises(ValueError, match="top-k children are deterministic"):
        verify("spectr", topk, torch.Generator())
    with pytest.raises(ValueError, match="needs i.i.d. children"):
        verify("spectr", wr, torch.Generator())
    with pytest.raises(ValueError, match="needs i.i.d. children"):
        verify("spectr", race, torch.Generator())
    # children that are not the first arrivals of the stored race
    swapped = race.tokens.clone()
    swapped[[1, 2]] = swapped[[2, 1]]
    bad = DraftTree(swapped, race.parents, race.draft_probs, race.target_probs, "race", race.race)
    with pytest.raises(ValueError, match="race arrival order|first"):
        verify("erss", bad, torch.Generator())
    # a zero-probability child although the draft support was not used up
    q = torch.tensor([[.5, .5, 0.0], [0, 0, 0], [0, 0, 0]], dtype=torch.float64)
    p = torch.full((3, 3), 1 / 3, dtype=torch.float64)
    impossible = DraftTree(torch.tensor([0, 2, 0]), torch.tensor([-1, 0, 0]), q, p, "without_replacement")
    for name in ("token", "traversal"):
        with pytest.raises(ValueError, match="cannot come from sampling without replacement"):
            verify(name, impossible, torch.Generator())
    # ... but fine once the support is used up (the uniform fallback)
    fallback = DraftTree(torch.tensor([0, 0, 1, 2]), torch.tensor([-1, 0, 0, 0]),
                         torch.cat([q, q[1:2]]), torch.cat([p, p[:1]]), "without_replacement")
    for name in ("token", "traversal"):
        assert float(exact_law(name, fallback).sum()) == pytest.approx(1.0, abs=1e-12)
    # token and traversal treat race trees as without-replacement samples
    for name in ("token", "traversal", "match"):
        assert float(exact_law(name, race).sum()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name, sampling", [("token", "without_replacement"), ("traversal", "iid"),
                                            ("erss", "race"), ("spectr", "iid"), ("match", "topk")])
def test_same_seed_same_verdict(name, sampling):
    tree = _random_tree(sampling, binary(4), vocab=6)
    a = [verify(name, tree, torch.Generator().manual_seed(s)) for s in range(10)]
    b = [verify(name, tree, torch.Generator().manual_seed(s)) for s in range(10)]
    assert a == b


@pytest.mark.parametrize("sampling", ["iid", "without_replacement", "topk", "race"])
def test_laws_are_distributions_on_larger_trees(sampling):
    tree = _random_tree(sampling, binary(5), vocab=50, seed=5)
    names = [n for n, kind, s in declared_pairs(VERIFIERS) if (kind, s) == ("tree", sampling)]
    assert names
    for name in names:
        law = exact_law(name, tree)
        assert bool((law >= 0).all())
        assert float(law.sum()) == pytest.approx(1.0, abs=1e-12)
        assert 1.0 <= expected_tokens(name, tree) <= tree.depth


# ----- float32 model rows (verified in their own precision, see token.Row) ------------------------
def _as_float32(tree):
    return DraftTree(tree.tokens, tree.parents, tree.draft_probs.float(), tree.target_probs.float(),
                     tree.sampling, tree.race)


@pytest.mark.parametrize("name, sampling", [("token", "iid"), ("token", "without_replacement"),
                                            ("traversal", "iid"), ("traversal", "without_replacement"),
                                            ("traversal", "topk"), ("spectr", "iid"), ("match", "iid"),
                                            ("erss", "race")])
def test_float32_rows_give_the_float64_law(name, sampling):
    tree = _random_tree(sampling, binary(4), vocab=40, seed=6)
    assert torch.allclose(exact_law(name, _as_float32(tree)), exact_law(name, tree), atol=2e-6, rtol=0)


def test_vanishing_rates_on_float32_rows():
    # rho shrinks like (1e-30 / 0.5)^depth: 1 / (rho * R) overflows float32, the two-pass form is used
    p = torch.tensor([1e-30, 0.3, 0.3, 0.4], dtype=torch.float64)
    q = torch.tensor([0.5, 0.2, 0.2, 0.1], dtype=torch.float64)
    n = 6
    tree = DraftTree(torch.zeros(n, dtype=torch.long), torch.tensor(chain_parents(n - 1)),
                     q.repeat(n, 1), p.repeat(n, 1), "iid")
    for name in ("token", "traversal"):
        law64 = exact_law(name, tree)
        law32 = exact_law(name, _as_float32(tree))
        assert float(law32.sum()) == pytest.approx(1.0, abs=1e-6)
        assert torch.allclose(law32, law64, atol=1e-6, rtol=0)
        verify(name, _as_float32(tree), torch.Generator().manual_seed(0))
