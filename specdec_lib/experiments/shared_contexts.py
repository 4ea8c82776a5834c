"""Several drafting arms (tree shape + sampling scheme) drafted at the SAME target-sampled contexts.

`collect_trees` advances each arm's text with its own verifier, so two arms that draft different trees
(Sequoia's DP tree without replacement vs SpecInfer's k x L sequences, i.i.d.) meet at different
contexts and can only be paired by prompt; the context-to-context spread of acceptance (a step gives
1.0 or 2.6 tokens depending on how predictable the next token is) then dominates their difference.

Here the target first samples its own continuation of each prompt (`autoregressive_generate`: every
prefix has the target's law), and at every position of it each arm drafts its tree, which the target
scores; the sessions are then advanced by the target's sampled token, never by a verifier. Every arm
is therefore evaluated at exactly the same contexts, and `paired_expected_tokens` gives each tree's
exact expected tokens under a verifier: the paired difference per context has no context noise and no
verification noise, only the drafting noise of each arm. The mean is per context (every position of
the target's text), the same weighting as the positional acceptance vectors of `matched_rows`.
`model_gap_frame` puts each context's own positional vector beside the trees drafted there, for a model's
prediction (Sequoia's F(T)) checked against the measurement at the same contexts.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd
import torch

from ..decoding import autoregressive_generate, paired_sessions, resolve_shape
from ..drafting import forest_draws
from ..exact import sample_tree
from .memory import release_freed_memory
from ..progress import tqdm
from ..sampling import process_logits
from ..theory import acceptance_by_scheme
from ..tree import SAMPLING_MODES, DraftTree
from .collection import TreeRecord, _toy_models, _toy_race_tree, joined_rows, teacher_forced_rows
from .paired import paired_expected_tokens
from .setup import Pair, PromptIds


def _check_arms(arms: Mapping[str, tuple[Any, str]], temperature: float) -> dict[str, tuple[list[int], str]]:
    if not isinstance(arms, Mapping) or not arms:
        raise ValueError("arms must be a non-empty mapping name -> (shape, sampling)")
    out = {}
    for name, arm in arms.items():
        if not isinstance(arm, (tuple, list)) or len(arm) != 2:
            raise ValueError(f"arms[{name!r}] must be a (shape, sampling) pair, got {arm!r}")
        shape, sampling = arm
        if sampling not in SAMPLING_MODES:
            raise ValueError(f"arms[{name!r}]: unknown sampling {sampling!r}; known: {', '.join(SAMPLING_MODES)}")
        parents = resolve_shape(shape if isinstance(shape, str) else [int(p) for p in shape], temperature=temperature)
        out[str(name)] = (parents, sampling)
    return out


def _per_arm(argument: str, given: Mapping[str, Any] | None, arms: Mapping[str, Any], default,
             valid: Callable[[Any], bool], expected: str, convert: Callable[[Any], Any] = lambda v: v) -> dict:
    """``convert(given[arm])`` for the arms ``given`` names, ``default`` for the others (views, verifiers or copies
    per arm); ValueError for a ``given`` that is not a mapping, an arm that is not drafted, or a value that is not
    ``valid`` (``expected`` says what it must be)."""
    if given is not None and not isinstance(given, Mapping):
        raise ValueError(f"{argument} must be a mapping arm name -> value, got {given!r}")
    given = dict(given or {})
    unknown = sorted(set(given) - set(arms))
    if unknown:
        raise ValueError(f"{argument} names arms that are not drafted: {unknown}; arms: {sorted(arms)}")
    for name, value in given.items():
        if not valid(value):
            raise ValueError(f"{argument}[{name!r}] must be {expected}, got {value!r}")
    return {name: (convert(given[name]) if name in given else default) for name in arms}


def _generator_key(name: str, copy: int, common_random_numbers: bool) -> bytes:
    """What seeds the generator of an arm's ``copy`` (with common random numbers, copy c of every arm shares it)."""
    base = "common" if common_random_numbers else name
    return (base if copy == 0 else f"{base}#copy{copy}").encode()


Generators = Callable[[int], Sequence[torch.Generator]]
"""``generators(j)``: the drafted arms' generators at context j (the same objects at every j when each arm's
generator runs through the contexts)."""


