"""`specdec bench`: wall-clock tokens per second of the offline pair on held-out prompts.

Methods (same target, same draft, same temperature / top-p, same prompts):

* ``autoregressive``: `decoding.autoregressive_generate` (KV cache, one target forward per token);
* ``hf_assisted``: HF ``generate(assistant_model=draft)`` (transformers' own assisted decoding with its
  dynamic draft length; with sampling it applies its processors to the draft too);
* ``hf_assisted/chain:<k>``: the same with exactly k draft tokens per step (constant schedule, no
  confidence stop): HF at our chain settings, for the like-for-like comparison;
* ``<verifier>/chain:<k>``: ours, token and block verification on chains of 2, 4 and 6 drafted tokens, and
  token verification on one drafted token (the best fixed length when acceptance is low; HF adapts its
  length, and its settings are recorded under ``hf_assisted_settings``);
* ``token/sequoia:<n>x<d>``: ours, a small Sequoia DP tree (sampling without replacement, the token
  verifier = Sequoia's), from the measured acceptance vector of the draft (``draft.json``, or measured
  here on training prompts with `measure_acceptance_vector` when there is none).
* ``<method>@<draft name>``: the same with another draft than ``--draft`` (e.g.
  ``token/chain:1@smollm2-135m-draft``); HF assisted generation always uses ``--hf-draft`` (an HF
  model: the independent draft; the feature draft needs the target's features, which HF cannot give).

Per method: the median over prompts of tokens/s (generated tokens / wall seconds, prefill included),
of tokens per target forward and of the draft / target / verify split, and the paired speedup (median
over prompts of tokens/s over autoregressive tokens/s on the same prompt). Every prompt runs all methods
in turn, so a slow drift of a shared machine's speed hits every method alike. Results, with machine, versions
and parameters, go to the run folder ``runs/bench/bench_<host>.json`` (git-ignored), or with ``--publish`` to
the published ``data/results/bench_<host>.json``. Every argument and the output path are checked before any
model loads, by the same checks for `run_benchmark` and ``specdec bench`` (`check_bench_arguments`): the
settings (`check_settings`), the methods (`check_methods`: trees within `decoding.MAX_TREE_NODES`, known
samplings, an acceptance vector only with a Sequoia method), the models they need by name
(`check_model_names`), the output (`destinations.check_output_file`: none inside ``reports/``, none inside
``data/results/`` without ``--publish``, no folder) and the run's size (`check_bench_size`: at most
`MAX_BENCH_TOKENS`). Timings synchronise CUDA.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from .. import __version__
from ..arguments import check_choice, check_count, check_probabilities, check_real, check_seed, check_temperature
from ..data import Prompt, load_prompts
from ..decoding import (autoregressive_generate, check_tree_shape, measured_acceptance_vector, resolve_shape,
                        speculative_generate)
from ..models import check_model_name, load_model
from ..models.hf import check_device, check_dtype
from ..progress import tqdm
from ..reporting.destinations import check_output_file
from ..reporting.results import atomic_write_text, machine
from ..sampling import process_logits
from ..shapes import is_sequoia
from ..theory import positional_acceptance
from ..tree import SAMPLING_MODES
from ..verifiers import get_verifier

__all__ = ["DEFAULT_METHODS", "BenchSettings", "run_benchmark", "bench_main", "main", "format_table",
           "measure_acceptance_vector", "default_output_path", "bench_output_path", "check_bench_arguments",
           "SETTING_CHECKS", "check_settings", "check_methods", "check_model_names", "check_bench_size",
           "MAX_BENCH_TOKENS"]

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "data" / "results"
RUNS_DIR = REPO_ROOT / "runs" / "bench"
"""Where a benchmark writes unless it is published (git-ignored)."""
DEFAULT_SEQUOIA = "sequoia:16x6"
INDEPENDENT = "smollm2-135m-draft"
MAX_BENCH_TOKENS = 10_000_000
"""The most tokens one benchmark may ask for: prompts x methods x max_new_tokens (`check_bench_size`)."""
DEFAULT_METHODS = ("autoregressive", "hf_assisted", "hf_assisted/chain:1", "hf_assisted/chain:2",
                   f"token/chain:1@{INDEPENDENT}", f"token/chain:2@{INDEPENDENT}", f"token/sequoia:16x6@{INDEPENDENT}",
                   "token/chain:2", "token/chain:4", "block/chain:4", "token/sequoia:16x6", "token/sequoia:32x8")


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _versions() -> dict:
    # lazy: transformers takes seconds to import; only model loading needs it
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "specdec_lib": __version__}


def default_output_path(host: str | None = None, publish: bool = False) -> Path:
    """``bench_<host>.json`` in `RUNS_DIR`, or with ``publish`` in the published `RESULTS_DIR`."""
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in (host or socket.gethostname()))
    return (RESULTS_DIR if publish else RUNS_DIR) / f"bench_{host}.json"


def bench_output_path(output: Path | str | None, publish: bool = False) -> Path:
    """The file a benchmark writes, checked before it runs (`destinations.check_output_file`): ``output``,
    or by default `default_output_path`."""
    return check_output_file("output", output if output else default_output_path(publish=publish), publish)


@torch.no_grad()
def measure_acceptance_vector(target, draft, prompts: Sequence[Prompt], temperature: float = 1.0,
                              top_p: float = 1.0, max_children: int = 8, tokens_per_prompt: int = 32,
                              seed: int = 0) -> list[float]:
    """Sequoia's positional acceptance vector p_1..p_K (docs/methods/sequoia.md §2.1) on target-sampled
    continuations of ``prompts``: target / draft rows at every generated position, then
    `theory.positional_acceptance` with sampling without replacement (Monte Carlo over rejected draws)."""
    p_rows, q_rows = [], []
    for i, prompt in enumerate(prompts):
        ids = target.encode(prompt.text)
        out = autoregressive_generate(target, ids, temperature=temperature, top_p=top_p,
                                      max_new_tokens=tokens_per_prompt, seed=seed + i, ignore_eos=True)
        seq = ids.tolist() + out.tokens
        n = len(out.tokens)
        positions = slice(len(ids) - 1, len(ids) - 1 + n)
        p_rows.append(process_logits(target.logits(seq)[positions], temperature, top_p).cpu())
        q_rows.append(process_logits(draft.logits(seq)[positions], temperature, top_p, apply_top_p=False).cpu())
    p, q = torch.cat(p_rows), torch.cat(q_rows)
    if float(temperature) == 0.0:
        scheme = "topk"
    else:
        scheme = "without_replacement"
    vec = positional_acceptance(p, q, max_children, scheme, method="monte_carlo" if scheme != "topk" else "auto",
                                num_samples=16, generator=torch.Generator().manual_seed(seed))
    return [float(x) for x in vec]


def _parse_method(name: str) -> dict:
    """"autoregressive", "hf_assisted[/chain:<k>]" or "<verifier>/<shape>[/<sampling>][@<draft>]"; the default
    sampling is without replacement for Sequoia trees, races for erss and i.i.d. otherwise."""
    if "@" in name:
        base, draft = name.rsplit("@", 1)
        spec = _parse_method(base)
        if spec["kind"] != "ours" or not draft:
            raise ValueError(f"unknown method {name!r}: '@<draft>' follows one of our methods, as in "
                             f"'token/chain:1@smollm2-135m-draft'")
        return {**spec, "name": name, "draft": draft}
    if name in ("autoregressive", "hf_assisted"):
        return {"name": name, "kind": name}
    if name.startswith("hf_assisted/"):
        shape = name.split("/", 1)[1]
        length = shape[len("chain:"):] if shape.startswith("chain:") else ""
        if not length.isdigit() or int(length) < 1:
            raise ValueError(f"unknown method {name!r}: HF assisted generation drafts chains only, "
                             f"as in 'hf_assisted/chain:4'")
        check_tree_shape(shape)  # the size limit of our chains holds for HF's too
        return {"name": name, "kind": "hf_assisted", "draft_tokens": int(length)}
    parts = name.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"unknown method {name!r}: use 'autoregressive', 'hf_assisted' or "
                         f"'<verifier>/<shape>[/<sampling>]' such as 'block/chain:4' or 'token/sequoia:16x6'")
    verifier, shape = parts[0], parts[1]
    get_verifier(verifier)
    check_tree_shape(shape)  # its form and MAX_TREE_NODES, from the spec
    if not is_sequoia(shape):
        resolve_shape(shape)  # the whole tree (Sequoia's waits for its acceptance vector)
    if len(parts) == 3:
        sampling = check_choice("sampling", parts[2], SAMPLING_MODES)
    elif is_sequoia(shape):
        sampling = "without_replacement"
    else:
        sampling = "race" if verifier == "erss" else "iid"
    return {"name": name, "kind": "ours", "verifier": verifier, "shape": shape, "sampling": sampling}


Label = Callable[[str], str]
"""How a check names an argument: the API's own name (the default), or the command line's option."""


def _same(name: str) -> str:
    return name


def check_methods(methods: Sequence[str], acceptance_vector: Sequence[float] | None = None,
                  label: Label = _same) -> list[dict]:
    """The parsed ``methods`` (`_parse_method`: known verifiers, shapes within `decoding.MAX_TREE_NODES`,
    known samplings), at least one, and ``acceptance_vector`` only when a method is a Sequoia tree (the
    only ones that read it). ValueError naming the argument (``label`` of ``methods`` or ``acceptance_vector``)."""
    if isinstance(methods, str) or not methods:
        raise ValueError(f"{label('methods')}: no method given (a list of names such as ['autoregressive'])")
    specs = []
    for method in methods:
        try:
            specs.append(_parse_method(method))
        except ValueError as exc:  # ArgumentTypeError included
            raise type(exc)(f"{label('methods')}: {exc}") from None
    if acceptance_vector is not None and not any(s["kind"] == "ours" and is_sequoia(s["shape"]) for s in specs):
        raise ValueError(f"{label('acceptance_vector')} is only read by Sequoia trees, and no method of "
                         f"{list(methods)} is one (e.g. token/sequoia:16x6): drop it or add a Sequoia method")
    return specs


def _default_hf_draft(draft, hf_draft):
    """The draft of HF assisted generation: ``hf_draft``, else ``draft`` unless it is the feature draft (HF
    cannot give it the target's features), then the independent draft."""
    if hf_draft is not None:
        return hf_draft
    feature = (draft == "smollm2-135m-eagle") if isinstance(draft, str) else hasattr(draft, "paired_sessions")
    return INDEPENDENT if feature else draft


def _models_used(specs: Sequence[dict], target, draft, hf_draft) -> list[tuple[str, Any]]:
    """(argument, model or name) of every model the methods run with, target first."""
    used = [("target", target)]
    for spec in specs:
        if spec["kind"] == "ours":
            used.append(("methods", spec["draft"]) if "draft" in spec else ("draft", draft))
        elif spec["kind"] == "hf_assisted":
            used.append(("hf_draft" if hf_draft is not None else "draft", _default_hf_draft(draft, hf_draft)))
    return used


def check_model_names(specs: Sequence[dict], target, draft, hf_draft=None, label: Label = _same) -> None:
    """Every model given by name that the methods ``specs`` run with can be found (`models.check_model_name`:
    an offline name, a model folder, a cached or reachable HF id), before any model loads. ValueError
    naming the argument that gave it, and for an ``hf_draft`` that no method would run (only HF assisted
    generation reads it)."""
    if hf_draft is not None and not any(spec["kind"] == "hf_assisted" for spec in specs):
        raise ValueError(f"{label('hf_draft')} {getattr(hf_draft, 'name', hf_draft)!r} is the draft of HF assisted "
                         f"generation, and no method of {[spec['name'] for spec in specs]} is one (hf_assisted, "
                         "hf_assisted/chain:N): drop it or add such a method")
    seen = set()
    for argument, model in _models_used(specs, target, draft, hf_draft):
        if isinstance(model, str) and model not in seen:
            seen.add(model)
            try:
                check_model_name(model)
            except ValueError as exc:
                raise ValueError(f"{label(argument)}: {exc}") from None


def _hf_assisted(target, draft, ids, temperature, top_p, max_new_tokens, seed, eos, draft_tokens=None):
    """HF ``generate(assistant_model=draft)`` with HF's draft-length settings, or, with ``draft_tokens``,
    exactly that many draft tokens per step (constant schedule, no confidence stop), as our chains."""
    config = draft.model.generation_config
    fixed = {"num_assistant_tokens": int(draft_tokens), "num_assistant_tokens_schedule": "constant",
             "assistant_confidence_threshold": 0.0} if draft_tokens else {}
    saved = {k: getattr(config, k, None) for k in fixed}
    for k, v in fixed.items():
        setattr(config, k, v)
    try:
        return _hf_generate(target, draft, ids, temperature, top_p, max_new_tokens, seed, eos)
    finally:
        for k, v in saved.items():
            setattr(config, k, v)


def _hf_generate(target, draft, ids, temperature, top_p, max_new_tokens, seed, eos):
    model = target.model
    input_ids = ids[None].to(target.device)
    kwargs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=draft.model,
                  max_new_tokens=max_new_tokens, pad_token_id=eos if eos is not None else 0, eos_token_id=eos)
    if float(temperature) > 0:
        kwargs.update(do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=0)
    else:
        kwargs.update(do_sample=False)
    torch.manual_seed(seed)
    _sync(target.device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**kwargs)
    _sync(target.device)
    seconds = time.perf_counter() - t0
    return out[0, input_ids.shape[1]:].tolist(), seconds


