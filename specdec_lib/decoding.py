"""Speculative and autoregressive generation with real LMs, with per-step statistics.

One step of `speculative_generate` (SpecInfer / Sequoia / the chain papers all share it):

1. draft: grow the tree shape level by level (`drafting.draw_tree`), one draft forward per level
   with tree attention over the draft's own KV cache; children drawn by ``sampling``;
2. target: ONE forward over the whole tree (tree attention mask, prefix KV cache) gives the target
   distribution after every root..node path;
3. verify: ``verifiers.verify(verifier, tree, generator, state)`` returns the accepted path and one
   extra token; ``verdict.state`` is threaded into the next step (greedy block verification);
4. commit: both KV caches keep only the accepted path; EOS or ``max_new_tokens`` inside the emitted
   block cuts the output there.

Distributions follow `sampling.process_logits` (temperature; top-p on the target only). A single
``torch.Generator`` seeded by ``seed`` drives every random choice (drafting and verification), so the
same seed gives the same output. Timings synchronise CUDA before reading the clock.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from .arguments import ArgumentTypeError, check_choice, check_int, check_model, check_real, check_seed
from .drafting import draw_tree
from .models.names import DRAFT_NAME
from .progress import tqdm
from .sampling import process_logits
from .shapes import check_acceptance_vector, is_sequoia, measured_acceptance_vector, resolve_shape, shape_nodes
from .tree import SAMPLING_MODES, DraftTree, parent_depths
from .verifiers import VERIFIERS, get_verifier, verify
from .verifiers.base import sample_categorical

__all__ = ["StepStats", "GenerationOutput", "speculative_generate", "autoregressive_generate",
           "resolve_shape", "measured_acceptance_vector", "check_pair", "check_tree_shape", "MAX_TREE_NODES"]

MAX_TREE_NODES = 4096
"""The largest draft tree (nodes, root included) `speculative_generate` drafts: its tree-attention
forwards and masks grow with the node count, and a shape such as ``binary:16`` (65535 nodes) runs out of
memory. The size is computed from the shape before anything is allocated."""


@dataclass
class StepStats:
    """One decoding step: ``emitted`` tokens appended (after EOS / length cuts), ``accepted`` draft
    tokens on the accepted path, ``drafted`` nodes in the tree (root excluded), and the seconds spent
    drafting, in the target forward and in verification. ``tree`` is kept with ``keep_trees=True``."""

    emitted: int
    accepted: int
    drafted: int
    draft_s: float
    target_s: float
    verify_s: float
    tree: DraftTree | None = None

    @property
    def total_s(self) -> float:
        return self.draft_s + self.target_s + self.verify_s


@dataclass
class GenerationOutput:
    """``tokens``: the generated token ids (prompt excluded); ``steps``: one `StepStats` per target
    forward; ``settings``: the method and sampling parameters."""

    tokens: list[int]
    prompt_ids: list[int]
    steps: list[StepStats]
    settings: dict = field(default_factory=dict)
    stop_reason: str = "length"

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def tokens_per_step(self) -> float:
        """Mean emitted tokens per target forward (Sequoia's "average generated tokens")."""
        return self.num_tokens / len(self.steps) if self.steps else 0.0

    @property
    def time_s(self) -> float:
        return sum(s.total_s for s in self.steps)

    @property
    def tokens_per_second(self) -> float:
        t = self.time_s
        return self.num_tokens / t if t > 0 else float("nan")

    def text(self, lm, skip_special_tokens: bool = True) -> str:
        return lm.decode(self.tokens, skip_special_tokens=skip_special_tokens)


# ----- checks and shapes -----------------------------------------------------------------------

def check_pair(target, draft) -> None:
    """ValueError unless draft and target share the vocabulary (size and tokenizer)."""
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"draft {draft.name!r} has vocabulary size {draft.vocab_size} but target "
                         f"{target.name!r} has {target.vocab_size}; speculative decoding needs one vocabulary")
    ta, tb = getattr(target, "tokenizer", None), getattr(draft, "tokenizer", None)
    if ta is not None and tb is not None and ta is not tb:
        if len(ta) != len(tb) or ta.get_vocab() != tb.get_vocab():
            raise ValueError(f"draft {draft.name!r} and target {target.name!r} use different tokenizers")


def paired_sessions(target, draft, prompt: list[int]):
    """The target's and the draft's sessions for one generation. A draft that reads the target's
    features (``draft.paired_sessions``, e.g. `models.feature.FeatureDraftLM`) builds both, so the
    target's verification pass hands its features to the draft."""
    if hasattr(draft, "paired_sessions"):
        return draft.paired_sessions(target, prompt)
    return target.session(prompt), draft.session(prompt)


