"""Forward-time profiles t(n) and Sequoia's hardware-aware optimizer (Sequoia Sec. 3.3, Eq. 1).

* :func:`profile` times a causal LM scoring n new tokens on top of a prefix KV cache in one forward with a
  tree attention mask (ARCHITECTURE.md "Known facts": a float mask [1, 1, n, L + n], 0 where a node may
  attend and -inf elsewhere, ``position_ids = L + depth`` and the prefix's ``past_key_values``). Warm-up
  runs, device synchronisation, medians. The same function gives the draft's cost per tree level (a
  one-token forward, ``sizes=[1]``).
* :func:`shape_only_model` builds a randomly initialised ``LlamaForCausalLM`` with the published shape of a
  named model (no weights downloaded) so that a device can be profiled for a model it cannot load.
* :func:`save_profile` / :func:`load_profile`: JSON under ``data/hardware/`` with the device, dtype, library
  versions, host and date.
* :func:`optimize_tree` maximises Speedup(n, d) = G(n, d) / (t(n) + d c) over the profiled sizes and depths
  (G from Sequoia's DP in :mod:`specdec_lib.theory`); :func:`optimize_chain` picks the best draft length of
  a chain for the token / block / ASpS verifiers from a measured acceptance profile.

Benchmarks never assert times; the tests check the arithmetic and the JSON round trip only.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import torch

from . import theory

__all__ = [
    "SHAPES", "DATA_DIR", "shape_config", "shape_only_model", "profile", "profile_times", "level_cost",
    "normalised_times",
    "save_profile", "load_profile", "TreePlan", "optimize_tree", "ChainPlan", "optimize_chain",
    "SEQUOIA_DEMO_PROFILE", "SEQUOIA_DEMO_DRAFT_COST",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "hardware"

# Published shapes (the models' config.json on the Hugging Face Hub / the GGUF metadata); no weights.
# hidden = hidden_size, layers = num_hidden_layers, heads / kv_heads = attention heads / key-value heads,
# intermediate = MLP width, vocab = vocabulary size, context = max_position_embeddings.
SHAPES: dict[str, dict] = {
    "llama-2-7b": dict(hidden=4096, layers=32, heads=32, kv_heads=32, intermediate=11008, vocab=32000,
                       context=4096, rope_theta=10000.0, rms_eps=1e-5, tie=False,
                       source="meta-llama/Llama-2-7b-hf"),
    "llama-2-13b": dict(hidden=5120, layers=40, heads=40, kv_heads=40, intermediate=13824, vocab=32000,
                        context=4096, rope_theta=10000.0, rms_eps=1e-5, tie=False,
                        source="meta-llama/Llama-2-13b-hf"),
    "llama-2-70b": dict(hidden=8192, layers=80, heads=64, kv_heads=8, intermediate=28672, vocab=32000,
                        context=4096, rope_theta=10000.0, rms_eps=1e-5, tie=False,
                        source="meta-llama/Llama-2-70b-hf"),
    "vicuna-33b": dict(hidden=6656, layers=60, heads=52, kv_heads=52, intermediate=17920, vocab=32000,
                       context=2048, rope_theta=10000.0, rms_eps=1e-6, tie=False,
                       source="lmsys/vicuna-33b-v1.3 (LLaMA-33B shape)"),
    "sheared-llama-1.3b": dict(hidden=2048, layers=24, heads=16, kv_heads=16, intermediate=5504, vocab=32000,
                               context=4096, rope_theta=10000.0, rms_eps=1e-5, tie=False,
                               source="princeton-nlp/Sheared-LLaMA-1.3B"),
    "jackfram-160m": dict(hidden=768, layers=12, heads=12, kv_heads=12, intermediate=3072, vocab=32000,
                          context=2048, rope_theta=10000.0, rms_eps=1e-6, tie=False,
                          source="JackFram/llama-160m"),
    "jackfram-68m": dict(hidden=768, layers=2, heads=12, kv_heads=12, intermediate=3072, vocab=32000,
                         context=2048, rope_theta=10000.0, rms_eps=1e-6, tie=False,
                         source="JackFram/llama-68m"),
    "smollm2-135m": dict(hidden=576, layers=30, heads=9, kv_heads=3, intermediate=1536, vocab=49152,
                         context=8192, rope_theta=100000.0, rms_eps=1e-5, tie=True,
                         source="HuggingFaceTB/SmolLM2-135M(-Instruct); checked against the packaged GGUF"),
}
_ALIASES = {
    "llama2-7b": "llama-2-7b", "meta-llama/llama-2-7b-hf": "llama-2-7b",
    "llama2-13b": "llama-2-13b", "meta-llama/llama-2-13b-hf": "llama-2-13b",
    "llama2-70b": "llama-2-70b", "meta-llama/llama-2-70b-hf": "llama-2-70b",
    "vicuna-33b-v1.3": "vicuna-33b", "lmsys/vicuna-33b-v1.3": "vicuna-33b",
    "sl1.3b": "sheared-llama-1.3b", "princeton-nlp/sheared-llama-1.3b": "sheared-llama-1.3b",
    "jf68m": "jackfram-68m", "jackfram/llama-68m": "jackfram-68m", "llama-68m": "jackfram-68m",
    "jf160m": "jackfram-160m", "jackfram/llama-160m": "jackfram-160m", "llama-160m": "jackfram-160m",
    "smollm2-135m-instruct": "smollm2-135m", "huggingfacetb/smollm2-135m": "smollm2-135m",
    "huggingfacetb/smollm2-135m-instruct": "smollm2-135m",
}


def _shape_key(name: str) -> str:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; known shapes: {sorted(SHAPES)}")
    return key


def shape_config(name: str, num_layers: int | None = None):
    """A ``LlamaConfig`` with the published shape of ``name`` (see ``SHAPES``), optionally fewer layers."""
    from transformers import LlamaConfig

    key = _shape_key(name)
    s = SHAPES[key]
    layers = s["layers"]
    if num_layers is not None:
        if int(num_layers) != num_layers or not 1 <= int(num_layers) <= s["layers"]:
            raise ValueError(f"num_layers must be an integer in [1, {s['layers']}] for {key}, got {num_layers}")
        layers = int(num_layers)
    return LlamaConfig(
        hidden_size=s["hidden"], num_hidden_layers=layers, num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"], intermediate_size=s["intermediate"], vocab_size=s["vocab"],
        max_position_embeddings=s["context"], rope_theta=s["rope_theta"], rms_norm_eps=s["rms_eps"],
        tie_word_embeddings=s["tie"], hidden_act="silu", initializer_range=0.02,
    )


def shape_only_model(name: str, dtype: torch.dtype | str = torch.float32, device: str | torch.device = "cpu",
                     num_layers: int | None = None, seed: int = 0):
    """A randomly initialised ``LlamaForCausalLM`` with the shape of ``name``; no weights are downloaded.

    Shapes: Llama-2-7B, Llama-2-13B, Llama-2-70B, Vicuna-33B, Sheared-LLaMA-1.3B, JackFram-68M/160M and
    SmolLM2-135M (``SHAPES``; names are case-insensitive). Forward time depends on the shape, not on the
    values, so such a model profiles a device for a model it cannot hold or download. ``num_layers`` caps
    the depth so that a big shape fits a small machine: the result is the time of THAT truncated model
    (``profile`` records ``num_layers`` and ``full_num_layers``); nothing here rescales it by layers.
    The model is built directly on ``device`` in ``dtype`` and put in eval mode; on a CPU in float32 its
    linear layers are `models.cpu_linear.SmallBatchLinear`, as in every `LanguageModel` decoding uses.
    """
    from transformers import LlamaForCausalLM

    from .models.cpu_linear import use_small_batch_linear

    if isinstance(dtype, str):
        dtype = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
                 "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}.get(dtype.lower())
        if dtype is None:
            raise ValueError("dtype must be float32, float16 or bfloat16")
    config = shape_config(name, num_layers)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model = model.to(device=device, dtype=dtype).eval()
    model.shape_name = _shape_key(name)
    if model.device.type == "cpu" and dtype == torch.float32:
        use_small_batch_linear(model)
    return model


# ----- profiling ----------------------------------------------------------------------------------

def _module(model) -> torch.nn.Module:
    """The HF module: ``model`` itself, or ``model.model`` for a wrapper such as ``LanguageModel``."""
    if isinstance(model, torch.nn.Module):
        return model
    inner = getattr(model, "model", None)
    if isinstance(inner, torch.nn.Module):
        return inner
    raise ValueError("model must be a torch causal LM module or an object whose .model is one")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type}: {platform.processor() or platform.machine()}"


def _truncate_cache(cache, length: int) -> None:
    """Drop everything after the first ``length`` positions of a transformers cache."""
    extra = cache.get_seq_length() - length
    if extra <= 0:
        return
    try:
        cache.crop(-extra)            # transformers >= 5: negative = number of tokens to remove
    except ValueError:
        cache.crop(length)            # older API: the length to keep
    if cache.get_seq_length() != length:
        raise RuntimeError("could not crop the KV cache back to the prefix length")


def _chain_mask(prefix_len: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Float tree-attention mask [1, 1, n, L + n] of a chain (node i sees the prefix and nodes 0..i)."""
    mask = torch.full((1, 1, n, prefix_len + n), float("-inf"), dtype=dtype, device=device)
    mask[..., :prefix_len] = 0
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))
    mask[0, 0, :, prefix_len:] = torch.where(allowed, torch.zeros((), dtype=dtype, device=device),
                                             torch.full((), float("-inf"), dtype=dtype, device=device))
    return mask


