"""Forward-time profiles t(n): measuring them, the shapes they are measured for, their JSON files.

* :func:`profile` times a causal LM scoring n new tokens on top of a prefix KV cache in one forward with a
  tree attention mask (docs/ARCHITECTURE.md "Known facts": a float mask [1, 1, n, L + n], 0 where a node may
  attend and -inf elsewhere, ``position_ids = L + depth`` and the prefix's KV cache). Warm-up
  runs, device synchronisation, medians. The same function gives the draft's cost per tree level (a
  one-token forward, ``sizes=[1]``).
* :func:`shape_only_model` builds a randomly initialised ``LlamaForCausalLM`` with the published shape of a
  named model (no weights downloaded) so that a device can be profiled for a model it cannot load.
* :func:`save_profile` / :func:`load_profile`: JSON under ``data/hardware/`` with the device, dtype, library
  versions, host and date.
* :func:`main`: ``python -m specdec_lib.hardware``, profiles saved as JSON.

Benchmarks never assert times; the tests check the arithmetic and the JSON round trip only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import socket
import statistics
import time
from pathlib import Path
from typing import Mapping, Sequence

import torch

from ..models import load_model
from ..models.cpu_linear import SmallBatchLinear, use_small_batch_linear
from ..models.kv_cache import cache_of, with_cache
from ..reporting.results import cpu_features
from .cost_model import _times, profile_column

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "hardware"

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
    # lazy: transformers takes seconds to import; only model loading needs it
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
    # lazy: transformers takes seconds to import; only model loading needs it
    from transformers import LlamaForCausalLM

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
    prefix_len + depth`` and the prefix's KV cache, computing all n logit rows, as one
    verification pass does (Sequoia Sec. 3.3.1 / App. docs/methods/sequoia.md §5.4; the authors' profiler uses a
    128-token prefix). The cache is cropped back to the prefix after every call. ``warmup`` untimed rounds,
    then ``repeats`` timed ones, a round timing every size once in turn (interleaved), each call bracketed by
    device synchronisation (``torch.cuda.synchronize`` on CUDA); the summary is the median. The draft's cost
    per tree level is ``profile(draft, [1])``.

    ``threads`` sets ``torch.set_num_threads`` for the measurement (restored afterwards). On a CPU shared
    with other jobs use 1: with more intra-op threads than free cores, OpenMP barriers make forwards up
    to 10x slower (measured here: 1.9 s vs 0.16 s for n=16 on a 4-layer SmolLM2 shape under load 7).

    ``model``: a transformers causal LM module, or an object with ``.model`` (``LanguageModel``).
    Returns a JSON-ready dict: ``sizes``, ``median_s``, ``mean_s``, ``min_s``, ``times_s`` (all timed runs),
    the settings, and the environment (device, dtype, layers, torch / transformers versions, host, date).
    """
    # lazy: transformers takes seconds to import; only model loading needs it
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
    try:
        results = _time_sizes(module, prefix, sizes, gen, warmup, repeats)
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
        **cpu_features(),  # the CPU model and its bfloat16 matrix unit: wall clock in bf16 hangs on it
        "torch_threads": used_threads,
        "load_average_1m": [load_before, _load_average()],   # before / after: a busy shared host is slower
    }


@torch.inference_mode()
def _time_sizes(module: torch.nn.Module, prefix: torch.Tensor, sizes: list[int], gen: torch.Generator,
                warmup: int, repeats: int) -> dict[str, list]:
    """The timings of `profile`: ``warmup`` untimed then ``repeats`` timed rounds, each round one forward of
    every size in turn (n random tokens over the prefix's KV cache, cropped back after each), with each size's
    median, mean and minimum. Sizes are interleaved, not timed one after the other, so a slow spell of a shared
    machine falls on every size alike instead of bending t(n)/t(1) (timed one size after the other, a slow
    spell can make t(4) equal t(8) and move the optimizer's choice)."""
    param = next(module.parameters())
    device, dtype = param.device, param.dtype
    vocab = int(module.config.vocab_size)
    prefix_len = prefix.shape[1]
    cache = cache_of(module(prefix, use_cache=True))
    inputs = []
    for n in sizes:
        ids = torch.randint(0, vocab, (1, n), generator=gen).to(device)
        inputs.append((ids, _chain_mask(prefix_len, n, dtype, device),
                       torch.arange(prefix_len, prefix_len + n, device=device)[None]))
    times: list[list[float]] = [[] for _ in sizes]
    for i in range(warmup + repeats):
        for k, (ids, mask, positions) in enumerate(inputs):
            _sync(device)
            start = time.perf_counter()
            module(ids, attention_mask=mask, position_ids=positions, use_cache=True, **with_cache(module, cache))
            _sync(device)
            elapsed = time.perf_counter() - start
            _truncate_cache(cache, prefix_len)
            if i >= warmup:
                times[k].append(elapsed)
    return {"sizes": list(sizes), "median_s": [statistics.median(t) for t in times],
            "mean_s": [statistics.fmean(t) for t in times], "min_s": [min(t) for t in times], "times_s": times}


def _linear_kernel(module: torch.nn.Module) -> str:
    """Which linear forward the profiled module runs (`models.cpu_linear`)."""
    small = any(isinstance(m, SmallBatchLinear) for m in module.modules())
    return "small-batch (specdec_lib.models.cpu_linear)" if small else "torch F.linear"


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


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


def round_profile(models: Mapping[str, object], sizes: Mapping[str, Sequence[int]], prefix_len: int = 128,
                  repeats: int = 3, warmup: int = 1) -> dict[str, float]:
    """A short profile of several models, flattened to {``profile_column(name, n)``: median seconds}: for
    `experiments.interleaved_timing`'s ``round_inputs``, so the profile a prediction uses is measured again
    before every prompt's round, in the same spells of the machine as the timings it predicts (read back with
    `cost_model.profile_from_columns`). ``models``: name -> model; ``sizes``: name -> sizes to time."""
    if not models or set(models) != set(sizes):
        raise ValueError(f"models and sizes must name the same models, got {sorted(models)} and {sorted(sizes)}")
    out = {}
    for name, model in models.items():
        prof = profile(model, sizes[name], prefix_len=prefix_len, repeats=repeats, warmup=warmup, label=name)
        out.update({profile_column(name, n): t for n, t in zip(prof["sizes"], prof["median_s"])})
    return out


# ----- command line -------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specdec_lib.hardware SHAPE [SHAPE ...]``: profile shape-only models (``SHAPES``) or
    loadable models (``--model``) and save each profile under ``data/hardware/``.

    Example (an H100, paper-scale targets and the 68M draft in bf16):
    ``python -m specdec_lib.hardware llama-2-7b llama-2-13b jackfram-68m --device cuda --dtype bfloat16
    --sizes 1,2,4,...,1024``. Sizes are a comma list; ``a,b,...,c`` with ``...`` doubles from b up to c.
    """
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