def _sync(*lms) -> None:
    for lm in lms:
        if lm.device.type == "cuda":
            torch.cuda.synchronize(lm.device)


def _check_int(name: str, value, minimum: int | None = None) -> int:
    """``value`` as an int >= ``minimum`` (`arguments.check_int`: a bool, a float, a string is refused)."""
    return check_int(name, value, minimum)


def _check_sampling(temperature, top_p) -> tuple[float, float]:
    """``temperature`` (finite, >= 0) and ``top_p`` (in (0, 1]) as floats, named when wrong."""
    return (check_real("temperature", temperature, 0.0),
            check_real("top_p", top_p, 0.0, 1.0, low_open=True))


def _check_target(target) -> None:
    check_model("target", target)


def _check_eos(eos_token_id, lm) -> None:
    vocab = getattr(lm, "vocab_size", None)
    if eos_token_id is not None and vocab is not None and eos_token_id >= vocab:
        raise ValueError(f"eos_token_id {eos_token_id} is outside the vocabulary [0, {vocab}) of "
                         f"{getattr(lm, 'name', 'the model')!r}")


def _record_dir(draft, shape, acceptance_vector):
    """Where ``draft``'s measured acceptance vector is recorded, for a Sequoia shape without
    ``acceptance_vector``: its ``record_dir``, or the distilled draft's directory for that draft
    (None = `shapes.measured_acceptance_vector`'s default). A draft without a record is refused: another
    draft's vector would build a tree for the wrong acceptance rates."""
    if not is_sequoia(shape) or acceptance_vector is not None:
        return None
    record = getattr(draft, "record_dir", None)
    if record is not None or getattr(draft, "name", None) == DRAFT_NAME:
        return record
    raise ValueError(f"shape {shape!r} needs Sequoia's positional acceptance vector of draft "
                     f"{getattr(draft, 'name', draft)!r}, which has no recorded one (no record_dir with a "
                     f"draft.json); pass acceptance_vector= (e.g. measured with theory.positional_acceptance)")


def check_tree_shape(shape, acceptance_vector: Sequence[float] | None = None) -> list[float] | None:
    """The shape's size against `MAX_TREE_NODES` (counted from the shape, before any tree is built) and
    ``acceptance_vector`` with a Sequoia shape only (`shapes.check_acceptance_vector`); returns the vector
    as floats (or None). ValueError (TypeError for a wrong type) naming the argument."""
    size = shape_nodes(shape)
    if size > MAX_TREE_NODES:
        raise ValueError(f"shape {shape!r:.60} has {size} nodes, more than the limit MAX_TREE_NODES = "
                         f"{MAX_TREE_NODES} of speculative_generate")
    return check_acceptance_vector(shape, acceptance_vector)


def _prompt_list(prompt_ids) -> list[int]:
    """The prompt as a list of ints. Accepted: a 1-D sequence / tensor / array of integer token ids, or
    a batch of one ``[1, n]``. ValueError naming ``prompt_ids`` for text, float or bool ids (1.5 is no
    token) and for batches of several rows (one generation decodes one sequence)."""
    if isinstance(prompt_ids, (str, bytes)):
        raise ValueError("prompt_ids must be token ids, not text: encode it first (lm.encode(text))")
    if isinstance(prompt_ids, (list, tuple)) and all(
            isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in prompt_ids):
        ids = [int(t) for t in prompt_ids]  # the common case, no tensor round trip
    else:
        try:
            tensor = prompt_ids if isinstance(prompt_ids, torch.Tensor) else torch.as_tensor(prompt_ids)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"prompt_ids must be a sequence or tensor of integer token ids: {exc}") from None
        if tensor.numel() and (tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex()):
            raise ValueError(f"prompt_ids must hold integer token ids, got dtype {tensor.dtype}")
        if tensor.dim() == 2 and tensor.shape[0] == 1:
            tensor = tensor[0]
        if tensor.dim() != 1:
            raise ValueError(f"prompt_ids must be 1-D [n] or a batch of one [1, n], got shape "
                             f"{tuple(tensor.shape)} (generate one prompt per call)")
        ids = [int(t) for t in tensor.tolist()]
    if not ids:
        raise ValueError("the prompt is empty: give at least one token")
    return ids


def _check_prompt_ids(lm, prompt: list[int]) -> None:
    """ValueError unless every prompt id is a row of ``lm``'s vocabulary."""
    vocab = getattr(lm, "vocab_size", None)
    low, high = min(prompt), max(prompt)
    if low < 0 or (vocab is not None and high >= vocab):
        bad = low if low < 0 else high
        raise ValueError(f"prompt_ids: token id {bad} is outside the vocabulary [0, {vocab}) of "
                         f"{getattr(lm, 'name', 'the model')!r}")