def profile(model, sizes: Sequence[int], prefix_len: int = 128, repeats: int = 20, warmup: int = 3,
            seed: int = 0, label: str | None = None, threads: int | None = None) -> dict:
    """Measure the forward time t(n) of scoring n new tokens on top of a prefix KV cache.

    For each n in ``sizes``: one forward over n random tokens with a float tree-attention mask
    [1, 1, n, prefix_len + n] (a chain; only the mask's shape matters for timing), ``position_ids =
    prefix_len + depth`` and the prefix's ``past_key_values``, computing all n logit rows, as one
    verification pass does (Sequoia Sec. 3.3.1 / App. specs/sequoia.md §5.4; the authors' profiler uses a
    128-token prefix). The cache is cropped back to the prefix after every call. ``warmup`` untimed calls,
    then ``repeats`` timed ones, each bracketed by device synchronisation (``torch.cuda.synchronize`` on
    CUDA); the summary is the median. The draft's cost per tree level is ``profile(draft, [1])``.

    ``threads`` sets ``torch.set_num_threads`` for the measurement (restored afterwards). On a CPU shared
    with other jobs use 1: with more intra-op threads than free cores, OpenMP barriers make forwards up
    to 10x slower (measured here: 1.9 s vs 0.16 s for n=16 on a 4-layer SmolLM2 shape under load 7).

    ``model``: a transformers causal LM module, or an object with ``.model`` (``LanguageModel``).
    Returns a JSON-ready dict: ``sizes``, ``median_s``, ``mean_s``, ``min_s``, ``times_s`` (all timed runs),
    the settings, and the environment (device, dtype, layers, torch / transformers versions, host, date).
    """
    import transformers

    module = _module(model)
    sizes = [int(n) for n in sizes]
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"sizes must be a non-empty list of positive integers, got {sizes}")
    if prefix_len < 1 or repeats < 1 or warmup < 0:
        raise ValueError("prefix_len and repeats must be >= 1 and warmup >= 0")
    config = module.config
    max_pos = getattr(config, "max_position_embeddings", None)
    if max_pos is not None and prefix_len + max(sizes) > max_pos:
        raise ValueError(f"prefix_len + max(sizes) = {prefix_len + max(sizes)} exceeds the model's context "
                         f"{max_pos}")
    param = next(module.parameters())
    device, dtype = param.device, param.dtype
    vocab = int(config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, vocab, (1, prefix_len), generator=gen).to(device)
    was_training = module.training
    module.eval()
    previous_threads = torch.get_num_threads()
    if threads is not None:
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(int(threads))
    load_before = _load_average()
    results = {"sizes": [], "median_s": [], "mean_s": [], "min_s": [], "times_s": []}
    try:
        with torch.inference_mode():
            cache = module(prefix, use_cache=True).past_key_values
            for n in sizes:
                ids = torch.randint(0, vocab, (1, n), generator=gen).to(device)
                mask = _chain_mask(prefix_len, n, dtype, device)
                positions = torch.arange(prefix_len, prefix_len + n, device=device)[None]
                times = []
                for i in range(warmup + repeats):
                    _sync(device)
                    start = time.perf_counter()
                    module(ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                           use_cache=True)
                    _sync(device)
                    elapsed = time.perf_counter() - start
                    _truncate_cache(cache, prefix_len)
                    if i >= warmup:
                        times.append(elapsed)
                results["sizes"].append(n)
                results["median_s"].append(statistics.median(times))
                results["mean_s"].append(statistics.fmean(times))
                results["min_s"].append(min(times))
                results["times_s"].append(times)
        used_threads = torch.get_num_threads()
    finally:
        module.train(was_training)
        torch.set_num_threads(previous_threads)
    shape = getattr(module, "shape_name", None)
    full_layers = SHAPES[shape]["layers"] if shape in SHAPES else int(config.num_hidden_layers)
    name = label or shape or getattr(config, "_name_or_path", "") or type(module).__name__
    return {
        "kind": "forward_profile",
        "model": name,
        "shape_only": shape is not None,
        "num_layers": int(config.num_hidden_layers),
        "full_num_layers": full_layers,
        "prefix_len": prefix_len,
        "mask": "chain tree-attention mask (float, 0 / -inf)",
        "linear_kernel": _linear_kernel(module),
        "warmup": warmup,
        "repeats": repeats,
        **results,
        "device": _device_name(device),
        "device_type": device.type,
        "dtype": str(dtype).replace("torch.", ""),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "host": socket.gethostname(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "torch_threads": used_threads,
        "load_average_1m": [load_before, _load_average()],   # before / after: a busy shared host is slower
    }


def _linear_kernel(module: torch.nn.Module) -> str:
    """Which linear forward the profiled module runs (`models.cpu_linear`)."""
    from .models.cpu_linear import SmallBatchLinear

    small = any(isinstance(m, SmallBatchLinear) for m in module.modules())
    return "small-batch (specdec_lib.models.cpu_linear)" if small else "torch F.linear"


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _times(target_profile) -> dict[int, float]:
    """{n: seconds} from a profile dict (median_s) or a plain mapping {n: time}."""
    if isinstance(target_profile, Mapping) and "sizes" in target_profile:
        key = "median_s" if "median_s" in target_profile else None
        if key is None:
            raise ValueError("profile dict has 'sizes' but no 'median_s'")
        sizes, values = target_profile["sizes"], target_profile[key]
        if len(sizes) != len(values):
            raise ValueError("profile 'sizes' and 'median_s' differ in length")
        out = {int(n): float(t) for n, t in zip(sizes, values)}
    elif isinstance(target_profile, Mapping):
        out = {int(n): float(t) for n, t in target_profile.items()}
    else:
        raise ValueError("target_profile must be a profile dict (from profile/load_profile) or {size: time}")
    if not out:
        raise ValueError("the profile has no sizes")
    for n, t in out.items():
        if n < 1 or not math.isfinite(t) or t <= 0:
            raise ValueError(f"bad profile entry size {n}: time {t} (sizes >= 1, times finite and > 0)")
    return dict(sorted(out.items()))


def profile_times(target_profile) -> dict[int, float]:
    """{size: median seconds} of a profile dict, or a validated copy of a {size: time} mapping."""
    return _times(target_profile)


def level_cost(draft_profile, width: int = 1) -> float:
    """The draft's cost of one tree level of ``width`` nodes, from its profile (median seconds)."""
    times = _times(draft_profile)
    if width not in times:
        raise ValueError(f"width {width} was not profiled; profiled sizes: {sorted(times)}")
    return times[width]


def normalised_times(target_profile) -> dict[int, float]:
    """t(n) = T(n) / T(1), Sequoia's normalisation (needs size 1 in the profile)."""
    times = _times(target_profile)
    if 1 not in times:
        raise ValueError("the profile needs size 1 to normalise t(n) by t(1)")
    return {n: t / times[1] for n, t in times.items()}


# ----- JSON -----------------------------------------------------------------------------------------

_REQUIRED = ("sizes", "median_s", "device", "dtype", "torch", "transformers", "host", "date")


def save_profile(profile_dict: Mapping, path: str | Path | None = None) -> Path:
    """Write a profile as JSON; ``path`` defaults to ``data/hardware/<device>_<model>.json``.

    A bare file name (no directory) is placed under ``data/hardware/``.
    """
    missing = [k for k in _REQUIRED if k not in profile_dict]
    if missing:
        raise ValueError(f"profile is missing {missing}; build it with hardware.profile()")
    if path is None:
        slug = f"{profile_dict.get('device_type', 'device')}_{profile_dict.get('model', 'model')}"
        path = DATA_DIR / (slug.lower().replace("/", "-").replace(" ", "-") + ".json")
    path = Path(path)
    if path.parent == Path("."):
        path = DATA_DIR / path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(profile_dict), indent=1) + "\n")
    return path


