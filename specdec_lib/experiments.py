"""Experiment helpers the notebooks call: profiles, the model pair, prompts, drafted trees, paired
exact comparisons of verifiers, and summaries with bootstrap confidence intervals.

The expensive part of every acceptance experiment is drafting trees from the real pair and scoring them
with the target; the exact expected number of emitted tokens of a verifier on a given tree is cheap
(`specdec_lib.verifiers.expected_tokens`). So the notebooks

1. collect drafted trees once per (prompt, shape, sampling, temperature) along target-distributed
   contexts (`collect_trees`: the text is advanced by one lossless verifier, so every step starts from a
   context with the target's law),
2. evaluate every verifier exactly on the same trees (`paired_expected_tokens`): a paired comparison with
   no verification noise, which resolves differences of a few percent with few prompts,
3. summarise per group with the pooled mean over steps (tokens per step = tokens per target call) and a
   bootstrap confidence interval over prompts (`summarize`, `paired_gain`).

Nested shapes are evaluated on one drafted tree: a chain of n drafted tokens is the first n nodes of a
longer chain, and a tree restricted to its first d levels is a tree of depth d drawn the same way
(`restrict_depth`), since every level is drawn given the levels above only.

With ``profile="smoke"`` the pair is a random bigram toy pair (`specdec_lib.models.synthetic`) over a tiny
vocabulary and the prompts are short random token tuples, so every notebook runs in seconds.
"""

from __future__ import annotations

import ast
import math
import os
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from .traversal_identity import rao_blackwell_ccdf
from .tree import DraftTree

PROFILES = ("smoke", "default", "full")
RAO_BLACKWELLISED = {"traversal_rb": "traversal"}
"""Estimator name -> the verifier it estimates (`paired_expected_tokens`)."""
TARGET_MODEL = "smollm2-135m-instruct"
DRAFT_MODEL = "smollm2-135m-draft"


# ----------------------------------------------------------------------------------------- settings

