"""Wall-clock decoding of prompts, speculative or autoregressive, one row per prompt (with the generated
tokens, which `target_nll` scores under the target: the output law's check beside the timing)."""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..arguments import check_int
from ..decoding import autoregressive_generate, speculative_generate
from ..progress import tqdm
from ..sampling import process_logits
from .setup import Pair, PromptIds

# ----------------------------------------------------------------------------------------- wall clock

def _check_timed_pair(pair: Pair) -> None:
    if pair.kind != "hf":
        raise ValueError("wall-clock timings need a real model pair (profile default or full)")
    if getattr(pair.draft, "synthetic", False):
        raise ValueError(f"{pair.draft.name} is a synthetic draft (models.interpolated): tokens per step only, "
                         "never wall clock")


#: the columns of `interleaved_timing`'s rows (`_timed_run`'s plus the round's ``arm`` and ``order``)
TIMING_COLUMNS = ("prompt_id", "category", "verifier", "shape", "temperature", "tokens", "steps", "seconds",
                  "tokens_per_s", "tokens_per_step", "draft_s", "target_s", "verify_s", "median_step_s", "generated",
                  "arm", "order")


def _timed_run(pair: Pair, prompt: PromptIds, verifier: str | None, shape, sampling: str, temperature: float,
               top_p: float, max_new_tokens: int, seed: int) -> dict:
    """One prompt decoded and timed: the row of `timed_generation`."""
    t0 = time.perf_counter()
    if verifier is None:
        out = autoregressive_generate(pair.target, prompt.ids, temperature=temperature, top_p=top_p,
                                      max_new_tokens=max_new_tokens, eos_token_id=pair.eos_token_id, seed=seed)
    else:
        out = speculative_generate(pair.target, pair.draft, prompt.ids, verifier=verifier, shape=shape,
                                   sampling=sampling, temperature=temperature, top_p=top_p,
                                   max_new_tokens=max_new_tokens, eos_token_id=pair.eos_token_id, seed=seed)
    seconds = time.perf_counter() - t0
    steps = list(out.steps)
    n_tokens = len(out.tokens)
    step_s = [float(s.draft_s) + float(s.target_s) + float(s.verify_s) for s in steps if hasattr(s, "target_s")]
    return {"prompt_id": prompt.id, "category": prompt.category, "verifier": verifier or "autoregressive",
            "shape": shape or "-", "temperature": temperature, "tokens": n_tokens,
            "steps": len(steps) or n_tokens, "seconds": seconds, "tokens_per_s": n_tokens / seconds,
            "tokens_per_step": n_tokens / max(1, len(steps) or n_tokens),
            "draft_s": sum(float(getattr(s, "draft_s", 0.0)) for s in steps),
            "target_s": sum(float(getattr(s, "target_s", 0.0)) for s in steps),
            "verify_s": sum(float(getattr(s, "verify_s", 0.0)) for s in steps),
            "median_step_s": float(np.median(step_s)) if step_s else seconds / max(1, n_tokens),
            "generated": " ".join(str(int(t)) for t in out.tokens)}


def timed_generation(pair: Pair, prompts: Sequence[PromptIds], verifier: str | None, shape: str | None = None,
                     sampling: str = "iid", temperature: float = 1.0, top_p: float = 1.0,
                     max_new_tokens: int = 32, seed: int = 0, progress: bool = True):
    """Wall-clock decoding: `speculative_generate` (or `autoregressive_generate` when ``verifier`` is None)
    per prompt. Returns a DataFrame per prompt: tokens, steps, seconds, tokens per second, tokens per step,
    the summed draft / target / verify seconds and the median step time (draft + target + verify of one
    step; autoregressive: seconds per token) and the generated token ids, space-separated (hf pairs only)."""
    _check_timed_pair(pair)
    iterator: Iterable[tuple[int, PromptIds]] = enumerate(prompts)
    if progress:
        iterator = tqdm(list(iterator), desc=f"timing {verifier or 'autoregressive'} {shape or ''} T={temperature}",
                        leave=False)
    return pd.DataFrame([_timed_run(pair, prompt, verifier, shape, sampling, temperature, top_p, max_new_tokens,
                                    seed * 100_003 + k) for k, prompt in iterator])