def load_profile(path: str | Path) -> dict:
    """Read a profile written by :func:`save_profile` (a bare name is looked up in ``data/hardware/``)."""
    path = Path(path)
    if not path.exists() and path.parent == Path("."):
        path = DATA_DIR / path
    if not path.exists():
        raise ValueError(f"no profile at {path}")
    data = json.loads(path.read_text())
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ValueError(f"{path} is not a hardware profile: missing {missing}")
    _times(data)
    return data


# ----- the optimizers --------------------------------------------------------------------------------

#: Sequoia's ``demo-config.json`` (specs/sequoia.md §3.4): target times for sizes 1..32 and the draft time,
#: in the same (arbitrary) unit. With the REPO acceptance vector and depth <= 10 the optimum is (4, 4).
SEQUOIA_DEMO_PROFILE = {1: 10.0, 2: 10.0, 4: 10.0, 8: 12.0, 16: 14.0, 32: 18.0}
SEQUOIA_DEMO_DRAFT_COST = 0.3


@dataclass(frozen=True)
class TreePlan:
    """Result of :func:`optimize_tree`: the (size, depth) maximising Speedup(n, d) and its tree.

    ``speedup`` = G / ((t(n) + d c + overhead) / t(1)); ``time_per_token`` = (t(n) + d c + overhead) / G in
    the profile's unit; ``candidates`` = every (size, depth, G, speedup) scored, for plots.
    """
    size: int
    depth: int
    tree: list[int]
    expected_tokens: float
    speedup: float
    time_per_token: float
    candidates: list[tuple[int, int, float, float]] = field(repr=False)