def _check_length(lm, prompt: list[int], extra: int) -> None:
    if len(prompt) + extra > lm.max_context:
        raise ValueError(f"prompt of {len(prompt)} tokens is too long for {lm.name!r}: with {extra} more "
                         f"positions it exceeds the context of {lm.max_context}")


def _cut(emitted: list[int], remaining: int, eos: int | None) -> tuple[list[int], str | None]:
    """Cut an emitted block at EOS (kept) or at the remaining length budget."""
    reason = None
    if eos is not None and eos in emitted:
        emitted = emitted[: emitted.index(eos) + 1]
        reason = "eos"
    if len(emitted) >= remaining:
        if len(emitted) > remaining or reason is None:
            reason = "length"
        emitted = emitted[:remaining]
    return emitted, reason


def _resolve_eos(eos_token_id, ignore_eos: bool, lm) -> int | None:
    if ignore_eos:
        return None
    return lm.eos_token_id if eos_token_id is None else eos_token_id


def _check_eos_arg(eos_token_id, lm) -> int | None:
    """``eos_token_id`` (None or an id of ``lm``'s vocabulary), checked even when ``ignore_eos``."""
    if eos_token_id is None:
        return None
    eos = _check_int("eos_token_id", eos_token_id, 0)
    _check_eos(eos, lm)
    return eos


def _progress(total: int, enabled: bool, desc: str):
    return tqdm(total=total, disable=not enabled, desc=desc, unit="tok", leave=False)


# ----- generation --------------------------------------------------------------------------------

def speculative_generate(target, draft, prompt_ids, verifier: str = "block", shape="chain:8",
                         sampling: str = "iid", temperature: float = 1.0, top_p: float = 1.0,
                         max_new_tokens: int = 128, eos_token_id: int | None = None, seed: int = 0,
                         keep_trees: bool = False, acceptance_vector: Sequence[float] | None = None,
                         ignore_eos: bool = False, progress: bool = False) -> GenerationOutput:
    """Lossless speculative decoding of ``target`` with ``draft`` (both `LanguageModel`).

    ``verifier``: a name of `verifiers.VERIFIERS`; ``shape``: see `resolve_shape`; ``sampling``: how
    children are drawn (iid | without_replacement | topk | race); ``temperature`` / ``top_p``: see
    `sampling.process_logits` (top-p on the target only). ``eos_token_id`` None = the target
    tokenizer's EOS (``ignore_eos=True`` never stops early). Returns a `GenerationOutput` whose steps
    hold emitted / accepted / drafted counts and draft / target / verify seconds.

    Every argument is checked before any session opens (ValueError, TypeError for a wrong type, naming
    it): models must be loaded (`load_model`), trees hold at most `MAX_TREE_NODES` nodes (counted from
    the shape), ``acceptance_vector`` goes with Sequoia shapes only, and a Sequoia shape needs it unless
    the draft has a recorded one.
    """
    temperature, top_p = _check_sampling(temperature, top_p)
    if not isinstance(verifier, str):
        raise ArgumentTypeError(f"verifier must be one verifier name (a string), got {verifier!r:.60} "
                                f"({type(verifier).__name__}); one of {sorted(VERIFIERS)}")
    get_verifier(verifier)  # unknown verifier -> ValueError before any work
    check_choice("sampling", sampling, SAMPLING_MODES)
    _check_target(target)
    check_model("draft", draft, attrs=("vocab_size", "name"))
    check_pair(target, draft)
    check_model("draft", draft)
    max_new_tokens = _check_int("max_new_tokens", max_new_tokens, 1)
    seed = check_seed("seed", seed)
    eos_token_id = _check_eos_arg(eos_token_id, target)
    prompt = _prompt_list(prompt_ids)
    _check_prompt_ids(target, prompt)
    acceptance_vector = check_tree_shape(shape, acceptance_vector)
    record_dir = _record_dir(draft, shape, acceptance_vector)
    parents = resolve_shape(shape, acceptance_vector, temperature, record_dir)
    max_depth = max(parent_depths(parents))
    for lm in (target, draft):  # the deepest tree node must fit behind the prompt
        _check_length(lm, prompt, max(1, max_depth))
    eos = _resolve_eos(eos_token_id, ignore_eos, target)
    gen = torch.Generator().manual_seed(int(seed))
    tsess, dsess = paired_sessions(target, draft, prompt)
    T, p = float(temperature), float(top_p)
    timing = {"target": 0.0}

    def draft_fn(tokens, parents_so_far, nodes):
        logits = dsess.tree_logits(tokens, parents_so_far, nodes)
        return process_logits(logits, T, p, apply_top_p=False).cpu()

    def target_fn(tokens, parents_so_far):
        _sync(draft, target)
        t0 = time.perf_counter()
        logits = tsess.tree_logits(tokens, parents_so_far)
        probs = process_logits(logits, T, p, apply_top_p=True).cpu()
        _sync(target)
        timing["target"] += time.perf_counter() - t0
        return probs

    out: list[int] = []
    steps: list[StepStats] = []
    state: Any = None
    stop = "length"
    bar = _progress(int(max_new_tokens), progress, f"{verifier} {shape}")
    while len(out) < max_new_tokens:
        if len(tsess.fixed) + max_depth > min(target.max_context, draft.max_context):
            stop = "context"
            break
        timing["target"] = 0.0
        _sync(draft, target)
        t0 = time.perf_counter()
        tree = draw_tree(parents, tsess.fixed[-1], draft_fn, sampling, gen).scored_by(target_fn)
        _sync(draft, target)
        t1 = time.perf_counter()
        verdict = verify(verifier, tree, gen, state)
        t2 = time.perf_counter()
        state = verdict.state
        emitted, reason = _cut(verdict.emitted(tree), int(max_new_tokens) - len(out), eos)
        out.extend(emitted)
        bar.update(len(emitted))
        steps.append(StepStats(emitted=len(emitted), accepted=len(verdict.path), drafted=len(parents) - 1,
                               draft_s=(t1 - t0) - timing["target"], target_s=timing["target"],
                               verify_s=t2 - t1, tree=tree if keep_trees else None))
        if reason is not None:
            stop = reason
            break
        tsess.commit(verdict.path, verdict.token)
        dsess.commit(verdict.path, verdict.token, tree.tokens, tree.parents)
    bar.close()
    settings = dict(method="speculative", target=target.name, draft=draft.name, verifier=verifier,
                    shape=shape if isinstance(shape, str) else list(parents), tree_size=len(parents),
                    sampling=sampling, temperature=T, top_p=p, max_new_tokens=int(max_new_tokens),
                    eos_token_id=eos, seed=int(seed))
    return GenerationOutput(out, prompt, steps, settings, stop)