def parse_param(value: Any) -> Any:
    """A parameter given on the command line as text (``"[4, 8]"``, ``"0.6,1.0"``, ``"3"``) -> Python value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("none", "null", ""):
        return None
    try:
        value = ast.literal_eval(text)
        return list(value) if isinstance(value, tuple) else value
    except (ValueError, SyntaxError):
        pass
    if "," in text:
        return [parse_param(part) for part in text.split(",") if part.strip()]
    return text


def settings(profile: str, defaults: Mapping[str, Mapping[str, Any]], **given: Any) -> dict[str, Any]:
    """Resolve a notebook's parameters: the profile's defaults, overridden by every non-None given value.

    ``defaults`` maps a profile name to its default values (the notebook's own table); the given values
    are the notebook's parameters (None = "the profile's choice"). Text values are parsed with
    `parse_param`. Unknown profiles and unknown parameter names raise ValueError.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    if profile not in defaults:
        raise ValueError(f"this notebook has no defaults for profile {profile!r}")
    out = dict(defaults[profile])
    for name, value in given.items():
        value = parse_param(value)
        if value is not None:
            out[name] = value
    out["profile"] = profile
    os.environ.setdefault("SPECDEC_PROFILE", profile)  # results.py: smoke output stays apart
    return out


def settings_table(cfg: Mapping[str, Any]):
    """The resolved settings as a two-column DataFrame (for display)."""
    import pandas as pd

    return pd.DataFrame({"parameter": list(cfg), "value": [str(v) for v in cfg.values()]})


# ----------------------------------------------------------------------------------------- model pair

@dataclass
class Pair:
    """The (target, draft) pair of an experiment: ``kind`` is "toy" (ToyLM) or "hf" (LanguageModel)."""

    target: Any
    draft: Any
    kind: str
    name: str
    load_s: float = 0.0
    context_free: bool = False  # toy models whose rows do not depend on the context (trees can be cached)

    @property
    def vocab_size(self) -> int:
        return int(self.target.vocab_size)

    @property
    def eos_token_id(self) -> int | None:
        return self.target.eos_token_id


def toy_pair(vocab_size: int = 8, mismatch: float = 0.5, seed: int = 0, concentration: float = 0.5) -> Pair:
    """A random bigram (target, draft) toy pair without EOS (`synthetic.random_markov_pair`)."""
    from .models.synthetic import random_markov_pair

    target, draft = random_markov_pair(vocab_size, mismatch, seed, eos=False, concentration=concentration)
    return Pair(target, draft, "toy", f"toy bigram V={vocab_size} mismatch={mismatch} seed={seed}")


def load_pair(profile: str, target_model: str | None = None, draft_model: str | None = None,
              device: str | None = None, dtype: str | None = None, toy_vocab: int = 8,
              toy_mismatch: float = 0.5, seed: int = 0) -> Pair:
    """The pair of a profile: smoke -> `toy_pair`; default/full -> `load_model` of both names
    (default: the offline target and the project's distilled draft ``smollm2-135m-draft``)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    if profile == "smoke":
        return toy_pair(toy_vocab, toy_mismatch, seed)
    from .models import load_model

    t0 = time.perf_counter()
    target = load_model(target_model or TARGET_MODEL, device=device, dtype=dtype)
    draft = load_model(draft_model or DRAFT_MODEL, device=device, dtype=dtype, target=target)
    if int(target.vocab_size) != int(draft.vocab_size):
        raise ValueError(f"target {target.name} and draft {draft.name} have different vocabularies "
                         f"({target.vocab_size} vs {draft.vocab_size})")
    return Pair(target, draft, "hf", f"{target.name} / {draft.name}", time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------- prompts

@dataclass(frozen=True)
class PromptIds:
    """An encoded prompt: id, category, token ids (LongTensor [n]) and the source text ('' for toys)."""

    id: str
    category: str
    ids: torch.Tensor
    text: str = ""


def prompts_for(pair: Pair, num_prompts: int, categories: Sequence[str] | None = None, split: str = "heldout",
                seed: int = 0, toy_length: int = 3) -> list[PromptIds]:
    """``num_prompts`` prompts per category.

    toy pair: random token tuples of length ``toy_length``, categories named as given (default one
    category "toy"); hf pair: `specdec_lib.data.load_prompts(split, category)` encoded with the target's
    chat template, the first ``num_prompts`` of each category (all categories when None).
    """
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    if pair.kind == "toy":
        rng = np.random.default_rng(seed)
        cats = list(categories) if categories else ["toy"]
        return [PromptIds(f"{c}-{i}", c, torch.as_tensor(rng.integers(0, pair.vocab_size, toy_length),
                                                          dtype=torch.long))
                for c in cats for i in range(num_prompts)]
    from .data import load_prompts

    if categories is None:
        cats = sorted({p.category for p in load_prompts(split)})
    else:
        cats = list(categories)
    out = []
    for c in cats:
        chosen = load_prompts(split, category=c)[:num_prompts]
        if not chosen:
            raise ValueError(f"no prompts of category {c!r} in split {split!r}")
        out.extend(PromptIds(p.id, p.category, pair.target.encode(p.text), p.text) for p in chosen)
    return out


def prompt_categories(split: str = "heldout") -> list[str]:
    """The categories of the project's prompt set."""
    from .data import load_prompts

    return sorted({p.category for p in load_prompts(split)})


# ----------------------------------------------------------------------------------------- trees

@dataclass
class TreeRecord:
    """One drafted tree with where it came from."""

    prompt_id: str
    category: str
    step: int
    tree: DraftTree
    emitted: int  # tokens the advancing verifier emitted at this step
    advance: str = ""  # the verifier that advanced the text
    state: Any = None  # its state at this step (greedy_block's target modification), else None
    draw: int = 0  # which of the independent copies drafted at this step (`collect_trees`'s ``copies``)


def replicate_shape(parents: Sequence[int], copies: int) -> list[int]:
    """``copies`` copies of a tree shape joined at one root (root included, level order).

    With iid drafting every node's children are drawn independently given its path, so the copies of
    such a tree are independent draws of the shape at the same context (`split_copies` takes them apart).
    """
    from .tree import level_order, validate_parents

    parents = [int(p) for p in validate_parents(parents)]
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    n = len(parents) - 1
    big = [-1]
    for k in range(copies):
        big += [0 if p == 0 else p + k * n for p in parents[1:]]
    return level_order(big)


def split_copies(tree: DraftTree, copies: int) -> list[DraftTree]:
    """The ``copies`` trees of a tree drafted with the shape `replicate_shape(shape, copies)`.

    The root's children are split into ``copies`` equal consecutive groups (children keep their drafting
    order); copy k is the root plus the subtrees under the k-th group."""
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    if copies == 1:
        return [tree]
    have = index_tuples(tree.parent_list)
    width = sum(1 for t in have if len(t) == 1)
    if width % copies:
        raise ValueError(f"the root has {width} children, not a multiple of {copies} copies")
    per = width // copies
    groups: list[list[int]] = [[0] for _ in range(copies)]
    for i, t in enumerate(have[1:], 1):
        groups[(t[0] - 1) // per].append(i)
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"the copies have different sizes {sorted(sizes)}: not a replicated shape")
    return [_subtree(tree, g) for g in groups]


class _TopP:
    """A toy LM with nucleus filtering applied to its rows (`sampling.process_logits` on log-probs)."""

    def __init__(self, lm, top_p: float):
        self.lm, self.top_p = lm, float(top_p)
        self.vocab_size, self.eos_token_id = lm.vocab_size, lm.eos_token_id

    def probs(self, context):
        from .sampling import process_logits

        p = self.lm.probs(context).to(torch.float64)
        return process_logits(torch.log(p), 1.0, self.top_p).to(torch.float64)


def _toy_models(pair: Pair, temperature: float, top_p: float):
    """The toy (target, draft) rows actually sampled from: tempered, top-p on the target only
    (`specdec_lib.sampling` convention)."""
    from .models.synthetic import tempered

    target, draft = tempered(pair.target, temperature), tempered(pair.draft, temperature)
    if top_p < 1.0:
        target = _TopP(target, top_p)
    return target, draft


def _toy_race_tree(target, draft, context: list[int], parents: list[int], generator: torch.Generator
                   ) -> DraftTree:
    from .drafting import draw_tree

    def rows(lm, tokens, parents_so_far, nodes):
        toks = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        out = []
        for i in nodes:
            path = []
            while i > 0:
                path.append(toks[i])
                i = parents_so_far[i]
            out.append(lm.probs(tuple(context) + tuple(path[::-1])))
        return torch.stack(out).to(torch.float64)

    return draw_tree(parents, context[-1], lambda t, p, n: rows(draft, t, p, n), "race", generator,
                     target_fn=lambda t, p: rows(target, t, list(p), range(len(p))))


def _collect_toy(pair: Pair, prompt: PromptIds, parents: list[int], sampling: str, temperature: float,
                 top_p: float, max_new_tokens: int, generator: torch.Generator, advance: str
                 ) -> list[TreeRecord]:
    from .exact import sample_tree
    from .verifiers import verify

    target, draft = _toy_models(pair, temperature, top_p)
    context = prompt.ids.tolist()
    records: list[TreeRecord] = []
    step, state = 0, None
    cache: dict = {}
    while len(context) - len(prompt.ids) < max_new_tokens:
        if sampling == "race":
            tree = _toy_race_tree(target, draft, context, parents, generator)
        else:
            tree = sample_tree(target, draft, context, parents, sampling, generator,
                               cache=cache if pair.context_free else None)
        verdict = verify(advance, tree, generator, state)
        emitted = [int(tree.tokens[i]) for i in verdict.path] + [int(verdict.token)]
        records.append(TreeRecord(prompt.id, prompt.category, step, tree, len(emitted), advance, state))
        state = verdict.state
        context.extend(emitted)
        step += 1
    return records


def collect_trees(pair: Pair, prompts: Sequence[PromptIds], shape: str | Sequence[int], sampling: str = "iid",
                  temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 32, seed: int = 0,
                  advance: str | None = None, progress: bool = True, copies: int = 1) -> list[TreeRecord]:
    """Draft trees of ``shape`` along target-distributed contexts, one per decoding step.

    ``shape``: a spec of `decoding.resolve_shape` ("chain:8", "binary:4", "sequoia:32x8", ...) or a parents
    list (relabelled to level order, as drafting grows one level at a time).

    The text is advanced by ``advance`` (a lossless verifier; default "traversal" for iid/without-
    replacement trees, "erss" for race trees, "match" for top-k trees), so every step's context has the
    target's law whichever verifiers are compared on the trees afterwards. Returns one `TreeRecord` per
    step, over all prompts. hf pairs use `specdec_lib.decoding.speculative_generate(..., keep_trees=True)`;
    toy pairs draw with `specdec_lib.exact.sample_tree` (race trees: `specdec_lib.drafting.draw_tree`) on
    the tempered toy models.

    ``copies`` > 1 (iid drafting only): each step drafts ``copies`` independent trees of ``shape`` at the
    same context, in one drafted tree (`replicate_shape`) and one target pass, and returns one record per
    copy (``draw`` = 0..copies-1; ``emitted`` is the step's, from the joint tree). The joint tree branches,
    so ``advance`` must be a tree verifier (default traversal), not a chain-only one (asps, block).
    Averaging a verifier's exact expected tokens over the copies removes most of the drafting noise from
    paired comparisons.
    """
    from .decoding import resolve_shape

    parents = resolve_shape(shape if isinstance(shape, str) else [int(p) for p in shape], temperature=temperature)
    if advance is None:
        advance = {"race": "erss", "topk": "match"}.get(sampling, "traversal")
    if copies != 1:
        if sampling != "iid":
            raise ValueError(f"copies > 1 needs iid drafting (independent siblings), got sampling={sampling!r}")
        if _next_state_fn(advance) is not None:
            raise ValueError(f"copies > 1 cannot carry the state of {advance!r} (one state per drafted tree)")
        records = collect_trees(pair, prompts, replicate_shape(parents, copies), sampling, temperature, top_p,
                                max_new_tokens, seed, advance, progress)
        return [TreeRecord(r.prompt_id, r.category, r.step, t, r.emitted, r.advance, r.state, draw=k)
                for r in records for k, t in enumerate(split_copies(r.tree, copies))]
    records: list[TreeRecord] = []
    iterator: Iterable[PromptIds] = prompts
    if progress:
        from .progress import tqdm

        iterator = tqdm(list(prompts), desc=f"drafting {shape if isinstance(shape, str) else 'tree'} "
                                             f"{sampling} T={temperature}", leave=False)
    for prompt in iterator:
        prompt_seed = seed * 100_003 + zlib.crc32(prompt.id.encode()) % 100_003  # independent of list order
        generator = torch.Generator().manual_seed(prompt_seed)
        if pair.kind == "toy":
            records.extend(_collect_toy(pair, prompt, parents, sampling, temperature, top_p, max_new_tokens,
                                        generator, advance))
            continue
        from .decoding import speculative_generate

        out = speculative_generate(pair.target, pair.draft, prompt.ids, verifier=advance, shape=parents,
                                   sampling=sampling, temperature=temperature, top_p=top_p,
                                   max_new_tokens=max_new_tokens, eos_token_id=pair.eos_token_id,
                                   seed=prompt_seed, keep_trees=True)
        next_state = _next_state_fn(advance)
        state, offset = None, 0
        for s, st in enumerate(out.steps):
            tree = st.tree
            records.append(TreeRecord(prompt.id, prompt.category, s, tree, int(st.emitted), advance, state))
            if next_state is not None and int(st.emitted) > int(st.accepted):
                path = _replay_path(tree, out.tokens[offset: offset + int(st.accepted)])
                state = next_state(tree, state, path, int(out.tokens[offset + int(st.accepted)]))
            offset += int(st.emitted)
    return records


def _next_state_fn(verifier: str):
    """The ``next_state(tree, state, path, token)`` of a verifier that carries state (greedy_block)."""
    from .verifiers import get_verifier

    return get_verifier(verifier).next_state


def _replay_path(tree: DraftTree, tokens: Sequence[int]) -> tuple[int, ...]:
    """The accepted path of a step from its emitted tokens (children are matched by token)."""
    kids = tree.children
    node, path = 0, []
    for tok in tokens:
        match = [c for c in kids[node] if int(tree.tokens[c]) == int(tok)]
        if not match:
            raise ValueError("emitted tokens do not follow a path of the drafted tree")
        node = match[0]
        path.append(node)
    return tuple(path)


def matched_rows(pair: Pair, prompts: Sequence[PromptIds], temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 32, seed: int = 0, progress: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Matched (target, draft) next-token distributions at target-sampled contexts: ``(P [M, V], Q [M, V])``
    float64, one row per generated position (the context = prompt + the target's own sample so far).

    This is what acceptance statistics are measured on (Sequoia's positional acceptance, ERSS's index
    distribution r): the text comes from `autoregressive_generate` (toy pairs: sampled from the toy
    target), then one teacher-forced forward of each model scores every position. Rows follow
    `sampling.process_logits` (top-p on the target only).
    """
    from .sampling import process_logits

    P, Q = [], []
    iterator: Iterable[tuple[int, PromptIds]] = enumerate(prompts)
    if progress:
        from .progress import tqdm

        iterator = tqdm(list(iterator), desc=f"matched rows T={temperature}", leave=False)
    for k, prompt in iterator:
        generator = torch.Generator().manual_seed(seed * 100_003 + k)
        if pair.kind == "toy":
            target, draft = _toy_models(pair, temperature, top_p)
            context = prompt.ids.tolist()
            for _ in range(max_new_tokens):
                p = target.probs(tuple(context)).to(torch.float64)
                P.append(p)
                Q.append(draft.probs(tuple(context)).to(torch.float64))
                context.append(int(torch.multinomial(p, 1, generator=generator)))
            continue
        from .decoding import autoregressive_generate

        out = autoregressive_generate(pair.target, prompt.ids, temperature=temperature, top_p=top_p,
                                      max_new_tokens=max_new_tokens, eos_token_id=pair.eos_token_id,
                                      seed=seed * 100_003 + k)
        ids = prompt.ids.tolist() + list(out.tokens)
        n = len(out.tokens)
        if n == 0:
            continue
        start = len(prompt.ids) - 1
        with torch.no_grad():
            pl = pair.target.logits(ids[:-1])[start:start + n]
            ql = pair.draft.logits(ids[:-1])[start:start + n]
        P.append(process_logits(pl.double(), temperature, top_p, apply_top_p=True))
        Q.append(process_logits(ql.double(), temperature, top_p, apply_top_p=False))
    if not P:
        raise ValueError("no rows collected (every generation was empty)")
    if pair.kind == "toy":
        return torch.stack(P), torch.stack(Q)
    return torch.cat(P), torch.cat(Q)


def restrict_depth(tree: DraftTree, depth: int) -> DraftTree:
    """The subtree of the nodes at most ``depth - 1`` edges below the root (``depth`` counts the root,
    Sequoia's convention): a tree of that depth drawn exactly as the original's first levels were."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1 (it counts the root), got {depth}")
    keep = [i for i, d in enumerate(tree.depths) if d < depth]
    return _subtree(tree, keep)


def truncate_chain(tree: DraftTree, n: int) -> DraftTree:
    """The first ``n`` drafted tokens of a chain (a chain of ``n`` drafted tokens)."""
    if not tree.is_chain:
        raise ValueError("truncate_chain needs a chain")
    if not 0 <= n <= tree.num_nodes - 1:
        raise ValueError(f"cannot truncate a chain of {tree.num_nodes - 1} drafted tokens to {n}")
    return restrict_depth(tree, n + 1)


def index_tuples(parents: Sequence[int]) -> list[tuple[int, ...]]:
    """Each node's index path: the 1-based ranks among its siblings from the root down (root: ``()``)."""
    parents = [int(p) for p in parents]
    seen: dict[int, int] = {}
    out: list[tuple[int, ...]] = [()]
    for i in range(1, len(parents)):
        seen[parents[i]] = seen.get(parents[i], 0) + 1
        out.append(out[parents[i]] + (seen[parents[i]],))
    return out


def restrict_to_shape(tree: DraftTree, shape: str | Sequence[int]) -> DraftTree:
    """The nodes of ``tree`` whose index paths (`index_tuples`) form the smaller ``shape``.

    Children are drawn one after another (iid, without replacement, races: the first c of C children are
    drawn exactly as c children), so when the shape's index paths are a subset of the tree's, the restricted
    tree is distributed as a tree of that shape drawn at the same context. Examples: a chain inside a longer
    chain, batch(k) inside batch(K), tau*_k inside tau*_K, a SpecInfer tree inside a longer one.
    """
    from .tree import parse_shape

    small = parse_shape(shape) if isinstance(shape, str) else list(shape)
    want = set(index_tuples(small))
    have = index_tuples(tree.parent_list)
    keep = [i for i, t in enumerate(have) if t in want]
    if len(keep) != len(want):
        raise ValueError(f"shape with {len(want)} nodes is not contained in the drafted tree "
                         f"({len(keep)} matching nodes)")
    return _subtree(tree, keep)


def _subtree(tree: DraftTree, keep: Sequence[int]) -> DraftTree:
    index = {old: new for new, old in enumerate(keep)}
    parents = [-1 if old == 0 else index[int(tree.parents[old])] for old in keep]
    idx = torch.as_tensor(list(keep), dtype=torch.long)
    race = tree.race.index_select(0, idx) if tree.race is not None else None
    return DraftTree(tree.tokens.index_select(0, idx), torch.as_tensor(parents, dtype=torch.long),
                     tree.draft_probs.index_select(0, idx), tree.target_probs.index_select(0, idx),
                     sampling=tree.sampling, race=race)


# ----------------------------------------------------------------------------------------- evaluation

def applicable(verifier: str, tree: DraftTree) -> bool:
    """Whether ``verifier`` accepts ``tree`` (its ``check`` raises no ValueError)."""
    from .verifiers import get_verifier

    try:
        get_verifier(verifier).check(tree)
    except ValueError:
        return False
    return True


def paired_expected_tokens(records: Sequence[TreeRecord], verifiers: Sequence[str],
                           views: Mapping[str, Callable[[DraftTree], DraftTree]] | None = None,
                           labels: Mapping[str, Any] | None = None, progress: bool = False):
    """Exact expected emitted tokens (accepted drafts + 1) of every verifier on every tree.

    ``views`` maps a label to a function giving the tree to evaluate (e.g. ``{"chain:4": lambda t:
    truncate_chain(t, 4)}``; default: the tree itself under the label "tree"). Verifiers that do not
    accept a tree are skipped (``nodes`` = drafted nodes, root excluded; ``draw`` = the record's copy, so
    `paired_gain` averages the copies drafted at one step before pairing). The verifier that advanced the
    text gets its recorded state (greedy_block's target modification); the others are evaluated as a fresh
    step. Returns a long DataFrame with columns
    prompt_id, category, step, view, nodes, verifier, expected_tokens, p_accept_first (P(at least one
    drafted token accepted)) and the constant ``labels`` columns.

    A name in `RAO_BLACKWELLISED` (``"traversal_rb"``) is an estimator, not a verifier: the verifier's
    expected tokens with the drafting of the levels below each level integrated out
    (`traversal_identity.rao_blackwell_ccdf`). It has the same mean as the verifier's exact value and
    less drafting noise; its ``p_accept_first`` is token-level's P(tau >= 1) of the same tree, exactly.
    """
    import pandas as pd

    from .verifiers import exact_law
    from .verifiers.base import expected_tokens_from_law

    views = dict(views or {"tree": lambda t: t})
    rows = []
    iterator: Iterable[TreeRecord] = records
    if progress:
        from .progress import tqdm

        iterator = tqdm(records, desc="exact expected tokens", leave=False)
    for rec in iterator:
        for view, fn in views.items():
            tree = fn(rec.tree)
            for name in verifiers:
                base = RAO_BLACKWELLISED.get(name, name)
                if not applicable(base, tree):
                    continue
                if name in RAO_BLACKWELLISED:
                    ccdf = rao_blackwell_ccdf(tree, base)
                    expected, first = float(ccdf.sum()), float(ccdf[1]) if len(ccdf) > 1 else 0.0
                else:
                    law = exact_law(name, tree, rec.state if name == rec.advance else None)
                    expected, first = float(expected_tokens_from_law(tree, law)), float(1.0 - law[0].sum())
                rows.append({"prompt_id": rec.prompt_id, "category": rec.category, "step": rec.step,
                             "draw": rec.draw, "view": view, "nodes": tree.num_nodes - 1, "verifier": name,
                             "expected_tokens": expected, "p_accept_first": first})
    frame = pd.DataFrame(rows, columns=["prompt_id", "category", "step", "draw", "view", "nodes", "verifier",
                                        "expected_tokens", "p_accept_first"])
    for key, value in (labels or {}).items():
        frame[key] = value
    return frame


def paired_tokens_by_prompt(pair: Pair, prompts: Sequence[PromptIds], shape: str | Sequence[int], sampling: str,
                            temperature: float, verifiers: Sequence[str],
                            views: Mapping[str, Callable[[DraftTree], DraftTree]] | None = None,
                            labels: Mapping[str, Any] | None = None, progress: bool = True, **collect: Any):
    """`collect_trees` then `paired_expected_tokens`, one prompt at a time, so only one prompt's drafted
    trees are held (each keeps two ``[nodes, V]`` float64 tables: 28 MB for 36 nodes at V = 49152).
    ``collect``: further `collect_trees` arguments (``max_new_tokens``, ``seed``, ``copies``, ``top_p``, ...).
    Same rows as the two calls on all prompts (the drafting seed depends on the prompt, not its position)."""
    import pandas as pd

    iterator: Iterable[PromptIds] = prompts
    if progress:
        from .progress import tqdm

        name = shape if isinstance(shape, str) else f"tree of {len(shape)}"
        iterator = tqdm(list(prompts), desc=f"{name} {sampling} T={temperature}", leave=False)
    frames = [paired_expected_tokens(collect_trees(pair, [prompt], shape, sampling, temperature, progress=False,
                                                   **collect), verifiers, views, labels)
              for prompt in iterator]
    return pd.concat(frames, ignore_index=True)


def _pooled_by_prompt(frame, by: Sequence[str], value: str):
    """Per (group, prompt): sum and count of ``value`` (pooled means are ratios of these sums)."""
    return frame.groupby(list(by) + ["prompt_id"], dropna=False)[value].agg(["sum", "count"]).reset_index()


def bootstrap_ratio(sums: np.ndarray, counts: np.ndarray, n_boot: int = 1000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float, float]:
    """Pooled mean sum(sums)/sum(counts) over units (prompts) and its percentile bootstrap CI over units."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    point = float(sums.sum() / counts.sum())
    if len(sums) < 2:
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(sums), size=(n_boot, len(sums)))
    boots = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    alpha = (1 - level) / 2
    return point, float(np.quantile(boots, alpha)), float(np.quantile(boots, 1 - alpha))


def summarize(frame, by: Sequence[str], value: str = "expected_tokens", n_boot: int = 1000, seed: int = 0):
    """Pooled mean of ``value`` per group (over all steps of all prompts: tokens per target call), its
    bootstrap 95% CI over prompts, the median per-prompt mean, and the number of prompts and steps."""
    import pandas as pd

    per = _pooled_by_prompt(frame, by, value)
    rows = []
    for key, g in per.groupby(list(by), dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        point, lo, hi = bootstrap_ratio(g["sum"].to_numpy(), g["count"].to_numpy(), n_boot, seed)
        rows.append({**dict(zip(by, key)), "mean": point, "ci_low": lo, "ci_high": hi,
                     "median_prompt": float(np.median(g["sum"] / g["count"])), "prompts": len(g),
                     "steps": int(g["count"].sum())})
    return pd.DataFrame(rows)


def paired_gain(frame, method: str, baseline: str, by: Sequence[str] = (), value: str = "expected_tokens",
                column: str = "verifier", n_boot: int = 1000, seed: int = 0, pair_on: str = "tree"):
    """Relative gain ``mean(method) / mean(baseline) - 1`` per group, with a paired bootstrap 95% CI over
    prompts (the same resampled prompts for both), the median per-prompt gain and the fraction of prompts
    with a positive gain.

    ``pair_on="tree"``: both were evaluated on the same drafted trees (rows matched on prompt, step and
    view; only trees evaluated by both are used). ``pair_on="prompt"``: the two come from different
    drafted trees (e.g. two sampling schemes), so each prompt's mean is used (the pairing is by prompt).
    """
    import pandas as pd

    by = list(by)
    if pair_on not in ("tree", "prompt"):
        raise ValueError("pair_on must be 'tree' or 'prompt'")
    keys = by + ["prompt_id"] + (["step", "view"] if pair_on == "tree" else [])
    keys = [k for k in dict.fromkeys(keys) if k in frame.columns]
    a = frame[frame[column] == method].groupby(keys)[value].mean()
    b = frame[frame[column] == baseline].groupby(keys)[value].mean()
    both = pd.concat({"a": a, "b": b}, axis=1, join="inner").reset_index()
    if both.empty:
        raise ValueError(f"no trees evaluated by both {method!r} and {baseline!r}")
    rows = []
    groups = both.groupby(by, dropna=False, sort=True) if by else [((), both)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        per = g.groupby("prompt_id")[["a", "b"]].sum()
        sa, sb = per["a"].to_numpy(), per["b"].to_numpy()
        point = float(sa.sum() / sb.sum() - 1)
        if len(per) >= 2:
            rng = np.random.default_rng(seed)
            idx = rng.integers(0, len(per), size=(n_boot, len(per)))
            boots = sa[idx].sum(axis=1) / sb[idx].sum(axis=1) - 1
            lo, hi = float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))
        else:
            lo = hi = float("nan")
        rows.append({**dict(zip(by, key)), "method": method, "baseline": baseline,
                     "mean_method": float(sa.sum() / g.shape[0]), "mean_baseline": float(sb.sum() / g.shape[0]),
                     "gain": point, "ci_low": lo, "ci_high": hi, "median_prompt_gain": float(np.median(sa / sb - 1)),
                     "positive_prompts": float(np.mean(sa > sb)), "prompts": len(per), "steps": int(g.shape[0])})
    return pd.DataFrame(rows)


def gain_verdict(gain_row: Mapping[str, Any], threshold: float = 0.0) -> str:
    """`results.verdict_from_ci` for "gain > threshold" of one `paired_gain` row (point estimate when
    the CI is undefined: fewer than two prompts)."""
    from .results import verdict_from_ci

    lo, hi = gain_row["ci_low"], gain_row["ci_high"]
    if isinstance(lo, float) and math.isnan(lo):
        lo = hi = gain_row["gain"]
    return verdict_from_ci(lo, hi, threshold)


def fmt_gain(row: Mapping[str, Any]) -> str:
    """A gain row as text: ``+3.2% [1.1, 5.0]``."""
    g, lo, hi = 100 * row["gain"], 100 * row["ci_low"], 100 * row["ci_high"]
    if math.isnan(lo):
        return f"{g:+.2f}%"
    return f"{g:+.2f}% [{lo:+.2f}, {hi:+.2f}]"


def star_views(ks: Iterable[int]) -> dict[int, Callable[[DraftTree], DraftTree]]:
    """Views ``k -> the first k children of the root`` of a drafted star ``batch:Kx1``."""
    return {int(k): (lambda t, k=int(k): restrict_to_shape(t, [-1] + [0] * k)) for k in ks}


def star_rejection_from_rows(target_rows: torch.Tensor, draft_rows: torch.Tensor, ks: Sequence[int],
                             verifier: str = "spectr", sampling: str = "iid", seed: int = 0):
    """P(no child accepted) of ``verifier`` on a star of k children drawn from each matched draft row.

    ``target_rows`` / ``draft_rows``: [M, V] rows of `matched_rows` (target-sampled contexts, so every
    scheme is measured at the same contexts). One star of max(ks) children is drawn per row (`drafting.
    draw_children`) and its first k children are verified exactly for every k (a prefix of the children
    is a star of k children drawn the same way). Whether a child is accepted depends on the root's rows
    only, so the leaves get the root's target row as a placeholder (it would only shape the bonus token
    after an accepted child). For schemes with a closed form, `theory.positional_acceptance` needs no
    drafting at all; this is for verifiers without one (SpecTr). Returns a DataFrame: row, k, rejection.
    """
    import pandas as pd

    from .drafting import draw_children
    from .verifiers import exact_law

    if target_rows.shape != draft_rows.shape or target_rows.dim() != 2:
        raise ValueError(f"need matched [M, V] rows, got {tuple(target_rows.shape)} and {tuple(draft_rows.shape)}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive, got {ks}")
    kmax = ks[-1]
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for m in range(target_rows.shape[0]):
        p, q = target_rows[m].to(torch.float64), draft_rows[m].to(torch.float64)
        kids, _ = draw_children(q, kmax, sampling, generator)
        for k in ks:
            tokens = torch.cat([torch.zeros(1, dtype=torch.long), kids[:k]])
            draft = torch.zeros(k + 1, q.shape[0], dtype=torch.float64)
            draft[0] = q
            tree = DraftTree(tokens, torch.tensor([-1] + [0] * k), draft, p.expand(k + 1, -1).clone(),
                             sampling=sampling)
            rows.append({"row": m, "k": k, "rejection": float(exact_law(verifier, tree)[0].sum())})
    return pd.DataFrame(rows)


def star_index_law(records: Sequence[TreeRecord], verifier: str):
    """Per drafted star (``batch:Kx1``): the exact probability that the verifier accepts the i-th child.

    For verifiers that try the children in order and stop at the first accepted one (token-level
    recursive rejection sampling with or without replacement, ERSS races, top-k matching) this law does
    not depend on how many children follow, so its mean over stars at target-distributed contexts is the
    positional acceptance vector p_1..p_K (Sequoia Defs 3.1-3.2; ERSS's 0th-order index distribution r),
    and 1 + p_1 + ... + p_k is the expected tokens of batch(k). Not for SpecTr (its rule depends on k).
    Returns a DataFrame: prompt_id, category, step, p1..pK.
    """
    import pandas as pd

    from .verifiers import exact_law

    rows = []
    for rec in records:
        kids = rec.tree.children[0]
        if len(kids) != rec.tree.num_nodes - 1:
            raise ValueError("star_index_law needs star trees (batch:Kx1)")
        law = exact_law(verifier, rec.tree)
        rows.append({"prompt_id": rec.prompt_id, "category": rec.category, "step": rec.step,
                     **{f"p{i + 1}": float(law[c].sum()) for i, c in enumerate(kids)}})
    return pd.DataFrame(rows)


def positional_vector(index_law) -> np.ndarray:
    """Mean of the p1..pK columns of `star_index_law` (the measured positional acceptance vector)."""
    cols = [c for c in index_law.columns if c.startswith("p") and c[1:].isdigit()]
    return index_law[sorted(cols, key=lambda c: int(c[1:]))].mean().to_numpy()


def sampled_accepted_lengths(verifier: str, target, draft, prefix: Sequence[int], parents: Sequence[int],
                             sampling: str = "iid", n: int = 1000, seed: int = 0) -> np.ndarray:
    """Accepted draft tokens (tau) of ``n`` independent single steps on toy LMs: draw a tree
    (`exact.sample_tree`), verify it with the sampler. The sampled counterpart of
    `exact.accepted_length_law`."""
    from .exact import sample_tree
    from .verifiers import verify

    generator = torch.Generator().manual_seed(seed)
    cache: dict = {}
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        tree = sample_tree(target, draft, prefix, parents, sampling, generator, cache=cache)
        out[i] = len(verify(verifier, tree, generator).path)
    return out


def ccdf(law_or_samples: Sequence[float] | np.ndarray, samples: bool = False) -> np.ndarray:
    """P(tau >= k) for k = 0..K from a law over tau = 0..K, or from samples of tau (``samples=True``)."""
    if samples:
        values = np.asarray(law_or_samples)
        top = int(values.max()) if values.size else 0
        return np.array([(values >= k).mean() for k in range(top + 1)])
    law = np.asarray(law_or_samples, dtype=float)
    return law[::-1].cumsum()[::-1]


# ----------------------------------------------------------------------------------------- wall clock

def timed_generation(pair: Pair, prompts: Sequence[PromptIds], verifier: str | None, shape: str | None = None,
                     sampling: str = "iid", temperature: float = 1.0, top_p: float = 1.0,
                     max_new_tokens: int = 32, seed: int = 0, progress: bool = True):
    """Wall-clock decoding: `speculative_generate` (or `autoregressive_generate` when ``verifier`` is None)
    per prompt. Returns a DataFrame per prompt: tokens, steps, seconds, tokens per second, tokens per step,
    the summed draft / target / verify seconds and the median step time (draft + target + verify of one
    step; autoregressive: seconds per token) (hf pairs only)."""
    import pandas as pd

    from .decoding import autoregressive_generate, speculative_generate

    if pair.kind != "hf":
        raise ValueError("wall-clock timings need a real model pair (profile default or full)")
    if getattr(pair.draft, "synthetic", False):
        raise ValueError(f"{pair.draft.name} is a synthetic draft (models.interpolated): tokens per step only, "
                         "never wall clock")
    rows = []
    iterator: Iterable[tuple[int, PromptIds]] = enumerate(prompts)
    if progress:
        from .progress import tqdm

        iterator = tqdm(list(iterator), desc=f"timing {verifier or 'autoregressive'} {shape or ''} T={temperature}",
                        leave=False)
    for k, prompt in iterator:
        t0 = time.perf_counter()
        if verifier is None:
            out = autoregressive_generate(pair.target, prompt.ids, temperature=temperature, top_p=top_p,
                                          max_new_tokens=max_new_tokens, eos_token_id=pair.eos_token_id,
                                          seed=seed * 100_003 + k)
        else:
            out = speculative_generate(pair.target, pair.draft, prompt.ids, verifier=verifier, shape=shape,
                                       sampling=sampling, temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens, eos_token_id=pair.eos_token_id,
                                       seed=seed * 100_003 + k)
        seconds = time.perf_counter() - t0
        steps = list(out.steps)
        n_tokens = len(out.tokens)
        step_s = [float(s.draft_s) + float(s.target_s) + float(s.verify_s) for s in steps if hasattr(s, "target_s")]
        rows.append({"prompt_id": prompt.id, "category": prompt.category, "verifier": verifier or "autoregressive",
                     "shape": shape or "-", "temperature": temperature, "tokens": n_tokens,
                     "steps": len(steps) or n_tokens, "seconds": seconds, "tokens_per_s": n_tokens / seconds,
                     "tokens_per_step": n_tokens / max(1, len(steps) or n_tokens),
                     "draft_s": sum(float(getattr(s, "draft_s", 0.0)) for s in steps),
                     "target_s": sum(float(getattr(s, "target_s", 0.0)) for s in steps),
                     "verify_s": sum(float(getattr(s, "verify_s", 0.0)) for s in steps),
                     "median_step_s": float(np.median(step_s)) if step_s else seconds / max(1, n_tokens)})
    return pd.DataFrame(rows)


__all__ = ["PROFILES", "TARGET_MODEL", "DRAFT_MODEL", "parse_param", "settings", "settings_table", "Pair",
           "toy_pair", "load_pair", "PromptIds", "prompts_for", "prompt_categories", "TreeRecord",
           "replicate_shape", "split_copies", "collect_trees", "paired_tokens_by_prompt", "matched_rows",
           "restrict_depth", "truncate_chain", "index_tuples",
           "restrict_to_shape", "applicable", "paired_expected_tokens",
           "summarize", "bootstrap_ratio", "star_views", "star_index_law", "positional_vector",
           "star_rejection_from_rows", "sampled_accepted_lengths", "ccdf", "paired_gain", "gain_verdict", "fmt_gain", "timed_generation"]