def _draft_cost(draft_cost) -> float:
    if isinstance(draft_cost, Mapping):
        return level_cost(draft_cost, 1)
    value = float(draft_cost)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"draft_cost must be finite and >= 0, got {draft_cost}")
    return value


def optimize_tree(acceptance_vector, target_profile, draft_cost, max_size: int, max_depth: int,
                  step_overhead: float = 0.0) -> TreePlan:
    """Sequoia's hardware-aware optimizer (Sec. 3.3, Eq. 1; specs/sequoia.md §2.11).

    Maximises Speedup(n, d) = G(n, d) / (t(n) + d c) over the profiled sizes n <= ``max_size`` and depths
    d <= ``max_depth`` (root level counted: one draft pass per level), where G(n, d) is the bounded-depth
    DP value (:func:`specdec_lib.theory.sequoia_table`), t(n) the target time normalised by t(1) and c the
    draft's per-level time normalised by t(1).

    ``target_profile``: a profile dict (:func:`profile` / :func:`load_profile`, medians used) or a mapping
    {size: time}; it must contain size 1. ``draft_cost``: the draft's time per level in the same unit as
    the target times (seconds for a profile), or the draft's profile dict (its size-1 median).
    ``step_overhead`` (same unit, default 0) adds a per-step cost the paper does not model (sampling,
    residuals, masks; specs/sequoia.md §2.11). Ties keep the smaller size, then the smaller depth.
    """
    times = _times(target_profile)
    if 1 not in times:
        raise ValueError("the target profile needs size 1 (t(n) is normalised by t(1))")
    c = _draft_cost(draft_cost)
    max_size = int(max_size)
    max_depth = int(max_depth)
    if max_size < 1 or max_depth < 1:
        raise ValueError("max_size and max_depth must be >= 1")
    if step_overhead < 0:
        raise ValueError("step_overhead must be >= 0")
    sizes = [n for n in times if n <= max_size]
    table = theory.sequoia_table(acceptance_vector, max(sizes), max_depth)
    base = times[1]
    best = None
    candidates = []
    for n in sizes:
        for d in range(1, min(max_depth, n) + 1):
            g = table.expected_tokens(n, d)
            if not math.isfinite(g):
                continue
            cost = times[n] + d * c + step_overhead
            speedup = g / (cost / base)
            candidates.append((n, d, g, speedup))
            if best is None or speedup > best[3] + 1e-12:
                best = (n, d, g, speedup, cost / g)
    n, d, g, speedup, per_token = best
    return TreePlan(size=n, depth=d, tree=table.tree(n, d), expected_tokens=g, speedup=speedup,
                    time_per_token=per_token, candidates=candidates)