def autoregressive_generate(target, prompt_ids, temperature: float = 1.0, top_p: float = 1.0,
                            max_new_tokens: int = 128, eos_token_id: int | None = None, seed: int = 0,
                            ignore_eos: bool = False, progress: bool = False) -> GenerationOutput:
    """Plain sampling from ``target`` with the same distributions (`sampling.process_logits`) and a
    KV cache; one step per token (``steps[i].target_s`` = forward + processing seconds)."""
    temperature, top_p = _check_sampling(temperature, top_p)
    _check_target(target)
    max_new_tokens = _check_int("max_new_tokens", max_new_tokens, 1)
    seed = check_seed("seed", seed)
    eos_token_id = _check_eos_arg(eos_token_id, target)
    prompt = _prompt_list(prompt_ids)
    _check_prompt_ids(target, prompt)
    _check_length(target, prompt, 1)
    eos = _resolve_eos(eos_token_id, ignore_eos, target)
    gen = torch.Generator().manual_seed(int(seed))
    sess = target.session(prompt)
    out: list[int] = []
    steps: list[StepStats] = []
    stop = "length"
    bar = _progress(int(max_new_tokens), progress, "autoregressive")
    while len(out) < max_new_tokens:
        if len(sess.fixed) >= target.max_context:
            stop = "context"
            break
        _sync(target)
        t0 = time.perf_counter()
        probs = process_logits(sess.next_logits(), float(temperature), float(top_p)).cpu()
        _sync(target)
        t1 = time.perf_counter()
        token = sample_categorical(probs, gen)
        t2 = time.perf_counter()
        out.append(token)
        bar.update(1)
        steps.append(StepStats(emitted=1, accepted=0, drafted=0, draft_s=0.0, target_s=t1 - t0, verify_s=t2 - t1))
        if eos is not None and token == eos:
            stop = "eos"
            break
        if len(out) < max_new_tokens:
            sess.append(token)
    bar.close()
    settings = dict(method="autoregressive", target=target.name, temperature=float(temperature),
                    top_p=float(top_p), max_new_tokens=int(max_new_tokens), eos_token_id=eos, seed=int(seed))
    return GenerationOutput(out, prompt, steps, settings, stop)
