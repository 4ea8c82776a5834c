"""The decoder's own seconds per step: the work Sequoia's Eq. 1 leaves out (docs/methods/sequoia.md §2.11).

Eq. 1 prices a speculative step at the forwards alone, t(n) + d c. The decoder also turns every row it scores
into a distribution (`sampling.process_logits` over the whole vocabulary, for the n target rows and for every
draft level), draws the children, checks the tree, verifies and commits the caches. On the papers' GPUs
that work hides behind the forwards; on a CPU, with a 49k-token vocabulary, it grows with the tree (about a
third of a 64-node step on a 2-core CPU: data/results/05_sequoia/decoder_overhead.csv) and decides which tree is fastest.

This module measures it with the decoder itself: `speculative_generate` (or `autoregressive_generate`)
runs a *null pair*, two one-layer models of width 16 with the real vocabulary, whose forwards cost well
under a millisecond; their own forward times (`profiling.profile`, the same method as t(n)) are subtracted.
What is left is the decoder's work per step for that tree shape, with no forward of the real models in it.

* :func:`null_model` -- a `LanguageModel` of that kind (random weights: near-uniform distributions, so the
  null pair accepts almost every draft; the work of rejected branches is priced at that);
* :func:`decoder_overhead` -- {arm: seconds per step} for arms written as `experiments.interleaved_timing`
  writes them (None: autoregressive; (verifier, shape, sampling));
* :func:`dp_tree_overheads` -- the same for every tree Sequoia's optimizer scores ({(n, d): seconds},
  `cost_model.optimize_tree`'s ``step_overhead``);
* :func:`overhead_column`, :func:`round_decoder_overhead` -- an arm's overhead as a column of per-round
  measurements (`experiments.interleaved_timing`'s ``round_inputs``).
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from typing import Hashable, Mapping, Sequence

import torch

from .. import theory
from ..decoding import autoregressive_generate, speculative_generate
from ..progress import tqdm
from ..shapes import resolve_shape
from ..tree import parent_depths
from .profiling import profile

NULL_WIDTH = 16
"""Hidden size (and MLP width) of a null model: its forward is the embedding, one tiny layer and the head."""


def null_model(vocab_size: int, dtype: torch.dtype | str = "bfloat16", seed: int = 0, max_context: int = 2048,
               device: torch.device | str = "cpu"):
    """A `LanguageModel` of one Llama layer of width `NULL_WIDTH` over ``vocab_size`` tokens, random weights,
    no tokenizer, on ``device`` (the real target's, so its rows are processed where the decoder processes
    them): a model whose forward costs almost nothing, for timing the decoder's own work."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..models.hf import LanguageModel, resolve_device, resolve_dtype

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}")
    torch_dtype = resolve_dtype(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must name a dtype (float32, bfloat16, float16), got {dtype!r}")
    config = LlamaConfig(hidden_size=NULL_WIDTH, intermediate_size=NULL_WIDTH, num_hidden_layers=1,
                         num_attention_heads=1, num_key_value_heads=1, vocab_size=vocab_size,
                         max_position_embeddings=max_context, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(seed)
        module = LlamaForCausalLM(config).to(device=resolve_device(device), dtype=torch_dtype).eval()
    return LanguageModel(module, None, f"null-{vocab_size}-seed{seed}")


@functools.lru_cache(maxsize=4)
def _null_pair(vocab_size: int, dtype, seed: int, device):
    """The null target and draft (seeds ``seed`` and ``seed + 1``), built once per setting: a timing run asks for
    them before every round, and their weights never change."""
    return (null_model(vocab_size, dtype, seed, device=device),
            null_model(vocab_size, dtype, seed + 1, device=device))


def _arm_tree(arm, temperature: float) -> tuple[int, int] | None:
    """(nodes, draft forwards per step) of an arm's tree; None for autoregressive."""
    if arm is None:
        return None
    if not isinstance(arm, tuple) or len(arm) != 3:
        raise ValueError(f"an arm must be None (autoregressive) or (verifier, shape, sampling), got {arm!r}")
    parents = resolve_shape(arm[1], None, temperature)
    return len(parents), max(parent_depths(parents))


def decoder_overhead(vocab_size: int, arms: Mapping[Hashable, tuple | None], temperature: float = 1.0,
                     dtype: torch.dtype | str = "bfloat16", prompt_len: int = 128, tokens: int = 24,
                     repeats: int = 3, seed: int = 0, progress: bool = True,
                     device: torch.device | str = "cpu") -> dict[Hashable, float]:
    """Seconds per step the decoder spends outside the models' forwards, for each arm (module docstring).

    ``arms``: name -> None (autoregressive) or (verifier, shape, sampling), as `experiments.interleaved_timing`
    takes them. Each arm decodes ``tokens`` tokens after a random prompt of ``prompt_len`` tokens with the null
    pair ``repeats`` times (after one untimed run of the first arm); its overhead is the median seconds per step
    (the whole call over its steps: sessions, drafting, scoring, verification, commits) minus the null models'
    own forwards in a step: t_null(n) for the target's n nodes and the null draft's one-token forward for each
    draft forward the decoder runs (one per level that has children; Eq. 1 prices a level at one token), floored
    at 0. ``device``: where the null pair runs (the
    real target's device)."""
    if not isinstance(arms, Mapping) or not arms:
        raise ValueError(f"arms must be a non-empty mapping name -> arm, got {arms!r}")
    for name, value in (("prompt_len", prompt_len), ("tokens", tokens), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    trees = {name: _arm_tree(arm, float(temperature)) for name, arm in arms.items()}
    target, draft = _null_pair(vocab_size, dtype, seed, device)
    sizes = sorted({1} | {t[0] for t in trees.values() if t is not None})
    t_null = dict(zip(sizes, profile(target, sizes, prefix_len=prompt_len, repeats=5, warmup=1)["median_s"]))
    c_null = profile(draft, [1], prefix_len=prompt_len, repeats=5, warmup=1)["median_s"][0]
    prompt = torch.randint(0, vocab_size, (prompt_len,), generator=torch.Generator().manual_seed(seed)).tolist()

    def seconds_per_step(arm, run_seed: int) -> float:
        start = time.perf_counter()
        if arm is None:
            out = autoregressive_generate(target, prompt, temperature=temperature, max_new_tokens=tokens,
                                          seed=run_seed, ignore_eos=True)
        else:
            out = speculative_generate(target, draft, prompt, verifier=arm[0], shape=arm[1], sampling=arm[2],
                                       temperature=temperature, max_new_tokens=tokens, seed=run_seed, ignore_eos=True)
        return (time.perf_counter() - start) / len(out.steps)

    seconds_per_step(next(iter(arms.values())), seed)  # warm-up
    out = {}
    for name in tqdm(list(arms), desc="decoder overhead (null pair)", leave=False, disable=not progress):
        step = statistics.median(seconds_per_step(arms[name], seed + r) for r in range(repeats))
        tree = trees[name]
        forwards = t_null[1] if tree is None else t_null[tree[0]] + tree[1] * c_null
        out[name] = max(0.0, step - forwards)
    return out


def dp_tree_overheads(vocab_size: int, acceptance_vector: Sequence[float], sizes: Sequence[int], max_depth: int,
                      temperature: float = 1.0, verifier: str = "token", sampling: str = "without_replacement",
                      **kwargs) -> tuple[dict[tuple[int, int], float], float]:
    """The decoder's overhead of every tree `cost_model.optimize_tree` scores: ({(n, d): seconds per step} for
    Sequoia's DP tree of n nodes and depth d (root counted) at each n in ``sizes``, the autoregressive
    decoder's seconds per token). Keyword arguments go to :func:`decoder_overhead`."""
    sizes = sorted({int(n) for n in sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"sizes must be positive integers, got {sizes!r}")
    table = theory.sequoia_table(acceptance_vector, sizes[-1], int(max_depth))
    arms: dict[Hashable, tuple | None] = {"autoregressive": None}
    for n in sizes:
        for d in range(1, min(int(max_depth), n) + 1):
            if math.isfinite(table.expected_tokens(n, d)):
                arms[(n, d)] = (verifier, table.tree(n, d), sampling)
    measured = decoder_overhead(vocab_size, arms, temperature, **kwargs)
    baseline = measured.pop("autoregressive")
    return measured, baseline


def overhead_column(arm: str) -> str:
    """The column holding arm ``arm``'s decoder overhead in a frame of per-round measurements
    (`experiments.interleaved_timing`'s ``round_inputs``)."""
    if not isinstance(arm, str) or not arm:
        raise ValueError(f"arm must be a non-empty name, got {arm!r}")
    return f"decoder overhead: {arm}"


def round_decoder_overhead(vocab_size: int, arms: Mapping[str, tuple | None], temperature: float = 1.0,
                           dtype: torch.dtype | str = "bfloat16", tokens: int = 32, repeats: int = 1,
                           device: torch.device | str = "cpu") -> dict[str, float]:
    """:func:`decoder_overhead` of every arm as {`overhead_column(arm)`: seconds}, short (one run of ``tokens``
    tokens per arm by default, no progress bar): for `experiments.interleaved_timing`'s ``round_inputs``, beside
    `profiling.round_profile`, so the overhead is measured again in the same spells of the machine as the
    timings it predicts."""
    measured = decoder_overhead(vocab_size, arms, temperature, dtype=dtype, tokens=tokens, repeats=repeats,
                                progress=False, device=device)
    return {overhead_column(arm): seconds for arm, seconds in measured.items()}