def _hf_draft_settings(draft) -> dict:
    """HF's assisted-decoding draft-length settings as HF resolves them: the draft's generation config, with
    transformers' global defaults for unset fields (in 5.x: 20 tokens, "constant" schedule, and drafting
    stops early when the draft's confidence falls below 0.4; the "heuristic" schedules adapt the length)."""
    # lazy: transformers takes seconds to import; only model loading needs it
    from transformers import GenerationConfig

    config = getattr(draft.model, "generation_config", None) or GenerationConfig()
    defaults_fn = getattr(GenerationConfig, "_get_default_generation_params", None)
    defaults = defaults_fn() if callable(defaults_fn) else {}
    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    return {k: getattr(config, k, None) if getattr(config, k, None) is not None else defaults.get(k) for k in keys}


def _run_method(spec, target, draft, ids, temperature, top_p, max_new_tokens, seed, eos) -> dict:
    """One generation of one benchmark method on one prompt: tokens, wall seconds and, for ours, the
    tokens per step and the draft / target / verify seconds."""
    if spec["kind"] == "hf_assisted":
        toks, seconds = _hf_assisted(target, draft, ids, temperature, top_p, max_new_tokens, seed, eos,
                                     spec.get("draft_tokens"))
        return {"tokens": len(toks), "seconds": seconds}
    _sync(target.device)
    t0 = time.perf_counter()
    if spec["kind"] == "autoregressive":
        out = autoregressive_generate(target, ids, temperature, top_p, max_new_tokens, seed=seed)
        _sync(target.device)
        return {"tokens": out.num_tokens, "seconds": time.perf_counter() - t0, "tokens_per_step": 1.0}
    out = speculative_generate(target, draft, ids, verifier=spec["verifier"], shape=spec["parents"],
                               sampling=spec["sampling"], temperature=temperature, top_p=top_p,
                               max_new_tokens=max_new_tokens, seed=seed)
    _sync(target.device)
    return {"tokens": out.num_tokens, "seconds": time.perf_counter() - t0, "tokens_per_step": out.tokens_per_step,
            "draft_s": sum(s.draft_s for s in out.steps), "target_s": sum(s.target_s for s in out.steps),
            "verify_s": sum(s.verify_s for s in out.steps), "steps": len(out.steps),
            "tree_size": out.settings["tree_size"]}