def interleaved_timing(pair: Pair, prompts: Sequence[PromptIds], arms: Mapping[str, tuple | None], *, seed: int,
                       temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 32,
                       progress: bool = True, round_inputs: Callable[[], Mapping[str, float]] | None = None):
    """Wall-clock decoding of several arms, paired by prompt and interleaved in time: for each prompt every
    arm runs once, back to back, in an order rotated by one arm per prompt, so a slow spell of a shared
    machine falls on all arms of the prompts it covers (not on the arm that happened to run then) and no arm
    always runs first. ``arms``: name -> None (autoregressive) or (verifier, shape, sampling). Every arm
    decodes prompt k with the same seed (``seed * 100_003 + k``, as `timed_generation`); ``seed`` has no
    default, so a notebook passes its data seed and a seed check times other texts. Returns the rows of
    `timed_generation` with the columns ``arm`` and ``order`` (the arm's place in its prompt's round).

    ``round_inputs``: None, or a function called once before each prompt's round whose {name: number} become
    columns of that prompt's rows: measurements a model predicts the timings from (e.g.
    `hardware.round_profile`), taken in the same spells of the machine as the timings they predict, so that
    a rule can resample them with the prompts (`verdicts.SpeedupCheck` with a callable prediction)."""
    _check_timed_pair(pair)
    seed = check_int("seed", seed, 0, 2 ** 40)   # not check_seed: seed * 100_003 + k must stay a valid torch seed
    if round_inputs is not None and not callable(round_inputs):
        raise ValueError(f"round_inputs must be None or a function returning {{name: number}}, got {round_inputs!r}")
    if not arms:
        raise ValueError("arms must name at least one arm")
    for name, arm in arms.items():
        if arm is not None and (not isinstance(arm, tuple) or len(arm) != 3):
            raise ValueError(f"arms[{name!r}] must be None (autoregressive) or (verifier, shape, sampling), got {arm!r}")
    names = list(arms)
    iterator: Iterable[tuple[int, PromptIds]] = enumerate(prompts)
    if progress:
        iterator = tqdm(list(iterator), desc=f"timing {len(names)} arms interleaved, T={temperature}", leave=False)
    rows = []
    for k, prompt in iterator:
        inputs = _round_inputs(round_inputs)
        for order in range(len(names)):
            name = names[(k + order) % len(names)]
            verifier, shape, sampling = arms[name] or (None, None, "iid")
            row = _timed_run(pair, prompt, verifier, shape, sampling, temperature, top_p, max_new_tokens,
                             seed * 100_003 + k)
            rows.append({**row, "arm": name, "order": order, **inputs})
    return pd.DataFrame(rows)


def _round_inputs(round_inputs) -> dict[str, float]:
    """One call of `interleaved_timing`'s ``round_inputs``, checked: {name: finite number}."""
    if round_inputs is None:
        return {}
    values = round_inputs()
    if not isinstance(values, Mapping) or not values:
        raise ValueError(f"round_inputs must return a non-empty {{name: number}} mapping, got {values!r}")
    out = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name or name in TIMING_COLUMNS:
            raise ValueError(f"round_inputs: column name {name!r} is not a string or is one of the timing columns")
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"round_inputs: {name!r} = {value!r} is not a number") from None
        if not np.isfinite(out[name]):
            raise ValueError(f"round_inputs: {name!r} = {value!r} is not finite")
    return out


def target_nll(pair: Pair, prompts: Sequence[PromptIds], timing, temperature: float = 1.0, top_p: float = 1.0):
    """``timing`` (rows of `interleaved_timing` / `timed_generation`) with ``nll_per_token``: the mean negative
    log-likelihood, in nats, of each row's generated tokens under the target's sampling law (its logits at
    ``temperature`` and ``top_p``, `sampling.process_logits`) after the row's prompt, one teacher-forced forward
    per row. A lossless method's texts have the target's law, so their mean NLL (log perplexity) matches the
    target's own samples' in expectation (Hu & Huang's "PPL unchanged")."""
    _check_timed_pair(pair)
    missing = [c for c in ("prompt_id", "generated") if c not in getattr(timing, "columns", ())]
    if missing:
        raise ValueError(f"timing lacks the columns {missing} (rows of interleaved_timing)")
    by_id = {p.id: p for p in prompts}
    unknown = sorted(set(timing["prompt_id"]) - set(by_id))
    if unknown:
        raise ValueError(f"timing names prompts that are not in prompts: {unknown[:5]}")
    nll = []
    for prompt_id, generated in zip(timing["prompt_id"], timing["generated"]):
        text = [int(t) for t in str(generated).split()]
        if not text:
            nll.append(float("nan"))
            continue
        ids = by_id[prompt_id].ids.tolist() + text
        start = len(ids) - len(text) - 1
        with torch.no_grad():
            rows = process_logits(pair.target.logits(ids[:-1])[start:].double(), temperature, top_p, apply_top_p=True)
        chosen = rows[torch.arange(len(text)), torch.tensor(text)]
        nll.append(float(-torch.log(chosen.clamp_min(1e-300)).mean()))
    return timing.assign(nll_per_token=nll)


def fastest_arm(timing: pd.DataFrame, baseline_of: Mapping[str, str]) -> str:
    """The arm of ``baseline_of`` (arm -> the arm it is timed against, e.g. its draft's autoregressive run)
    with the highest pooled speedup sum(tokens) / sum(seconds) over its baseline's, on the prompts both ran:
    the arm a claim then tests on other prompts (selection apart from confirmation, so the chosen arm's
    speedup is not the maximum of its own noise). Ties go to the first arm in ``baseline_of``'s order."""
    if not baseline_of:
        raise ValueError("baseline_of must map at least one arm to its baseline")
    missing = sorted({*baseline_of, *baseline_of.values()} - set(timing["arm"]))
    if missing:
        raise ValueError(f"baseline_of names arms that were not timed: {missing}")

    def speedup(arm: str, baseline: str) -> float:
        a, b = timing[timing["arm"] == arm], timing[timing["arm"] == baseline]
        shared = set(a["prompt_id"]) & set(b["prompt_id"])
        a, b = a[a["prompt_id"].isin(shared)], b[b["prompt_id"].isin(shared)]
        return float((a["tokens"].sum() / a["seconds"].sum()) / (b["tokens"].sum() / b["seconds"].sum()))

    speeds = {arm: speedup(arm, baseline) for arm, baseline in baseline_of.items()}
    return max(speeds, key=speeds.get)
