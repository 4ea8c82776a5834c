"""Measuring any draft against its target on the held-out prompts: the record ``draft.json``.

For every held-out prompt of every category and every temperature T the target samples a continuation
at T, and target and draft score it in one teacher-forced forward each. At each continuation position
the per-token acceptance is beta = sum_x min(p_T(x), q_T(x)) (Leviathan et al. 2023, Sec. 3.3), exact
given the two rows; a prompt's value is the mean over its positions, and the CI resamples prompts
(`experiments.bootstrap_ratio`). For a draft that reads only the text (every draft here except the
feature draft), beta at depth k of a chain has the same law as at depth 1: the accepted tokens are
target samples, which is what the teacher-forced text is.

From the same matched rows at T the record also holds Sequoia's positional acceptance vector
(`theory.positional_acceptance`, children without replacement) per temperature, which the ``sequoia:N``
shapes read (`shapes.measured_acceptance_vector`), and the one-token forward times of draft and target
(`distill.evaluate.measure_forward_times`). Command line (the quantized self-draft's record)::

    python -m specdec_lib.experiments.draft_measure --draft smollm2-135m-int4 --per-category 8 --new-tokens 48
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch

from . import NoRowsError, Pair, bootstrap_ratio, matched_rows, prompts_for
from ..models import load_model
from ..models.offline import QUANTIZED_DIR, QUANTIZED_NAME, TARGET_NAME

__all__ = ["acceptance_frame", "summarize_acceptance", "MeasureSettings", "measure_pair", "main"]


def _check_rows_settings(temperatures: Sequence[float], new_tokens: int) -> None:
    """ValueError naming ``new_tokens`` unless it is a positive integer, or ``temperatures`` unless all are > 0."""
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError(f"new_tokens must be a positive integer, got {new_tokens!r}")
    bad = [t for t in temperatures if not t > 0]
    if bad:
        raise ValueError(f"temperatures must be > 0, got {bad!r}")


def acceptance_frame(target_lm, draft_lm, temperatures: Sequence[float], per_category: int, new_tokens: int,
                     seed: int = 0, progress: bool = True):
    """Per (temperature, held-out prompt): the mean per-token acceptance over its continuation positions, on
    the rows `experiments.matched_rows` gives (the target's own continuation of the chat-encoded prompt, at
    most ``new_tokens`` tokens, both models teacher-forced on it). Returns (frame, rows) with rows[T] = (p, q)
    stacked over prompts for the theory vectors."""
    from tqdm.auto import tqdm

    _check_rows_settings(temperatures, new_tokens)
    pair = Pair(target_lm, draft_lm, "hf", f"{target_lm.name} / {draft_lm.name}")
    prompts = prompts_for(pair, per_category)
    records, rows = [], {}
    for temperature in temperatures:
        ps, qs = [], []
        for i, prompt in enumerate(tqdm(prompts, desc=f"acceptance at T={temperature}", disable=not progress)):
            try:
                p, q = matched_rows(pair, [prompt], temperature, max_new_tokens=new_tokens, seed=seed * 100_003 + i,
                                    progress=False)
            except NoRowsError:  # the target ended its answer at once: no position to measure
                continue
            beta = torch.minimum(p, q).sum(-1)
            records.append({"temperature": float(temperature), "prompt_id": prompt.id, "category": prompt.category,
                            "positions": int(beta.numel()), "acceptance": float(beta.mean())})
            ps.append(p.float())
            qs.append(q.float())
        rows[float(temperature)] = (torch.cat(ps), torch.cat(qs))
    return pd.DataFrame(records), rows


def summarize_acceptance(frame, by: Sequence[str] = ("temperature",), n_boot: int = 2000, seed: int = 0):
    """Mean per-token acceptance per group (prompts weighted by their positions) with its 95% CI over
    prompts (`experiments.bootstrap_ratio`); columns ``by`` + mean, ci_low, ci_high, prompts, positions."""
    out = []
    for key, g in frame.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        mean, lo, hi = bootstrap_ratio((g["acceptance"] * g["positions"]).to_numpy(), g["positions"].to_numpy(),
                                       n_boot, seed)
        out.append({**dict(zip(by, key)), "mean": mean, "ci_low": lo, "ci_high": hi, "prompts": len(g),
                    "positions": int(g["positions"].sum())})
    return pd.DataFrame(out)


@dataclass(frozen=True)
class MeasureSettings:
    """What `measure_pair` measures: the temperatures, the held-out prompts per category, the tokens of each
    continuation, the children per node and the matched rows (``theory_rows``) of the positional acceptance
    vectors, the seed, a progress bar."""

    temperatures: Sequence[float] = (0.2, 0.6, 1.0)
    per_category: int = 8
    new_tokens: int = 48
    max_children: int = 8
    theory_rows: int = 256
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        _check_rows_settings(self.temperatures, self.new_tokens)


def measure_pair(target_lm, draft_lm, settings: MeasureSettings = MeasureSettings()) -> dict:
    """The ``evaluation`` part of a draft record under ``settings`` (`MeasureSettings`): acceptance per
    temperature (overall and per category, with CIs over prompts), the per-prompt values, Sequoia's positional
    acceptance vectors per temperature (``acceptance_vectors``, ``theory_rows`` random matched rows, exact per
    row up to Monte Carlo over ``num_samples`` = 32 draws) and the forward times."""
    from .. import theory
    from ..training.timing import measure_forward_times

    seed = settings.seed
    t0 = time.perf_counter()
    frame, rows = acceptance_frame(target_lm, draft_lm, settings.temperatures, settings.per_category,
                                   settings.new_tokens, seed, settings.progress)
    vectors = {}
    for temperature, (p, q) in rows.items():
        pick = torch.randperm(p.shape[0], generator=torch.Generator().manual_seed(seed))[:settings.theory_rows]
        vec = theory.positional_acceptance(p[pick].double(), q[pick].double(), settings.max_children,
                                           "without_replacement", method="monte_carlo", num_samples=32,
                                           generator=torch.Generator().manual_seed(seed))
        vectors[f"{temperature:g}"] = [float(x) for x in vec]
    overall = summarize_acceptance(frame)
    per_category_frame = summarize_acceptance(frame, ("temperature", "category"))
    return {
        "acceptance": overall.to_dict(orient="records"),
        "acceptance_by_category": per_category_frame.to_dict(orient="records"),
        "per_prompt": frame.to_dict(orient="records"),
        "acceptance_vectors": vectors,
        "forward_time": measure_forward_times(draft_lm.model, target_lm.model),
        "parameters": {"temperatures": [float(t) for t in settings.temperatures],
                       "per_category": settings.per_category, "new_tokens": settings.new_tokens,
                       "max_children": settings.max_children, "theory_rows": settings.theory_rows,
                       "seed": seed, "split": "heldout", "dtype": str(target_lm.dtype).replace("torch.", ""),
                       "threads": torch.get_num_threads()},
        "minutes": (time.perf_counter() - t0) / 60,
    }


QUANTIZED_RECIPE = {
    "name": QUANTIZED_NAME, "base_model": TARGET_NAME,
    "method": "round-to-nearest asymmetric 4-bit quantization of every decoder-layer linear map and of the "
              "output head (untied), groups of 64 input features (specdec_lib.models.quantized); input "
              "embeddings, norms and rotary tables are the target's",
    "trained": "no: derived from the target at load time (deterministic); nothing but this record is stored",
    "note": "the target's own weights are 4-bit Q4_1 (groups of 32); this grid merges pairs of its groups",
}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", default=QUANTIZED_NAME, help="draft name for load_model (target: the offline one)")
    ap.add_argument("--per-category", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--temperatures", default="0.2,0.6,1.0")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(QUANTIZED_DIR / "draft.json"))
    a = ap.parse_args(argv)
    temperatures = [float(x) for x in a.temperatures.split(",")]
    settings = MeasureSettings(temperatures=temperatures, per_category=a.per_category, new_tokens=a.new_tokens)
    torch.set_num_threads(a.threads)
    target = load_model(TARGET_NAME, dtype=a.dtype)
    draft = load_model(a.draft, dtype=a.dtype, target=target)
    evaluation = measure_pair(target, draft, settings)
    record = {**(QUANTIZED_RECIPE if a.draft == QUANTIZED_NAME else {"name": a.draft, "base_model": TARGET_NAME}),
              "dtype": a.dtype, "acceptance_vectors": evaluation.pop("acceptance_vectors"),
              "evaluation": evaluation, "machine": f"{platform.machine()} {platform.system()}",
              "command": " ".join(["python -m specdec_lib.experiments.draft_measure", *(sys.argv[1:] if argv is None else argv)])}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print(json.dumps(record["evaluation"]["acceptance"], indent=1))
    print(json.dumps(record["evaluation"]["forward_time"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