def _median(values):
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def _recorded_vector(name: str, temperature: float) -> list[float] | None:
    """Sequoia's positional acceptance vector recorded for the draft ``data/models/<name>``, if any."""
    try:
        return measured_acceptance_vector(temperature, REPO_ROOT / "data" / "models" / str(name))
    except ValueError:
        return None


@dataclass(frozen=True)
class BenchSettings:
    """How `run_benchmark` generates and times every method: tokens per prompt, temperature, top-p and seed,
    the acceptance vector of the Sequoia trees (None: the draft's recorded one, else measured on training
    prompts), the device and dtype the named models load with, a warm-up before the timings, a progress bar."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    acceptance_vector: Sequence[float] | None = None
    device: Any = None
    dtype: Any = None
    warmup: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        check_settings({f.name: getattr(self, f.name) for f in fields(self)})


SETTING_CHECKS = {
    "max_new_tokens": check_count,
    "temperature": check_temperature,
    "top_p": lambda name, value: check_real(name, value, 0.0, 1.0, low_open=True),
    "seed": check_seed,
    "acceptance_vector": lambda name, value: None if value is None else check_probabilities(name, value),
    "device": check_device,
    "dtype": check_dtype,
}
"""The checks of the `BenchSettings` fields, shared by the API and ``specdec bench``: each takes (name, value)
and raises a ValueError (TypeError for a wrong type) naming the argument."""


def check_settings(values: Mapping[str, Any], label: Label = _same) -> None:
    """Every `SETTING_CHECKS` on ``values`` (a mapping from field name to value), each error naming the
    argument (``label`` of the field name)."""
    for name, check in SETTING_CHECKS.items():
        check(label(name), values[name])


def check_bench_size(prompts: int, methods: int, max_new_tokens: int, label: Label = _same) -> None:
    """ValueError naming ``max_new_tokens`` and the limit when ``prompts`` x ``methods`` x ``max_new_tokens``
    is more than `MAX_BENCH_TOKENS`."""
    total = int(prompts) * int(methods) * int(max_new_tokens)
    if total > MAX_BENCH_TOKENS:
        raise ValueError(f"{label('max_new_tokens')}: {prompts} prompts x {methods} methods x {max_new_tokens} tokens is "
                         f"{total:,} tokens, more than the limit MAX_BENCH_TOKENS ({MAX_BENCH_TOKENS:,}); use fewer "
                         "prompts, methods or tokens")


def run_benchmark(prompts: Sequence[Prompt] | None = None, target="smollm2-135m-instruct", draft="smollm2-135m-eagle",
                  methods: Sequence[str] = DEFAULT_METHODS, settings: BenchSettings = BenchSettings(),
                  hf_draft=None, output: Path | str | None = None, publish: bool = False) -> dict:
    """Run every method on every prompt under ``settings`` (`BenchSettings`); returns (and writes to
    ``output``, default ``runs/bench/bench_<host>.json``, with ``publish`` ``data/results/bench_<host>.json``;
    ``output=False`` writes nothing) the results dict. The output (`bench_output_path`), the methods
    (`check_methods`) and the models given by name (`check_model_names`) are checked before anything loads
    or runs; ``settings`` checks itself (`check_settings`).

    ``target`` / ``draft`` / ``hf_draft``: names for `models.load_model` or loaded model objects; a
    method ``...@<name>`` uses the draft of that name. HF assisted generation uses ``hf_draft``, by
    default ``draft`` when HF can run it (not a feature draft) and the independent draft otherwise. ``prompts``: default the project's held-out prompts.
    """
    temperature, top_p, seed = settings.temperature, settings.top_p, settings.seed
    max_new_tokens, acceptance_vector = settings.max_new_tokens, settings.acceptance_vector
    path = None if output is False else bench_output_path(output, publish)
    specs = check_methods(methods, acceptance_vector)
    check_model_names(specs, target, draft, hf_draft)  # every name found before the first model loads
    hf_draft = _default_hf_draft(draft, hf_draft) if any(s["kind"] == "hf_assisted" for s in specs) else hf_draft
    prompts = list(load_prompts("heldout") if prompts is None else prompts)
    if not prompts:
        raise ValueError("no prompts to benchmark")
    check_bench_size(len(prompts), len(specs), max_new_tokens)
    if isinstance(target, str):
        target = load_model(target, device=settings.device, dtype=settings.dtype)
    drafts: dict[str, object] = {}

    def named(model_or_name):
        name = model_or_name if isinstance(model_or_name, str) else model_or_name.name
        if name not in drafts:
            drafts[name] = load_model(name, device=settings.device, dtype=settings.dtype, target=target) \
                if isinstance(model_or_name, str) else model_or_name
        return name

    main_draft = (draft if isinstance(draft, str) else draft.name) \
        if any(spec["kind"] == "ours" and "draft" not in spec for spec in specs) else None
    for spec in specs:
        if spec["kind"] == "ours":
            spec["draft"] = named(spec.get("draft", draft))
        elif spec["kind"] == "hf_assisted":
            spec["draft"] = named(hf_draft)
    vectors: dict[str, tuple[list[float], str]] = {}
    for spec in specs:  # resolve every shape once (Sequoia's DP runs here, not per prompt)
        if spec["kind"] != "ours":
            continue
        vector = acceptance_vector if is_sequoia(spec["shape"]) else None  # only Sequoia trees read one
        if is_sequoia(spec["shape"]) and vector is None:
            if spec["draft"] not in vectors:
                recorded = _recorded_vector(spec["draft"], temperature)
                if recorded is not None:
                    vectors[spec["draft"]] = (recorded, "draft.json")
                else:
                    train = load_prompts("train")[:8]
                    vectors[spec["draft"]] = (measure_acceptance_vector(target, drafts[spec["draft"]], train,
                                                                        temperature, top_p, seed=seed),
                                              f"measured here on {len(train)} training prompts")
            vector = vectors[spec["draft"]][0]
        spec["parents"] = resolve_shape(spec["shape"], vector, temperature)
    acceptance_source = {name: src for name, (_, src) in vectors.items()} or ("given" if acceptance_vector else None)
    eos = target.eos_token_id
    encoded = [target.encode(p.text) for p in prompts]
    if settings.warmup:  # first calls pay for lazy initialisation; keep them out of the numbers
        autoregressive_generate(target, encoded[0], temperature, top_p, 4, seed=seed)
        for d in drafts.values():
            speculative_generate(target, d, encoded[0], "token", "chain:2", temperature=temperature,
                                 top_p=top_p, max_new_tokens=4, seed=seed)
    results: dict[str, dict] = {}
    hf_name = next((spec["draft"] for spec in specs if spec["kind"] == "hf_assisted"), None)
    hf_settings = {"before": _hf_draft_settings(drafts[hf_name])} if hf_name else None
    bar = tqdm(total=len(specs) * len(prompts), disable=not settings.progress, desc="bench", leave=False)
    rows: dict[str, list[dict]] = {spec["name"]: [] for spec in specs}
    for prompt, ids in zip(prompts, encoded):   # prompts outside, methods inside: a slow drift of the
        for spec in specs:                      # machine's speed hits every method alike
            row = {"prompt": prompt.id, **_run_method(spec, target, drafts.get(spec.get("draft")), ids,
                                                      temperature, top_p, max_new_tokens, seed, eos)}
            row["tokens_per_s"] = row["tokens"] / row["seconds"] if row["seconds"] > 0 else float("nan")
            rows[spec["name"]].append(row)
            bar.update(1)
    for spec in specs:
        method_rows = rows[spec["name"]]
        summary = {k: _median([r[k] for r in method_rows]) for k in ("tokens_per_s", "tokens_per_step", "seconds", "tokens")
                   if all(k in r for r in method_rows)}
        for k in ("draft_s", "target_s", "verify_s"):
            if all(k in r for r in method_rows):
                summary[k.replace("_s", "_fraction")] = _median([r[k] / r["seconds"] for r in method_rows
                                                                 if r["seconds"] > 0])
        if "autoregressive" in rows:   # paired: this method over autoregressive on the same prompt
            summary["paired_speedup_vs_autoregressive"] = _median(
                [r["tokens_per_s"] / a["tokens_per_s"] for r, a in zip(method_rows, rows["autoregressive"])])
        results[spec["name"]] = {**{k: v for k, v in spec.items() if k != "name"}, "median": summary,
                                 "per_prompt": method_rows}
    if hf_settings is not None:
        hf_settings["after"] = _hf_draft_settings(drafts[hf_name])
    bar.close()
    base = results.get("autoregressive", {}).get("median", {}).get("tokens_per_s")
    if base:
        for r in results.values():
            r["median"]["speedup_vs_autoregressive"] = r["median"]["tokens_per_s"] / base
    report = {
        "machine": machine(target.device),
        "versions": _versions(),
        "parameters": {"target": target.name, "draft": main_draft, "hf_draft": hf_name,
                       "drafts": {name: repr(d) for name, d in drafts.items()}, "device": str(target.device),
                       "dtype": str(target.dtype).replace("torch.", ""),
                       "small_batch_linears": {"target": target.small_batch_linears,
                                               **{name: getattr(d, "small_batch_linears", None)
                                                  for name, d in drafts.items()}},
                       "prompts": [p.id for p in prompts],
                       "max_new_tokens": int(max_new_tokens), "temperature": float(temperature),
                       "top_p": float(top_p), "seed": int(seed), "methods": list(methods),
                       "acceptance_vector": None if acceptance_vector is None else list(acceptance_vector),
                       "acceptance_vector_source": acceptance_source, "hf_assisted_settings": hf_settings},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "methods": results,
    }
    if path is not None:
        atomic_write_text(path, json.dumps(report, indent=2))
        report["output"] = str(path)
    return report


def format_table(report: dict) -> str:
    lines = [f"{'method':<24} {'tok/s':>8} {'speedup':>8} {'paired':>8} {'tok/step':>9}"]
    for name, r in report["methods"].items():
        m = r["median"]
        lines.append(f"{name:<24} {m.get('tokens_per_s', float('nan')):8.2f} "
                     f"{m.get('speedup_vs_autoregressive', float('nan')):8.2f} "
                     f"{m.get('paired_speedup_vs_autoregressive', float('nan')):8.2f} "
                     f"{m.get('tokens_per_step', float('nan')):9.2f}")
    return "\n".join(lines)


def bench_main(argv: Sequence[str] | None = None) -> int:
    """``specdec bench`` arguments -> run_benchmark; prints the table and the output path."""
    ap = argparse.ArgumentParser(prog="specdec bench", description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="smollm2-135m-instruct")
    ap.add_argument("--draft", default="smollm2-135m-eagle", help="the draft of methods without '@<draft>'")
    ap.add_argument("--hf-draft", default=None,
                    help=f"the draft of HF assisted generation (default --draft, or {INDEPENDENT} for the feature draft)")
    ap.add_argument("--split", default="heldout", choices=["heldout", "train", "all"])
    ap.add_argument("--num-prompts", type=int, default=None, help="first N prompts of the split (default all)")
    ap.add_argument("--per-category", type=int, default=None, help="first N prompts of each category")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated method names")
    ap.add_argument("--acceptance-vector", default=None, help="comma-separated p_1..p_K for Sequoia trees")
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None, help="target and drafts (autoregressive too): e.g. bfloat16")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (1 on a busy machine: OpenMP barriers stall 2-thread forwards)")
    ap.add_argument("--output", default=None,
                    help="JSON file (default runs/bench/bench_<host>.json; data/results/bench_<host>.json with "
                         "--publish); never inside reports/, inside data/results/ only with --publish")
    ap.add_argument("--publish", action="store_true",
                    help="write into the published data/results/ (replacing its bench file of this host)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    try:
        checked = check_bench_arguments(args)
        prompts = load_prompts(args.split, per_category=args.per_category)
        if args.num_prompts is not None:
            prompts = prompts[: args.num_prompts]
        check_bench_size(len(prompts), len(checked["methods"]), args.max_new_tokens, _option)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    settings = BenchSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                             seed=args.seed, acceptance_vector=checked["acceptance_vector"], device=args.device,
                             dtype=args.dtype)
    report = run_benchmark(prompts, args.target, args.draft, checked["methods"], settings, hf_draft=args.hf_draft,
                           output=checked["output"], publish=args.publish)
    print(format_table(report))
    print(f"written to {report['output']}")
    return 0


def _option(name: str) -> str:
    """The ``specdec bench`` option of a `run_benchmark` / `BenchSettings` argument."""
    return "--" + name.replace("_", "-")


def check_bench_arguments(args: argparse.Namespace) -> dict:
    """The ``specdec bench`` arguments checked before any model loads or any prompt is read: counts >= 1
    (``--num-prompts``, ``--per-category``, ``--threads``), the settings (`check_settings`: ``--max-new-tokens``,
    a finite temperature >= 0, ``--top-p`` in (0, 1], a seed torch takes, an acceptance vector of numbers in
    [0, 1], a known dtype and a device this machine has), the methods (`check_methods`: known, trees within
    their size limit, a vector only with a Sequoia method), the models they need by name (`check_model_names`)
    and the output file (`bench_output_path`). ValueError naming the option; returns the methods, the
    acceptance vector and the output path."""
    for option in ("num_prompts", "per_category", "threads"):
        if getattr(args, option) is not None:
            check_count(_option(option), getattr(args, option))
    vector = None
    if args.acceptance_vector:
        try:
            vector = [float(x) for x in args.acceptance_vector.split(",")]
        except ValueError:
            raise ValueError(f"--acceptance-vector: {args.acceptance_vector!r} is not a comma-separated list of "
                             f"numbers") from None
    check_settings({"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
                    "seed": args.seed, "acceptance_vector": vector, "device": args.device, "dtype": args.dtype},
                   _option)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    specs = check_methods(methods, vector, _option)
    output = bench_output_path(args.output, args.publish)
    check_model_names(specs, args.target, args.draft, args.hf_draft, _option)
    return {"methods": methods, "acceptance_vector": vector, "output": output}


main = bench_main  # the entry point `specdec bench` calls (specdec_lib.cli)


if __name__ == "__main__":
    sys.exit(bench_main())