def _generators(prompt_seed: int, keys: Sequence[bytes], per_context: bool) -> Generators:
    """The drafted entries' generators at each context: one per entry running through the contexts, or
    (``per_context``) a fresh one per entry and context, seeded by a 32-bit hash of the prompt's seed, the
    entry's key and the position (torch's CPU generator keeps only the low 32 bits of a seed)."""
    if not per_context:
        running = [torch.Generator().manual_seed(prompt_seed + zlib.crc32(key) % 100_003) for key in keys]
        return lambda j: running
    return lambda j: [torch.Generator().manual_seed(zlib.crc32(b"%d/%s@%d" % (prompt_seed, key, j))) for key in keys]


def _target_text(pair: Pair, prompt: PromptIds, contexts: int, temperature: float, top_p: float, seed: int,
                 generator: torch.Generator) -> list[int]:
    """The target's own sample of ``contexts`` tokens after the prompt (fewer when it stops at EOS)."""
    if pair.kind == "toy":
        target, _ = _toy_models(pair, temperature, top_p)
        context = prompt.ids.tolist()
        for _ in range(contexts):
            p = target.probs(tuple(context)).to(torch.float64)
            context.append(int(torch.multinomial(p, 1, generator=generator)))
        return context[len(prompt.ids):]
    out = autoregressive_generate(pair.target, prompt.ids, temperature=temperature, top_p=top_p,
                                  max_new_tokens=contexts, eos_token_id=pair.eos_token_id, seed=seed)
    return list(out.tokens)


def _live(limits: list[int], j: int) -> list[int]:
    """The arms (by position) drafted at context ``j``: those whose number of contexts ``limits[a]`` exceeds j."""
    return [a for a, limit in enumerate(limits) if j < limit]


def _toy_forest_trees(pair: Pair, prompt: PromptIds, text: list[int], arms: list[tuple[list[int], str]],
                      limits: list[int], temperature: float, top_p: float, generators: Generators,
                      block: int = 1) -> Iterable[list[DraftTree | None]]:
    """Every arm's tree at each position j of ``text`` with j < the arm's limit, None past it (toy pairs: exact
    contexts, one arm after another; ``block`` changes nothing here, there is no forward to share)."""
    target, draft = _toy_models(pair, temperature, top_p)
    caches: list[dict] = [{} for _ in arms]
    base = prompt.ids.tolist()
    for j in range(len(text)):
        context = base + text[:j]
        trees: list[DraftTree | None] = [None] * len(arms)
        at_j = generators(j)
        for a in _live(limits, j):
            parents, sampling = arms[a]
            trees[a] = (_toy_race_tree(target, draft, context, parents, at_j[a]) if sampling == "race" else
                        sample_tree(target, draft, context, parents, sampling, at_j[a],
                                    cache=caches[a] if pair.context_free else None))
        yield trees


def _attach(tokens: list[int], parents: list[int], local_tokens: Sequence[int], local_parents: Sequence[int],
            where: list[int]) -> None:
    """Append the nodes of a context's forest not placed yet (``where[i]``: the big tree's node of forest node
    i, node 0 = the context's position on the text) to the big tree ``tokens`` / ``parents``."""
    for i in range(len(where), len(local_tokens)):
        where.append(len(tokens))
        tokens.append(int(local_tokens[i]))
        parents.append(where[int(local_parents[i])])