@dataclass(frozen=True)
class ChainPlan:
    """Result of :func:`optimize_chain`: the best draft length ``gamma`` for one chain verifier.

    ``interpolated`` is True when t(gamma + 1) was read off a piecewise-linear interpolation of the profile
    (the size was not measured). ``candidates`` = every (gamma, expected tokens, speedup) scored.
    """
    verifier: str
    gamma: int
    expected_tokens: float
    speedup: float
    time_per_token: float
    interpolated: bool
    candidates: list[tuple[int, float, float]] = field(repr=False)


CHAIN_VERIFIERS = ("token", "block", "asps")


def _interpolate(times: dict[int, float], n: int) -> tuple[float, bool] | None:
    if n in times:
        return times[n], False
    sizes = sorted(times)
    if n < sizes[0] or n > sizes[-1]:
        return None
    hi = next(s for s in sizes if s > n)
    lo = max(s for s in sizes if s < n)
    w = (n - lo) / (hi - lo)
    return times[lo] * (1 - w) + times[hi] * w, True


def optimize_chain(acceptance_profile, target_profile, draft_cost, verifier: str = "token",
                   max_length: int = 16, *, interpolate: bool = True, extra_draft_passes: int = 0,
                   step_overhead: float = 0.0) -> ChainPlan:
    """Best draft length gamma of a chain for the ``token``, ``block`` or ``asps`` verifier.

    Speedup(gamma) = E[tokens | gamma] / ((t(gamma + 1) + (gamma + extra_draft_passes) c + overhead) / t(1)):
    the target scores the root plus gamma drafts in one pass, the draft runs gamma one-token passes
    (Leviathan et al.'s accounting, specs/sequoia.md §2.10; ``extra_draft_passes=1`` charges Sequoia's
    d = gamma + 1 passes instead, as :func:`optimize_tree` does).

    ``acceptance_profile`` says how many tokens a step emits, bonus / correction token included:

    * a mapping {gamma: expected emitted tokens per step} measured for this verifier (e.g. the mean of
      ``len(step.emitted)`` over a decoding run with ``shape=f"chain:{gamma}"``), or
    * a mapping {verifier name: {gamma: expected tokens}} from which ``verifier``'s entry is used, or
    * a float alpha in [0, 1] (i.i.d. per-token acceptance), token verifier only: Leviathan's closed form
      (1 - alpha^(gamma+1)) / (1 - alpha). Block and ASpS verification have no closed form in alpha alone
      (their gain depends on the distributions), so they need measured values.

    t comes from ``target_profile`` (profile dict or {size: time}, must contain size 1); sizes not
    profiled are linearly interpolated when ``interpolate`` (reported in ``ChainPlan.interpolated``) and
    skipped otherwise. ``draft_cost`` as in :func:`optimize_tree`.
    """
    if verifier not in CHAIN_VERIFIERS:
        raise ValueError(f"unknown chain verifier {verifier!r}; expected one of {CHAIN_VERIFIERS}")
    times = _times(target_profile)
    if 1 not in times:
        raise ValueError("the target profile needs size 1 (t(n) is normalised by t(1))")
    c = _draft_cost(draft_cost)
    max_length = int(max_length)
    if max_length < 1:
        raise ValueError("max_length must be >= 1")
    if isinstance(acceptance_profile, Mapping):
        table = acceptance_profile
        if verifier in table or any(isinstance(v, Mapping) for v in table.values()):
            if verifier not in table:
                raise ValueError(f"acceptance_profile has no entry for verifier {verifier!r}")
            table = table[verifier]
        expected = {int(g): float(e) for g, e in table.items()}
        for g, e in expected.items():
            if g < 0 or not 1.0 <= e <= g + 1 + 1e-9:
                raise ValueError(f"expected tokens {e} for gamma={g} must lie in [1, gamma + 1]")
    else:
        if verifier != "token":
            raise ValueError(f"verifier {verifier!r} needs measured expected tokens per gamma (a mapping); a "
                             "scalar alpha only determines the token verifier (Leviathan's closed form)")
        alpha = float(acceptance_profile)
        expected = {g: theory.chain_expected_tokens(alpha, g) for g in range(1, max_length + 1)}
    base = times[1]
    candidates = []
    best = None
    for gamma in sorted(g for g in expected if 1 <= g <= max_length):
        t = _interpolate(times, gamma + 1) if interpolate else ((times[gamma + 1], False)
                                                                if gamma + 1 in times else None)
        if t is None:
            continue
        t_value, interpolated = t
        cost = t_value + (gamma + extra_draft_passes) * c + step_overhead
        speedup = expected[gamma] / (cost / base)
        candidates.append((gamma, expected[gamma], speedup))
        if best is None or speedup > best[2] + 1e-12:
            best = (gamma, expected[gamma], speedup, cost / expected[gamma], interpolated)
    if best is None:
        raise ValueError("no draft length could be scored: the profile does not cover gamma + 1 for any "
                         "gamma in the acceptance profile (enable interpolate or profile more sizes)")
    gamma, e, speedup, per_token, interpolated = best
    return ChainPlan(verifier, gamma, e, speedup, per_token, interpolated, candidates)


