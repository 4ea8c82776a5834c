"""Drafted trees along target-distributed contexts (`collect_trees`) and matched target/draft rows
(`matched_rows`): the expensive part of every acceptance experiment, done once per setting."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import pandas as pd
import torch

from ..decoding import autoregressive_generate, resolve_shape, speculative_generate
from ..drafting import draw_tree
from ..exact import sample_tree
from ..models.synthetic import tempered
from ..progress import tqdm
from ..sampling import process_logits
from ..tree import DraftTree, index_tuples, level_order, subtree, validate_parents
from ..verifiers import get_verifier, verify
from .setup import Pair, PromptIds

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
    return [subtree(tree, g) for g in groups]


class _TopP:
    """A toy LM with nucleus filtering applied to its rows (`sampling.process_logits` on log-probs)."""
    def __init__(self, lm, top_p: float):
        self.lm, self.top_p = lm, float(top_p)
        self.vocab_size, self.eos_token_id = lm.vocab_size, lm.eos_token_id

    def probs(self, context):
        p = self.lm.probs(context).to(torch.float64)
        return process_logits(torch.log(p), 1.0, self.top_p).to(torch.float64)


def _toy_models(pair: Pair, temperature: float, top_p: float):
    """The toy (target, draft) rows actually sampled from: tempered, top-p on the target only
    (`specdec_lib.sampling` convention)."""
    target, draft = tempered(pair.target, temperature), tempered(pair.draft, temperature)
    if top_p < 1.0:
        target = _TopP(target, top_p)
    return target, draft


def _toy_race_tree(target, draft, context: list[int], parents: list[int], generator: torch.Generator
                   ) -> DraftTree:
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

    pieces = draw_tree(parents, context[-1], lambda t, p, n: rows(draft, t, p, n), "race", generator)
    return pieces.scored_by(lambda t, p: rows(target, t, list(p), range(len(p))))


def _collect_toy(pair: Pair, prompt: PromptIds, parents: list[int], sampling: str, temperature: float,
                 top_p: float, max_new_tokens: int, generator: torch.Generator, advance: str
                 ) -> list[TreeRecord]:
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
        iterator = tqdm(list(prompts), desc=f"drafting {shape if isinstance(shape, str) else 'tree'} "
                                             f"{sampling} T={temperature}", leave=False)
    for prompt in iterator:
        prompt_seed = seed * 100_003 + zlib.crc32(prompt.id.encode()) % 100_003  # independent of list order
        generator = torch.Generator().manual_seed(prompt_seed)
        if pair.kind == "toy":
            records.extend(_collect_toy(pair, prompt, parents, sampling, temperature, top_p, max_new_tokens,
                                        generator, advance))
            continue

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


def teacher_forced_rows(pair: Pair, prompt_ids: Sequence[int], text: Sequence[int], temperature: float,
                        top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(P [n, V], Q [n, V]) float64 for an hf pair: the target's and the draft's next-token rows after the
    prompt followed by each prefix of ``text`` (one causal forward of each model), processed by
    `sampling.process_logits` with top-p on the target only."""
    ids = list(prompt_ids) + list(text)
    start, n = len(prompt_ids) - 1, len(text)
    with torch.no_grad():
        pl = pair.target.logits(ids[:-1])[start:start + n]
        ql = pair.draft.logits(ids[:-1])[start:start + n]
    return (process_logits(pl.double(), temperature, top_p, apply_top_p=True),
            process_logits(ql.double(), temperature, top_p, apply_top_p=False))


def matched_rows(pair: Pair, prompts: Sequence[PromptIds], temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 32, seed: int = 0, progress: bool = True, with_index: bool = False):
    """Matched (target, draft) next-token distributions at target-sampled contexts: ``(P [M, V], Q [M, V])``
    float64, one row per generated position (the context = prompt + the target's own sample so far).

    This is what acceptance statistics are measured on (Sequoia's positional acceptance, ERSS's index
    distribution r): the text comes from `autoregressive_generate` (toy pairs: sampled from the toy
    target), then one teacher-forced forward of each model scores every position. Rows follow
    `sampling.process_logits` (top-p on the target only). ``with_index=True`` also returns a DataFrame
    (prompt_id, category, step) naming each row's context, for CIs that resample prompts: ``(P, Q, index)``.
    """
    P, Q, index = [], [], []
    iterator: Iterable[tuple[int, PromptIds]] = enumerate(prompts)
    if progress:
        iterator = tqdm(list(iterator), desc=f"matched rows T={temperature}", leave=False)
    for k, prompt in iterator:
        generator = torch.Generator().manual_seed(seed * 100_003 + k)
        if pair.kind == "toy":
            target, draft = _toy_models(pair, temperature, top_p)
            context = prompt.ids.tolist()
            index += [{"prompt_id": prompt.id, "category": prompt.category, "step": j} for j in range(max_new_tokens)]
            for _ in range(max_new_tokens):
                p = target.probs(tuple(context)).to(torch.float64)
                P.append(p)
                Q.append(draft.probs(tuple(context)).to(torch.float64))
                context.append(int(torch.multinomial(p, 1, generator=generator)))
            continue

        out = autoregressive_generate(pair.target, prompt.ids, temperature=temperature, top_p=top_p,
                                      max_new_tokens=max_new_tokens, eos_token_id=pair.eos_token_id,
                                      seed=seed * 100_003 + k)
        if len(out.tokens) == 0:
            continue
        p_rows, q_rows = teacher_forced_rows(pair, prompt.ids.tolist(), list(out.tokens), temperature, top_p)
        index += [{"prompt_id": prompt.id, "category": prompt.category, "step": j} for j in range(len(out.tokens))]
        P.append(p_rows)
        Q.append(q_rows)
    rows = joined_rows(P, Q, pair.kind)
    return (*rows, pd.DataFrame(index, columns=["prompt_id", "category", "step"])) if with_index else rows


class NoRowsError(ValueError):
    """No matched rows were collected: every generation of the target was empty (it ended its answer at
    once). A ValueError; callers that measure one prompt at a time catch it to skip that prompt."""


def joined_rows(P: list, Q: list, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Collected rows as two [M, V] tensors (a toy pair collects single rows, an hf pair blocks of rows);
    `NoRowsError` when there are none."""
    if not P:
        raise NoRowsError("no rows collected (every generation was empty)")
    return (torch.stack(P), torch.stack(Q)) if kind == "toy" else (torch.cat(P), torch.cat(Q))