def _hf_forest_trees(pair: Pair, prompt: PromptIds, text: list[int], arms: list[tuple[list[int], str]],
                     limits: list[int], temperature: float, top_p: float, generators: Generators,
                     block: int = 1) -> Iterable[list[DraftTree | None]]:
    """Every arm's tree at each position j of ``text`` with j < the arm's limit (None past it), the live arms
    drafted in lockstep (`drafting.forest_draws`), ``block`` contexts at a time.

    The block's positions of the text form a chain from the sessions' last fixed token, and each context's
    forest hangs off its position on that chain: one big tree, whose tree attention lets a node see its own
    context and ancestors only. So one draft forward per level serves every arm at every context of the block,
    one target forward scores all their trees, and the sessions then commit the block's text (no drafted node
    is ever accepted). With ``block`` = 1 this is one forest per context, as drafting it alone."""
    tsess, dsess = paired_sessions(pair.target, pair.draft, prompt.ids.tolist())
    for start in range(0, len(text), block):
        stop = min(start + block, len(text))
        spine_tokens = [tsess.fixed[-1], *text[start:stop - 1]]  # node b: the root of context start + b
        spine_parents = list(range(-1, stop - start - 1))
        live = {j: _live(limits, j) for j in range(start, stop)}
        steps, requests, where = {}, {}, {}
        for j in live:
            at_j = generators(j)
            steps[j] = forest_draws([(*arms[a], at_j[a]) for a in live[j]], spine_tokens[j - start])
            requests[j], where[j] = next(steps[j]), [j - start]
        tokens, parents, forests = list(spine_tokens), list(spine_parents), {}
        while requests:  # one draft forward per level, for every context still drafting
            for j, (local_tokens, local_parents, _) in requests.items():
                _attach(tokens, parents, local_tokens.tolist(), local_parents, where[j])
            nodes = [where[j][i] for j, (_, _, local_nodes) in requests.items() for i in local_nodes]
            rows = process_logits(dsess.tree_logits(tokens, parents, nodes), temperature, top_p,
                                  apply_top_p=False).cpu()
            offset, following = 0, {}
            for j, (_, _, local_nodes) in requests.items():
                try:
                    following[j] = steps[j].send(rows[offset:offset + len(local_nodes)])
                except StopIteration as done:
                    forests[j] = done.value
                offset += len(local_nodes)
            requests = following
        # the target scores every context's complete forest (leaves included) in one forward
        tokens, parents = list(spine_tokens), list(spine_parents)
        placed = {j: [j - start] for j in forests}
        for j, forest in forests.items():
            _attach(tokens, parents, forest.tokens.tolist(), forest.parents, placed[j])
        rows = process_logits(tsess.tree_logits(tokens, parents), temperature, top_p, apply_top_p=True).cpu()
        for j in live:  # in the text's order (a shallower context's forest may have finished first)
            forest = forests[j]
            trees: list[DraftTree | None] = [None] * len(arms)
            for a, tree in zip(live[j], forest.with_target(rows[placed[j]])):
                trees[a] = tree
            yield trees
        # advance both sessions by the block's text: the target's own tokens, no drafted node
        tsess.commit(list(range(1, stop - start)), text[stop - 1])
        dsess.commit(list(range(1, stop - start)), text[stop - 1])


def rows_at_shared_contexts(pair: Pair, prompts: Sequence[PromptIds], temperature: float = 1.0, top_p: float = 1.0,
                            contexts: int = 16, seed: int = 0, with_index: bool = False):
    """Matched (target, draft) next-token rows ``(P [M, V], Q [M, V])`` float64 at exactly the contexts that
    `paired_tokens_at_shared_contexts` drafts at with the same prompts, ``contexts`` and ``seed`` (the same
    target text), one row per position, processed as the trees' root rows are (top-p on the target only).
    Acceptance vectors measured on them describe the same contexts as the trees compared there.
    ``with_index=True`` also returns a DataFrame (prompt_id, category, step) naming each row's context with
    the ``step`` that `paired_tokens_at_shared_contexts` gives the trees drafted there: ``(P, Q, index)``."""
    if isinstance(contexts, bool) or not isinstance(contexts, int) or contexts < 1:
        raise ValueError(f"contexts must be an int >= 1, got {contexts!r}")
    P, Q, index = [], [], []
    for prompt in prompts:
        prompt_seed = _prompt_seed(seed, prompt)
        text = _target_text(pair, prompt, contexts, temperature, top_p, prompt_seed,
                            torch.Generator().manual_seed(prompt_seed))
        if not text:
            continue
        index += [{"prompt_id": prompt.id, "category": prompt.category, "step": j} for j in range(len(text))]
        ids = prompt.ids.tolist() + text
        if pair.kind == "toy":
            target, draft = _toy_models(pair, temperature, top_p)
            P += [target.probs(tuple(ids[:len(prompt.ids) + j])).to(torch.float64) for j in range(len(text))]
            Q += [draft.probs(tuple(ids[:len(prompt.ids) + j])).to(torch.float64) for j in range(len(text))]
            continue
        p_rows, q_rows = teacher_forced_rows(pair, prompt.ids.tolist(), text, temperature, top_p)
        P.append(p_rows)
        Q.append(q_rows)
    rows = joined_rows(P, Q, pair.kind)
    return (*rows, pd.DataFrame(index, columns=["prompt_id", "category", "step"])) if with_index else rows