# ----- command line -------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specdec_lib.hardware SHAPE [SHAPE ...]``: profile shape-only models (``SHAPES``) or
    loadable models (``--model``) and save each profile under ``data/hardware/``.

    Example (an H100, paper-scale targets and the 68M draft in bf16):
    ``python -m specdec_lib.hardware llama-2-7b llama-2-13b jackfram-68m --device cuda --dtype bfloat16
    --sizes 1,2,4,...,1024``. Sizes are a comma list; ``a,b,...,c`` with ``...`` doubles from b up to c.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m specdec_lib.hardware",
                                 description="Measure forward-time profiles t(n) and save them as JSON.")
    ap.add_argument("shapes", nargs="*", help=f"shape-only models: {', '.join(sorted(SHAPES))}")
    ap.add_argument("--model", action="append", default=[], help="a loadable model (specdec_lib.models.load_model)")
    ap.add_argument("--sizes", default="1,2,4,...,128", help="n values, e.g. 1,2,4,...,1024")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--layers", type=int, default=None, help="cap the layers of shape-only models")
    ap.add_argument("--prefix-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads during the measurement")
    ap.add_argument("--out-dir", type=Path, default=DATA_DIR)
    args = ap.parse_args(argv)
    if not args.shapes and not args.model:
        ap.error("give at least one shape or --model")
    sizes = _parse_sizes(args.sizes)
    jobs = [(name, None) for name in args.shapes] + [(None, name) for name in args.model]
    for shape, model_name in jobs:
        if shape is not None:
            model = shape_only_model(shape, args.dtype, args.device, num_layers=args.layers)
            label = f"{_shape_key(shape)}-shape" + (f"-{args.layers}layers" if args.layers else "")
        else:
            from .models import load_model

            model = load_model(model_name, device=args.device, dtype=args.dtype)
            label = Path(str(model_name)).name
        prof = profile(model, sizes, prefix_len=args.prefix_len, repeats=args.repeats, warmup=args.warmup,
                       label=label, threads=args.threads)
        slug = f"{prof['device_type']}_{args.dtype}_{label}".lower().replace("/", "-").replace(" ", "-")
        path = save_profile(prof, Path(args.out_dir) / f"{slug}.json")
        print(f"{label}: " + ", ".join(f"t({n})={1000 * t:.2f} ms" for n, t in zip(prof["sizes"], prof["median_s"]))
              + f" -> {path}", flush=True)
        del model
        if str(args.device).startswith("cuda"):
            torch.cuda.empty_cache()
    return 0


def _parse_sizes(spec: str) -> list[int]:
    """``"1,2,4,...,64"`` -> [1, 2, 4, 8, 16, 32, 64]; a plain comma list is taken as it is."""
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if "..." in parts:
        at = parts.index("...")
        if at < 1 or at != len(parts) - 2:
            raise ValueError(f"bad sizes {spec!r}: '...' must stand between the doubling start and the end")
        head = [int(p) for p in parts[:at]]
        end = int(parts[-1])
        out = list(head)
        while out[-1] * 2 <= end:
            out.append(out[-1] * 2)
        if out[-1] != end:
            out.append(end)
        sizes = out
    else:
        sizes = [int(p) for p in parts]
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"sizes must be positive integers, got {spec!r}")
    return sorted(set(sizes))


if __name__ == "__main__":
    import sys

    sys.exit(main())
