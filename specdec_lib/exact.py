"""Exact output laws on small vocabularies: the losslessness harness.

A verifier is lossless (Block Verification Lemma 2; ASpS Thm 5.7) iff one decode step, whose output
is then continued by the target, produces the target's law. On toy LMs
(`specdec_lib.models.synthetic`) with a tiny vocabulary every drafted tree can be enumerated with
its probability, and every verifier gives its exact law ``[N+1, V]`` on a fixed tree, so the law of
the first ``horizon`` emitted tokens is a finite sum:

* `enumerate_drafts`       every tree a shape (parents list) can be drafted as, with its probability,
                           for sampling ``iid`` / ``without_replacement`` / ``topk``;
* `step_emitted_law`       exact law of the tokens one step emits (path tokens + extra token);
* `step_output_law`        the same, continued by the target up to ``horizon`` tokens;
* `multistep_output_law`   the law of the first ``horizon`` tokens over as many steps as needed,
                           threading ``Outcome.state`` (greedy block verification is lossless only
                           across steps, Block Verification Algorithm 6);
* `target_law`, `max_abs_diff`, `accepted_length_law`, `expected_step_tokens`;
* `sample_output_counts` / `sample_multistep_counts` run the actual samplers (`SamplerSettings`: drafting
  mode, horizon, runs and seed), and `chi_square_pvalue` tests their counts against an exact law.

``race`` trees (ERSS) carry continuous arrival times, so they cannot be enumerated: for them the
tree-law is exact given the races and the races are averaged by Monte Carlo (H2's drafting).

``verifier`` arguments are a registered name (``"block"``) or a `Verifier` object (e.g. a
deliberately broken variant built in a test). Enumeration is refused above `MAX_DRAFTED_TREES` /
`MAX_LAW_CELLS`, bounds computed from V, the shape and the sampling before anything is enumerated.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .arguments import ArgumentTypeError, check_int, check_seed
from .models.synthetic import ToyLM
from .tree import DraftTree, parent_children, validate_parents
from .verifiers import get_verifier
from .verifiers.base import NextStateFn, Outcome, Verifier

Law = dict  # dict[tuple[int, ...], float]
ENUMERABLE_SAMPLING = ("iid", "without_replacement", "topk")
MAX_DRAFTED_TREES = 2 * 10 ** 6
"""The most drafted trees one enumeration may hold (an upper bound, `drafted_tree_bound`, computed
before enumerating: V^N for N iid drafted nodes, falling factorials without replacement, 1 for topk)."""
MAX_LAW_CELLS = 10 ** 8
"""The most law cells one enumeration may visit: drafted trees x nodes x V (each tree's law is [N+1, V])."""

__all__ = [
    "enumerate_drafts", "sample_tree", "step_emitted_law", "step_output_law", "multistep_output_law",
    "target_law", "max_abs_diff", "accepted_length_law", "expected_step_tokens",
    "SamplerSettings", "sample_output_counts", "sample_multistep_counts", "chi_square_pvalue", "drafted_tree_bound",
    "MAX_DRAFTED_TREES", "MAX_LAW_CELLS",
]


# ----- argument checks ---------------------------------------------------------------------------

def _resolve(verifier: str | Verifier) -> Verifier:
    if isinstance(verifier, Verifier):
        return verifier
    if isinstance(verifier, str):
        return get_verifier(verifier)
    raise ArgumentTypeError(f"verifier must be a name or a Verifier, got {verifier!r:.60} ({type(verifier).__name__})")


def _check_lm(name: str, lm) -> int:
    """The vocabulary size of the toy LM ``lm``; `ArgumentTypeError` naming ``name`` unless it has
    ``probs(context)`` and an integer ``vocab_size`` >= 1 (a `models.LanguageModel` has no exact law)."""
    if isinstance(lm, (str, bytes)) or not callable(getattr(lm, "probs", None)) or not hasattr(lm, "vocab_size"):
        raise ArgumentTypeError(f"{name} must be a toy LM with probs(context) and vocab_size "
                                f"(specdec_lib.models.synthetic), got {lm!r:.60} ({type(lm).__name__})")
    return check_int(f"{name}.vocab_size", lm.vocab_size, 1)


def _row(lm, context: tuple[int, ...], name: str = "model") -> torch.Tensor:
    """``lm.probs(context)``, refused unless it is a 1-D row of exactly ``vocab_size`` entries (a short row
    would make every law a law over the wrong vocabulary)."""
    row = lm.probs(context)
    if not isinstance(row, torch.Tensor) or tuple(row.shape) != (lm.vocab_size,):
        shape = tuple(row.shape) if isinstance(row, torch.Tensor) else type(row).__name__
        raise ValueError(f"{name} {type(lm).__name__}: probs({context}) has shape {shape}, expected "
                         f"[vocab_size] = [{lm.vocab_size}]")
    return row


def _check_pair(target: ToyLM, draft: ToyLM) -> None:
    vt, vd = _check_lm("target", target), _check_lm("draft", draft)
    if vt != vd:
        raise ValueError(f"draft vocabulary {vd} differs from target vocabulary {vt}")


def _check_prefix(prefix: Sequence[int], vocab_size: int) -> tuple[int, ...]:
    if isinstance(prefix, (str, bytes)) or not hasattr(prefix, "__iter__"):
        raise ArgumentTypeError(f"prefix must be a sequence of token ids, got {prefix!r:.60}")
    prefix = tuple(t if type(t) is int else check_int(f"prefix[{i}]", t) for i, t in enumerate(prefix))
    if not prefix:
        raise ValueError("prefix must hold at least one token (its last token is the tree's root)")
    for t in prefix:
        if not 0 <= t < vocab_size:
            raise ValueError(f"prefix token {t} out of range [0, {vocab_size})")
    return prefix


def _check_horizon(horizon, vocab_size: int | None = None) -> int:
    """``horizon`` as an int >= 0; with ``vocab_size``, refused when the V^horizon outcomes of a law
    exceed `MAX_LAW_CELLS`."""
    horizon = check_int("horizon", horizon, 0)
    if vocab_size is not None and vocab_size ** horizon > MAX_LAW_CELLS:
        raise ValueError(f"horizon {horizon} over {vocab_size} tokens gives up to {vocab_size ** horizon:.3g} "
                         f"outcomes, more than the limit MAX_LAW_CELLS = {MAX_LAW_CELLS:.0e}")
    return horizon


def drafted_tree_bound(parents: Sequence[int], vocab_size: int, sampling: str) -> int:
    """An upper bound on the trees of shape ``parents`` `enumerate_drafts` can produce over ``vocab_size``
    tokens: V^k iid children per node, V (V-1) ... (V-k+1) without replacement, one for topk."""
    kids = Counter(int(p) for p in list(parents)[1:])
    if sampling == "topk":
        return 1
    if sampling == "iid":
        return vocab_size ** sum(kids.values())
    return math.prod(math.perm(vocab_size, k) if k <= vocab_size else 0 for k in kids.values())


def _check_enumeration(parents: list[int], vocab_size: int, sampling: str) -> None:
    """ValueError, before any enumeration, when the bound on drafted trees or law cells is over the limits."""
    trees = drafted_tree_bound(parents, vocab_size, sampling)
    cells = trees * len(parents) * vocab_size
    if trees > MAX_DRAFTED_TREES or cells > MAX_LAW_CELLS:
        raise ValueError(
            f"a shape of {len(parents)} nodes drafted {sampling!r} over {vocab_size} tokens can give up to "
            f"{trees:.3g} drafted trees ({cells:.3g} law cells), more than the limits MAX_DRAFTED_TREES = "
            f"{MAX_DRAFTED_TREES} / MAX_LAW_CELLS = {MAX_LAW_CELLS:.0e}: use a smaller tree or vocabulary, "
            f"or sample (sample_output_counts)")


def _rooted(draft: ToyLM, prefix: tuple[int, ...]) -> ToyLM:
    """The draft as seen by a tree rooted after ``prefix``: a draft that reads the target's state
    (`models.synthetic.FeatureToyDraft`) has rows that depend on the root; others are unchanged."""
    return draft.rooted(prefix) if hasattr(draft, "rooted") else draft


def _check_sampling(sampling: str) -> None:
    if sampling == "race":
        raise ValueError("race trees carry continuous arrival times and cannot be enumerated; "
                         "average the exact tree-law over races by Monte Carlo")
    if sampling not in ENUMERABLE_SAMPLING:
        raise ValueError(f"unknown sampling mode {sampling!r}; expected one of {ENUMERABLE_SAMPLING}")


# ----- drafting ----------------------------------------------------------------------------------

def _child_sets(q: list[float], k: int, sampling: str):
    """Every ordered tuple of ``k`` children drawn from the draft row ``q``, with its probability."""
    vocab = len(q)
    if sampling == "iid":
        support = [t for t in range(vocab) if q[t] > 0.0]
        for combo in itertools.product(support, repeat=k):
            prob = 1.0
            for t in combo:
                prob *= q[t]
            yield combo, prob
        return
    if k > vocab:
        raise ValueError(f"a node with {k} children cannot be drawn {sampling!r} from {vocab} tokens")
    if sampling == "topk":
        yield tuple(sorted(range(vocab), key=lambda t: (-q[t], t))[:k]), 1.0
        return

    # without replacement (Sequoia): successive draws from q restricted to the unused tokens,
    # uniform over the unused tokens once the draft's support is used up.
    def rec(chosen: tuple[int, ...], prob: float):
        if len(chosen) == k:
            yield chosen, prob
            return
        rest = [t for t in range(vocab) if t not in chosen]
        mass = sum(q[t] for t in rest)
        if mass > 0.0:
            for t in rest:
                if q[t] > 0.0:
                    yield from rec(chosen + (t,), prob * q[t] / mass)
        else:
            for t in rest:
                yield from rec(chosen + (t,), prob / len(rest))

    yield from rec((), 1.0)


def _build_tree(target: ToyLM, draft: ToyLM, prefix: tuple[int, ...], parents: list[int],
                tokens: list[int], sampling: str) -> DraftTree:
    contexts: list[tuple[int, ...]] = [prefix]
    for i in range(1, len(parents)):
        contexts.append(contexts[parents[i]] + (tokens[i],))
    return DraftTree(
        tokens=torch.tensor(tokens, dtype=torch.long),
        parents=torch.tensor(parents, dtype=torch.long),
        draft_probs=torch.stack([_row(draft, c, "draft") for c in contexts]),
        target_probs=torch.stack([_row(target, c, "target") for c in contexts]),
        sampling=sampling,
    )


def enumerate_drafts(target: ToyLM, draft: ToyLM, prefix: Sequence[int], parents: Sequence[int],
                     sampling: str = "iid") -> list[tuple[float, DraftTree]]:
    """Every tree the shape ``parents`` can be drafted as after ``prefix``, with its probability.

    Node i's children are drawn from the draft's distribution after the path to i: ``iid``
    (independent draws), ``without_replacement`` (successive draws among unused tokens, uniform once
    the draft's support is exhausted) or ``topk`` (the k most likely tokens, ties to the lower id;
    probability 1). Trees of probability 0 are left out; the probabilities sum to 1.
    """
    _check_pair(target, draft)
    _check_sampling(sampling)
    prefix = _check_prefix(prefix, target.vocab_size)
    parents = validate_parents(parents)
    _check_enumeration(parents, target.vocab_size, sampling)
    draft = _rooted(draft, prefix)
    kids = parent_children(parents)
    n = len(parents)
    partial: list[tuple[float, list[int], list[tuple[int, ...]]]] = [
        (1.0, [prefix[-1]] + [0] * (n - 1), [prefix] + [()] * (n - 1))]
    for node in range(n):
        if not kids[node]:
            continue
        grown = []
        for prob, tokens, contexts in partial:
            q = _row(draft, contexts[node], "draft").tolist()
            for combo, pc in _child_sets(q, len(kids[node]), sampling):
                if pc <= 0.0:
                    continue
                toks, ctxs = list(tokens), list(contexts)
                for child, t in zip(kids[node], combo):
                    toks[child] = t
                    ctxs[child] = contexts[node] + (t,)
                grown.append((prob * pc, toks, ctxs))
        partial = grown
    return [(prob, _build_tree(target, draft, prefix, parents, tokens, sampling))
            for prob, tokens, _ in partial]


def sample_tree(target: ToyLM, draft: ToyLM, prefix: Sequence[int], parents: Sequence[int],
                sampling: str, generator: torch.Generator,
                cache: dict | None = None) -> DraftTree:
    """Draw one tree of shape ``parents`` from the draft (same modes as `enumerate_drafts`)."""
    _check_pair(target, draft)
    _check_sampling(sampling)
    prefix = _check_prefix(prefix, target.vocab_size)
    draft = _rooted(draft, prefix)
    parents = validate_parents(parents)
    kids = parent_children(parents)
    tokens = [prefix[-1]] + [0] * (len(parents) - 1)
    contexts = [prefix] + [()] * (len(parents) - 1)
    for node in range(len(parents)):
        k = len(kids[node])
        if not k:
            continue
        q = _row(draft, contexts[node], "draft")
        if sampling == "iid":
            combo = [_draw(q, generator) for _ in range(k)]
        elif sampling == "topk":
            combo = next(_child_sets(q.tolist(), k, "topk"))[0]
        else:
            if k > q.shape[0]:
                raise ValueError(f"a node with {k} children cannot be drawn without replacement "
                                 f"from {q.shape[0]} tokens")
            combo, left = [], torch.ones_like(q, dtype=torch.bool)
            for _ in range(k):
                w = q * left
                t = _draw(w if float(w.sum()) > 0.0 else left.to(q.dtype), generator)
                combo.append(t)
                left[t] = False
        for child, t in zip(kids[node], combo):
            tokens[child] = int(t)
            contexts[child] = contexts[node] + (int(t),)
    key = tuple(tokens)
    if cache is not None and key in cache:
        return cache[key]
    tree = _build_tree(target, draft, prefix, parents, tokens, sampling)
    if cache is not None:
        cache[key] = tree
    return tree


# ----- exact laws --------------------------------------------------------------------------------

def target_law(target: ToyLM, prefix: Sequence[int], horizon: int) -> Law:
    """Law of the next ``horizon`` tokens the target samples after ``prefix`` (zeros left out)."""
    prefix = _check_prefix(prefix, _check_lm("target", target))
    horizon = _check_horizon(horizon, target.vocab_size)
    law: Law = {(): 1.0}
    for _ in range(horizon):
        grown: Law = {}
        for seq, prob in law.items():
            row = _row(target, prefix + seq, "target").tolist()
            for t, pt in enumerate(row):
                if pt > 0.0:
                    grown[seq + (t,)] = prob * pt
        law = grown
    return law


def _law_cells(verifier: Verifier, tree: DraftTree, state: Any):
    """(path, token, probability) for every cell of the verifier's exact law with mass > 0."""
    verifier.check(tree)
    if verifier.law is None:
        raise ValueError(f"verifier {verifier.name!r} has no exact law given a tree")
    law = verifier.law(tree, state)
    if tuple(law.shape) != (tree.num_nodes, tree.vocab_size):
        raise ValueError(f"verifier {verifier.name!r} returned a law of shape {tuple(law.shape)}")
    if not bool(torch.isfinite(law).all()):
        raise ValueError(f"verifier {verifier.name!r} returned a law with non-finite entries")
    nodes, toks = torch.nonzero(law > 0, as_tuple=True)
    values = law[nodes, toks].tolist()
    for i, y, p in zip(nodes.tolist(), toks.tolist(), values):
        yield tree.path_to(i), y, p


def step_emitted_law(verifier: str | Verifier, target: ToyLM, draft: ToyLM, prefix: Sequence[int],
                     parents: Sequence[int], sampling: str = "iid", state: Any = None) -> Law:
    """Exact law of the tokens one step emits: accepted path tokens + the extra token."""
    v = _resolve(verifier)
    law: Law = defaultdict(float)
    for pd, tree in enumerate_drafts(target, draft, prefix, parents, sampling):
        toks = tree.tokens.tolist()
        for path, y, p in _law_cells(v, tree, state):
            law[tuple(toks[i] for i in path) + (y,)] += pd * p
    return dict(law)


def _continue(emitted_law: Law, target: ToyLM, prefix: tuple[int, ...], horizon: int) -> Law:
    out: Law = defaultdict(float)
    for seq, p in emitted_law.items():
        if len(seq) >= horizon:
            out[seq[:horizon]] += p
        else:
            for cont, pc in target_law(target, prefix + seq, horizon - len(seq)).items():
                out[seq + cont] += p * pc
    return dict(out)


def step_output_law(verifier: str | Verifier, target: ToyLM, draft: ToyLM, prefix: Sequence[int],
                    parents: Sequence[int], sampling: str = "iid", horizon: int = 3,
                    state: Any = None) -> Law:
    """Exact law of the first ``horizon`` tokens of one step whose output is continued by the
    target (Block Verification Lemma 2): equals `target_law` iff the step is lossless."""
    _check_pair(target, draft)
    prefix = _check_prefix(prefix, target.vocab_size)
    horizon = _check_horizon(horizon, target.vocab_size)
    emitted = step_emitted_law(verifier, target, draft, prefix, parents, sampling, state)
    return _continue(emitted, target, prefix, horizon)


def _default_next_state(v: Verifier) -> NextStateFn | None:
    """The verifier's own ``next_state`` (only verifiers that carry state define one)."""
    return v.next_state


def multistep_output_law(verifier: str | Verifier, target: ToyLM, draft: ToyLM,
                         prefix: Sequence[int], parents: Sequence[int], sampling: str = "iid",
                         horizon: int = 3, next_state: NextStateFn | None = None) -> Law:
    """Exact law of the first ``horizon`` tokens of the decode loop (Block Verification Alg. 3/6).

    Steps follow each other until ``horizon`` tokens are out, each drafting the shape ``parents``
    after everything emitted so far and threading the verifier's state: the state after a step is
    ``next_state(tree, state, path, token)`` (by default the verifier module's own ``next_state``,
    or ``None`` for stateless verifiers). Equals `target_law` iff the loop is lossless.
    """
    v = _resolve(verifier)
    _check_pair(target, draft)
    _check_sampling(sampling)
    prefix = _check_prefix(prefix, target.vocab_size)
    horizon = _check_horizon(horizon, target.vocab_size)
    parents = validate_parents(parents)
    _check_enumeration(parents, target.vocab_size, sampling)
    step_state = next_state if next_state is not None else _default_next_state(v)
    drafts: dict[tuple[int, ...], list] = {}
    memo: dict[tuple, Law] = {}

    def rest(emitted: tuple[int, ...], history: tuple, state: Any) -> Law:
        need = horizon - len(emitted)
        if need <= 0:
            return {(): 1.0}
        key = (emitted, history if step_state is not None else None)
        if key in memo:
            return memo[key]
        context = prefix + emitted
        if context not in drafts:
            drafts[context] = enumerate_drafts(target, draft, context, parents, sampling)
        out: Law = defaultdict(float)
        for pd, tree in drafts[context]:
            toks = tree.tokens.tolist()
            for path, y, p in _law_cells(v, tree, state):
                a = tuple(toks[i] for i in path) + (y,)
                if len(a) >= need:
                    out[a[:need]] += pd * p
                    continue
                sub_key = (emitted + a, history + (a,) if step_state is not None else None)
                if sub_key in memo:  # the state after a step is a function of the history
                    sub = memo[sub_key]
                else:
                    new_state = step_state(tree, state, path, y) if step_state is not None else None
                    sub = rest(emitted + a, history + (a,), new_state)
                for cont, pc in sub.items():
                    out[a + cont] += pd * p * pc
        memo[key] = dict(out)
        return memo[key]

    return rest((), (), None)


def max_abs_diff(law_a: Law, law_b: Law) -> float:
    """max over outcomes of |law_a - law_b| (missing outcomes count as 0)."""
    keys = set(law_a) | set(law_b)
    return max((abs(law_a.get(k, 0.0) - law_b.get(k, 0.0)) for k in keys), default=0.0)


def accepted_length_law(verifier: str | Verifier, target: ToyLM, draft: ToyLM,
                        prefix: Sequence[int], parents: Sequence[int], sampling: str = "iid",
                        state: Any = None) -> list[float]:
    """``P(tau = t)`` for t = 0..depth, averaged over drafts (tau = accepted draft tokens)."""
    v = _resolve(verifier)
    parents = validate_parents(parents)
    depth = max((len(_path(parents, i)) for i in range(len(parents))), default=0)
    out = [0.0] * (depth + 1)
    for pd, tree in enumerate_drafts(target, draft, prefix, parents, sampling):
        for path, _, p in _law_cells(v, tree, state):
            out[len(path)] += pd * p
    return out


def expected_step_tokens(verifier: str | Verifier, target: ToyLM, draft: ToyLM,
                         prefix: Sequence[int], parents: Sequence[int], sampling: str = "iid",
                         state: Any = None) -> float:
    """E[emitted tokens of one step] = E[tau] + 1, averaged over drafts."""
    law = accepted_length_law(verifier, target, draft, prefix, parents, sampling, state)
    return sum((t + 1) * p for t, p in enumerate(law))


def _path(parents: Sequence[int], node: int) -> list[int]:
    path = []
    while node > 0:
        path.append(node)
        node = int(parents[node])
    return path


# ----- sampling and the chi-square test ----------------------------------------------------------

def _draw(row: torch.Tensor, generator: torch.Generator) -> int:
    """One draw from a small probability row by inversion (cheaper than torch.multinomial)."""
    u = float(torch.rand((), generator=generator, dtype=torch.float64)) * float(row.sum())
    acc, last = 0.0, 0
    for t, p in enumerate(row.tolist()):
        if p > 0.0:
            acc += p
            last = t
            if u < acc:
                return t
    return last


def _continue_sample(target: ToyLM, context: tuple[int, ...], tokens: list[int], horizon: int,
                     generator: torch.Generator) -> tuple[int, ...]:
    while len(tokens) < horizon:
        tokens.append(_draw(_row(target, context + tuple(tokens), "target"), generator))
    return tuple(tokens[:horizon])


@dataclass(frozen=True)
class SamplerSettings:
    """How `sample_output_counts` and `sample_multistep_counts` sample: the drafting mode of the trees (one of
    `ENUMERABLE_SAMPLING`), the tokens counted per run (``horizon``), the runs (``n``) and the seed of the one
    generator they use."""

    sampling: str = "iid"
    horizon: int = 3
    n: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        _check_sampling(self.sampling)
        object.__setattr__(self, "horizon", _check_horizon(self.horizon))
        object.__setattr__(self, "n", check_int("n", self.n, 1))
        object.__setattr__(self, "seed", check_seed("seed", self.seed))


def sample_output_counts(verifier: str | Verifier, target: ToyLM, draft: ToyLM, prefix: Sequence[int],
                         parents: Sequence[int], settings: SamplerSettings = SamplerSettings()) -> Counter:
    """Counts of the first ``settings.horizon`` tokens over ``settings.n`` sampled steps (draft, verify with
    the verifier's sampler, continue with the target), one seeded generator for everything."""
    v = _resolve(verifier)
    _check_pair(target, draft)
    prefix = _check_prefix(prefix, target.vocab_size)
    parents = validate_parents(parents)
    gen = torch.Generator().manual_seed(settings.seed)
    trees: dict = {}
    checked: set = set()
    counts: Counter = Counter()
    for _ in range(settings.n):
        tree = sample_tree(target, draft, prefix, parents, settings.sampling, gen, cache=trees)
        if id(tree) not in checked:
            v.check(tree)
            checked.add(id(tree))
        verdict: Outcome = v.sample(tree, gen, None)
        counts[_continue_sample(target, prefix, verdict.emitted(tree), settings.horizon, gen)] += 1
    return counts


def sample_multistep_counts(verifier: str | Verifier, target: ToyLM, draft: ToyLM, prefix: Sequence[int],
                            parents: Sequence[int], settings: SamplerSettings = SamplerSettings()) -> Counter:
    """Counts of the first ``settings.horizon`` tokens of ``settings.n`` runs of the decode loop, threading
    ``verdict.state`` from step to step (the sampling counterpart of `multistep_output_law`)."""
    v = _resolve(verifier)
    _check_pair(target, draft)
    prefix = _check_prefix(prefix, target.vocab_size)
    parents = validate_parents(parents)
    horizon = settings.horizon
    gen = torch.Generator().manual_seed(settings.seed)
    trees: dict = {}
    counts: Counter = Counter()
    for _ in range(settings.n):
        emitted: list[int] = []
        state = None
        while len(emitted) < horizon:
            context = prefix + tuple(emitted)
            tree = sample_tree(target, draft, context, parents, settings.sampling, gen, cache=trees)
            v.check(tree)
            verdict = v.sample(tree, gen, state)
            emitted.extend(verdict.emitted(tree))
            state = verdict.state
        counts[tuple(emitted[:horizon])] += 1
    return counts


def chi_square_pvalue(counts: Counter, law: Law, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness-of-fit p-value of ``counts`` against the exact ``law``.

    Cells with expected count below ``min_expected`` are pooled (the pool is merged into the
    smallest remaining cell if it is still too small). An observed outcome the law gives
    probability 0 returns 0.0 at once.
    """
    # lazy: scipy.stats takes ~0.5 s to import; only this function needs it
    from scipy.stats import chi2

    total_p = sum(law.values())
    if abs(total_p - 1.0) > 1e-6:
        raise ValueError(f"law sums to {total_p}, not 1")
    n = sum(counts.values())
    if n <= 0:
        raise ValueError("no samples")
    for outcome, c in counts.items():
        if c > 0 and law.get(outcome, 0.0) <= 0.0:
            return 0.0
    cells = sorted(((n * p, counts.get(k, 0)) for k, p in law.items() if p > 0.0), key=lambda e: e[0])
    big = [c for c in cells if c[0] >= min_expected]
    small = [c for c in cells if c[0] < min_expected]
    if small:
        pool = (sum(e for e, _ in small), sum(o for _, o in small))
        if pool[0] < min_expected and big:
            e0, o0 = big.pop(0)
            pool = (pool[0] + e0, pool[1] + o0)
        big.append(pool)
    if len(big) < 2:
        return 1.0
    stat = sum((o - e) ** 2 / e for e, o in big)
    return float(chi2.sf(stat, len(big) - 1))