def _prompt_seed(seed: int, prompt: PromptIds) -> int:
    return seed * 100_003 + zlib.crc32(prompt.id.encode()) % 100_003  # independent of list order


def paired_tokens_at_shared_contexts(pair: Pair, prompts: Sequence[PromptIds], arms: Mapping[str, tuple[Any, str]],
                                     temperature: float = 1.0, verifiers: Sequence[str] = ("token",),
                                     top_p: float = 1.0, contexts: int = 16, seed: int = 0, column: str = "arm",
                                     labels: Mapping[str, Any] | None = None,
                                     views: Mapping[str, Callable[[DraftTree], DraftTree]] | None = None,
                                     progress: bool = True,
                                     views_by_arm: Mapping[str, Mapping[str, Callable[[DraftTree], DraftTree]]] | None = None,
                                     verifiers_by_arm: Mapping[str, Sequence[str]] | None = None,
                                     common_random_numbers: bool = False,
                                     copies_by_arm: Mapping[str, int] | None = None,
                                     contexts_by_arm: Mapping[str, int] | None = None,
                                     contexts_per_forward: int | None = None,
                                     copy_contexts_by_arm: Mapping[str, int] | None = None,
                                     verifiers_by_view: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """Exact expected tokens per step of ``verifiers`` on each arm's tree at every shared context.

    ``arms``: name -> (shape, sampling), a shape as `decoding.resolve_shape` takes it (spec string or parents
    list) and a sampling scheme of `tree.SAMPLING_MODES`. ``contexts``: tokens the target samples after
    each prompt; position j's context is the prompt plus the first j of them. Returns the
    `paired_expected_tokens` frame of every arm, with ``step`` = the context position (the same for every
    arm, so `verdicts.GainCheck(..., column=column, pair_on="tree")` pairs arms per context), the arm's name
    in ``column``, its drafted nodes in ``nodes`` and the constant ``labels`` columns. ``views``: as in
    `paired_expected_tokens` (e.g. nested sub-shapes of each tree; default: the tree itself, view "tree").
    ``views_by_arm`` / ``verifiers_by_arm``: arm name -> the views / verifiers of that arm (replacing
    ``views`` / ``verifiers`` for it), e.g. nested sub-shapes that differ per arm. ``verifiers_by_view``: as in
    `paired_expected_tokens`, for the views of every arm (e.g. each method on its own sub-tree of a tree that holds
    both methods' shapes: common random numbers). The target's text depends
    only on the prompt and ``seed`` (a longer text extends a shorter one), so separate calls with the same
    prompts and seed share their common positions.

    The arms are drafted in lockstep (`drafting.draw_forest`): at each context one draft forward per level
    serves every arm's tree and one target forward scores them all. Each arm keeps its own sampling and
    generator (seeded by the prompt and the arm's name), so an arm's trees have the law, and the draws, of
    drafting it alone: adding an arm changes no other arm's trees (up to the rounding of batched forwards).

    ``common_random_numbers``: every arm's generator starts from the same seed instead. Each arm's trees keep
    their law; only the coupling between arms changes. The samplers `iid` and `without_replacement` both spend
    one uniform per child (inverse CDF, `drafting`), so two arms drafting one shape with them draw the same
    first child at every node and correlated later ones, and a paired difference between them loses most of the
    tree-draw noise (tests/test_shared_contexts.py measures it).

    ``copies_by_arm``: arm name -> n >= 1 independent trees drafted per context for that arm (default 1), in ``draw``
    0..n-1. Copy 0 is the tree the arm drafts with one copy (the same generator), and each further copy has a
    generator of its own, so the copies are i.i.d. given the context: averaging them per context (as
    `verdicts.paired_sums` does per step) divides that arm's drafting noise by n and leaves the context noise.

    ``contexts_by_arm``: arm name -> n in 1..``contexts``: that arm is drafted at the first n contexts only (default:
    all ``contexts``). Its trees there are the ones it drafts with ``contexts`` = n; the other arms go on alone, so
    an arm whose claim needs more contexts (e.g. a cheap chain) gets them without the cost of every arm there.
    Arms compared per context (``pair_on="tree"``) meet at the contexts both were drafted at.

    ``copy_contexts_by_arm``: arm name -> n in 1..(the arm's contexts): that arm's copies 1, 2, ... are drafted at
    the first n contexts only (default: at all of them); copy 0 keeps all the arm's contexts and its trees. So an
    arm drafted far for one claim (a cheap chain) gets its extra copies only where another claim pairs it with a
    costlier arm. Claims that pool contexts must then average the copies per context first (a context with
    two copies would otherwise weigh twice).

    ``contexts_per_forward``: None (default) drafts one context after another, each arm's generator running
    through the contexts. An int n >= 1 drafts n contexts of the text together (one draft forward per level and
    one target forward for all their trees: the text's positions form a chain and each context's trees hang off
    its position, tree attention keeping them apart), and draws each context's trees from a generator of their
    own (seeded by the prompt, the arm, the copy and the position), so the trees do not depend on n (up to the
    rounding of batched forwards). A chain drafted alone runs one single-token draft forward per level and
    context, which n contexts share: on a 2-core CPU a 56-token draft forward costs 8.6x a 1-token one, not 56x.
    """
    if not isinstance(common_random_numbers, bool):
        raise ValueError(f"common_random_numbers must be True or False, got {common_random_numbers!r}")
    arms_ = _check_arms(arms, temperature)
    if isinstance(contexts, bool) or not isinstance(contexts, int) or contexts < 1:
        raise ValueError(f"contexts must be an int >= 1, got {contexts!r}")
    if column in ("prompt_id", "category", "step", "view", "verifier", "expected_tokens"):
        raise ValueError(f"column {column!r} would overwrite a column of the frame; choose another name")
    views_of = _per_arm("views_by_arm", views_by_arm, arms_, views, lambda v: isinstance(v, Mapping), "a mapping", dict)
    verifiers_of = _per_arm("verifiers_by_arm", verifiers_by_arm, arms_, verifiers,
                            lambda v: isinstance(v, Sequence) and not isinstance(v, str), "a list", list)
    # each arm's evaluation takes only the entries of its own views (an arm without views has the view "tree")
    view_verifiers = {name: {v: n for v, n in (verifiers_by_view or {}).items() if v in (views_of[name] or ("tree",))}
                      for name in arms_}
    unknown_views = set(verifiers_by_view or {}) - set().union(*view_verifiers.values())
    if unknown_views:
        raise ValueError(f"verifiers_by_view names views that no arm has: {sorted(map(str, unknown_views))}")
    copies_of = _per_arm("copies_by_arm", copies_by_arm, arms_, 1,
                         lambda n: isinstance(n, int) and not isinstance(n, bool) and n >= 1, "an int >= 1")
    contexts_of = _per_arm("contexts_by_arm", contexts_by_arm, arms_, contexts,
                           lambda n: isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= contexts,
                           f"an int in 1..contexts ({contexts})")
    copy_contexts_of = _per_arm("copy_contexts_by_arm", copy_contexts_by_arm, arms_, None,
                                lambda n: isinstance(n, int) and not isinstance(n, bool) and n >= 1,
                                "an int >= 1 (at most the arm's contexts)")
    for name, n in copy_contexts_of.items():
        if n is not None and n > contexts_of[name]:
            raise ValueError(f"copy_contexts_by_arm[{name!r}] = {n} exceeds the arm's contexts ({contexts_of[name]})")
    if contexts_per_forward is not None and (isinstance(contexts_per_forward, bool)
                                             or not isinstance(contexts_per_forward, int) or contexts_per_forward < 1):
        raise ValueError(f"contexts_per_forward must be None or an int >= 1, got {contexts_per_forward!r}")
    # one drafted entry per (arm, copy): copy 0 keeps the arm's own generator, so adding copies changes no tree
    drafted_names = [(name, c) for name in arms_ for c in range(copies_of[name])]
    drafted = [arms_[name] for name, _ in drafted_names]
    keys = [_generator_key(name, copy, common_random_numbers) for name, copy in drafted_names]
    limits = [contexts_of[name] if copy == 0 or copy_contexts_of[name] is None else copy_contexts_of[name]
              for name, copy in drafted_names]
    frames = []
    iterator: Iterable[PromptIds] = prompts
    if progress:
        iterator = tqdm(list(prompts), desc=f"{len(arms_)} arms at shared contexts T={temperature}", leave=False)
    forest_trees = _toy_forest_trees if pair.kind == "toy" else _hf_forest_trees
    for prompt in iterator:
        prompt_seed = _prompt_seed(seed, prompt)
        text = _target_text(pair, prompt, max(limits), temperature, top_p, prompt_seed,
                            torch.Generator().manual_seed(prompt_seed))
        generators = _generators(prompt_seed, keys, contexts_per_forward is not None)
        for j, trees in enumerate(forest_trees(pair, prompt, text, drafted, limits, temperature, top_p, generators,
                                               contexts_per_forward or 1)):
            for (name, copy), tree in zip(drafted_names, trees):
                if tree is None:  # past this arm's contexts
                    continue
                record = TreeRecord(prompt.id, prompt.category, j, tree, 0, advance="target sample", draw=copy)
                frames.append(paired_expected_tokens(
                    [record], verifiers_of[name], views_of[name], labels={**dict(labels or {}), column: name},
                    verifiers_by_view=view_verifiers[name]))
            release_freed_memory()  # tree rows change size every context: keep the heap from fragmenting
    if not frames:
        raise ValueError("no contexts collected (every target sample was empty)")
    return pd.concat(frames, ignore_index=True)


def model_gap_frame(pair: Pair, prompts: Sequence[PromptIds], trees: Mapping[Any, Sequence[int]],
                    temperature: float, max_children: int, sampling: str = "without_replacement",
                    mc_samples: int = 64, contexts: int = 16, seed: int = 0, column: str = "size",
                    verifier: str = "token_rb", progress: bool = True) -> pd.DataFrame:
    """The per-context frame a model-against-measurement check (`verdicts.ModelGapCheck`) reads: at every shared
    context (prompt, step) of ``prompts``, each tree of ``trees`` (label -> parents list) drafted with ``sampling``
    and its exact expected tokens under ``verifier`` in ``expected_tokens`` (label in ``column``), beside the
    positional acceptance vector ``p1..p{max_children}`` measured at that same context with the same sampling
    scheme (`theory.acceptance_by_scheme` on the rows of `rows_at_shared_contexts`, ``mc_samples`` draw
    sequences). So a model's prediction from the vectors (Sequoia's F(T)) and the measurement describe the
    same contexts, and a bootstrap over prompts resamples both."""
    if not isinstance(trees, Mapping) or not trees:
        raise ValueError("trees must be a non-empty mapping label -> parents list")
    if isinstance(max_children, bool) or not isinstance(max_children, int) or max_children < 1:
        raise ValueError(f"max_children must be an int >= 1, got {max_children!r}")
    names = {str(label): label for label in trees}  # arm names are text; the frame keeps the given labels
    if len(names) != len(trees):
        raise ValueError(f"trees: labels {list(trees)} print alike; give each tree a distinct label")
    P, Q, index = rows_at_shared_contexts(pair, prompts, temperature, contexts=contexts, seed=seed, with_index=True)
    vectors = acceptance_by_scheme(P, Q, max_children, {sampling: sampling}, mc_samples)[sampling]
    del P, Q
    vector_columns = [f"p{i}" for i in range(1, max_children + 1)]
    by_context = index.join(pd.DataFrame(vectors, columns=vector_columns))
    measured = paired_tokens_at_shared_contexts(pair, prompts, {name: (list(trees[label]), sampling)
                                                                for name, label in names.items()},
                                                temperature, [verifier], contexts=contexts, seed=seed,
                                                column=column, progress=progress)
    measured[column] = measured[column].map(names)
    measured = measured[["prompt_id", "step", column, "expected_tokens"]]
    return measured.merge(by_context, on=["prompt_id", "step"], validate="many_to_one")
