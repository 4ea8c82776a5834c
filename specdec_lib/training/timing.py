"""One-token forward times of a draft and its target: a forward of one token after a KV cache of
``prefix_len`` random tokens, each call on a fresh copy of that cache made outside the timed region, the
calls of several models alternating so that load from other processes hits them alike, the first two
rounds dropped as warm-up, CUDA synchronised around each call (`interleaved_seconds`). `forward_time_ms`
and `measure_forward_times` are the independent draft's record; the feature draft times its own call."""

from __future__ import annotations

import copy
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..models.kv_cache import cache_of, with_cache

__all__ = ["WARMUP", "random_tokens", "TimedForward", "one_token_forward", "interleaved_seconds",
           "forward_time_ms", "measure_forward_times"]

WARMUP = 2
"""Rounds run before the timed ones and dropped."""


def random_tokens(prefix_len: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random prefix [1, prefix_len] and a random next token [1, 1] below ``vocab`` (CPU, from ``seed``)."""
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, vocab, (1, prefix_len), generator=gen)
    token = torch.randint(0, vocab, (1, 1), generator=gen)
    return prefix, token


@dataclass(frozen=True)
class TimedForward:
    """A timed call: ``run`` (the forward) takes a fresh deep copy of ``base_cache`` (the prefix's KV cache)."""

    base_cache: Any
    run: Callable[[Any], Any]


def one_token_forward(model, prefix: torch.Tensor, token: torch.Tensor) -> TimedForward:
    """The forward of ``token`` after ``prefix`` (both on the model's device) for an HF causal LM; runs the
    prefix once, here."""
    base = cache_of(model(input_ids=prefix, use_cache=True))
    return TimedForward(base, lambda cache: model(input_ids=token, use_cache=True, **with_cache(model, cache)))


def interleaved_seconds(calls: Sequence[TimedForward], repeats: int, device: torch.device) -> list[list[float]]:
    """Wall seconds of ``repeats`` runs of each call, in ``WARMUP + repeats`` rounds that run every call in
    order (the warm-up rounds dropped)."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats + WARMUP):
        for k, call in enumerate(calls):
            cache = copy.deepcopy(call.base_cache)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            call.run(cache)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[k].append(time.perf_counter() - t0)
    return [t[WARMUP:] for t in times]


@torch.no_grad()
def forward_time_ms(model, prefix_len: int = 100, repeats: int = 21, vocab: int | None = None,
                    seed: int = 0, reduce: Callable = statistics.median) -> float:
    """Median (or ``reduce``) wall time (ms) of ``model``'s one-token forward after a prefix KV cache of
    ``prefix_len`` random tokens below ``vocab`` (default: the model's vocabulary)."""
    device = model.get_input_embeddings().weight.device
    prefix, token = random_tokens(prefix_len, vocab or int(model.config.vocab_size), seed)
    call = one_token_forward(model, prefix.to(device), token.to(device))
    return 1000.0 * reduce(interleaved_seconds([call], repeats, device)[0])


def measure_forward_times(draft, target, prefix_len: int = 100, repeats: int = 21, rounds: int = 3) -> dict:
    """Draft and target one-token forward medians (ms), measured in alternating rounds so that load from
    other processes hits both alike; ``ratio`` = draft / target."""
    d, t, dmin, tmin = [], [], [], []
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for r in range(rounds):
        d.append(forward_time_ms(draft, prefix_len, repeats, seed=r))
        t.append(forward_time_ms(target, prefix_len, repeats, seed=r))
        dmin.append(forward_time_ms(draft, prefix_len, repeats, seed=r, reduce=min))
        tmin.append(forward_time_ms(target, prefix_len, repeats, seed=r, reduce=min))
    draft_ms, target_ms = statistics.median(d), statistics.median(t)
    return {"draft_ms": draft_ms, "target_ms": target_ms, "ratio": draft_ms / target_ms,
            "draft_min_ms": min(dmin), "target_min_ms": min(tmin), "ratio_of_minima": min(dmin) / min(tmin),
            "prefix_len": prefix_len, "repeats": repeats * rounds,
            "threads": torch.get_num_threads(), "device": str(draft.get_input_embeddings().weight.device),
            "load_average_1min": load_before,
            "note": "medians (and minima) of one-token forwards; on a shared CPU the load inflates the draft's "
                    "fixed per-call overhead more than the target's"}
