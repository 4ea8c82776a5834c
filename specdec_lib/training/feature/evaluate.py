"""Measuring and exporting the feature draft: the record ``draft.json`` beside its weights.

* acceptance by depth 1..8 at T = 0.2 / 0.6 / 1.0 on the held-out prompts of all 13 categories,
  overall and per category (`levels.acceptance_by_depth`; the measure of ``draft.json`` of the
  independent draft: mean over continuation positions of sum_x min(p(x), q(x)));
* Sequoia's positional acceptance vector and ERSS's r vector from depth-1 rows
  (`evaluation.theory_vectors`), so ``sequoia:N`` shapes and the DP trees use this draft's own numbers;
* the draft's and the target's one-token forward times (medians, prefix KV cache; `timing`);
* the training record of `online`: data, minutes, the loss curve, the draft it started from.

Command line::

    python -m specdec_lib.training.feature.evaluate --weights distill_runs/eagle_online/<run>.safetensors --export
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from safetensors.torch import load_file

from ...data import load_prompts
from ...models import load_model
from ...models.feature_net import (
    EAGLE_DIR, FeatureDraft, build_feature_draft, export_feature_draft, grow_feature_draft, num_layers_of,
)
from ...models.offline import DRAFT_DIR
from ...models.subset_head import use_subset_head
from ..evaluation import theory_vectors
from ..timing import TimedForward, interleaved_seconds, one_token_forward, random_tokens
from .data import FeatureSample, load_feature_samples, sample_with_features, save_feature_samples
from .levels import acceptance_by_depth, mean_acceptance

__all__ = ["heldout_samples", "forward_times", "per_prompt_acceptance", "measure", "comparison_frame",
           "paired_prompt_frame", "category_frame", "training_summary", "online_loss_frame", "main"]

TEMPERATURES = (1.0, 0.6, 0.2)


def heldout_samples(lm, path: Path | None, new_tokens: int = 96, batch: int = 16, seed: int = 0,
                    per_category: int | None = None) -> tuple[list[FeatureSample], list[str]]:
    """Target continuations of every held-out prompt (or the first ``per_category`` of each category)
    and their categories; cached in ``path`` when given."""
    prompts = load_prompts("heldout", per_category=per_category)
    if path is not None and path.is_file():
        samples = load_feature_samples(path)
    else:
        samples = []
        for at in range(0, len(prompts), batch):
            ids = [lm.encode(p.text).tolist() for p in prompts[at: at + batch]]
            gen = torch.Generator().manual_seed(seed + at)
            samples += sample_with_features(lm.model, ids, new_tokens, 8, gen, lm.eos_token_id)
        if path is not None:
            save_feature_samples(samples, path)
    if len(samples) != len(prompts):
        raise ValueError(f"{path} holds {len(samples)} sequences for {len(prompts)} held-out prompts: delete it")
    return samples, [p.category for p in prompts]


@torch.no_grad()
def forward_times(draft: FeatureDraft, target_model, prefix_len: int = 100, repeats: int = 21) -> dict:
    """Median ms of a one-token forward after a ``prefix_len`` KV cache of random tokens, draft (with its
    head) and target alternately (`timing.interleaved_seconds`)."""
    dev = target_model.get_input_embeddings().weight.device
    prefix, token = (t.to(dev) for t in random_tokens(prefix_len, 1000, seed=0))
    target_call = one_token_forward(target_model, prefix, token)
    hidden = draft.hidden_size
    pos = torch.arange(prefix_len)[None].to(dev)
    _, d_base = draft(prefix, torch.zeros(1, prefix_len, hidden), pos, use_cache=True)
    feat = torch.zeros(1, 1, hidden)
    draft_call = TimedForward(d_base, lambda cache: draft.head(
        draft(token, feat, pos[:, -1:] + 1, past_key_values=cache, use_cache=True)[0]))
    d, t = (1000 * statistics.median(times) for times in interleaved_seconds([draft_call, target_call], repeats, dev))
    return {"draft_ms": d, "target_ms": t, "ratio": d / t, "prefix_len": prefix_len, "repeats": repeats,
            "threads": torch.get_num_threads(), "dtype": str(target_model.dtype)}


def per_prompt_acceptance(result: dict, temperature: float = 1.0) -> list[list[float]]:
    """Per sequence (prompt) of an `acceptance_by_depth` result: its mean acceptance at each depth at one
    temperature (positions of that sequence weighted equally)."""
    k = result["temperatures"].index(float(temperature))
    means = result["sums"][:, :, k] / result["counts"].clamp(min=1).double()
    return [[round(float(x), 6) for x in row] for row in means]


def measure(draft: FeatureDraft, target_lm, samples: Sequence[FeatureSample], categories: Sequence[str],
            depth: int = 8) -> dict:
    """The evaluation part of the record (module docstring)."""
    result = acceptance_by_depth(draft, target_lm.model, samples, depth, TEMPERATURES)
    by_category = {}
    for cat in dict.fromkeys(categories):
        sel = [i for i, c in enumerate(categories) if c == cat]
        by_category[cat] = mean_acceptance(result, sel)
    p, q = result["depth1_rows"]
    p, q = p.double(), q.double()
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    vectors = theory_vectors(p[:64], q[:64], max_children=8, num_samples=8, seed=0)
    overall = mean_acceptance(result)
    return {"split": "heldout", "sequences": len(samples), "positions_by_depth": result["counts"].sum(0).tolist(),
            "mean_acceptance": overall["1.0"][0], "acceptance_by_depth": overall,
            "acceptance_by_category": by_category,
            "per_prompt_t1": per_prompt_acceptance(result), "positions_per_prompt": result["counts"][:, 0].tolist(),
            **vectors,
            "theory_measurement": {"rows": int(min(64, p.shape[0])), "depth": 1, "temperature": 1.0,
                                   "num_samples": 8}}


def comparison_frame(record: dict):
    """Acceptance by depth and temperature of the feature draft beside the independent draft it started
    from, on the same held-out positions (both measured by `main`): a long DataFrame with columns
    ``draft``, ``temperature``, ``depth``, ``acceptance``."""
    ev = record["evaluation"]
    rows = []
    for label, table in (("feature draft (smollm2-135m-eagle)", ev["acceptance_by_depth"]),
                         ("independent draft (smollm2-135m-draft)", ev["independent_draft_same_positions"])):
        for temperature, values in table.items():
            rows += [{"draft": label, "temperature": float(temperature), "depth": d, "acceptance": v}
                     for d, v in enumerate(values, start=1)]
    return pd.DataFrame(rows)


def paired_prompt_frame(record: dict):
    """Both drafts' mean acceptance per held-out prompt and depth at T = 1, on the same positions: a long
    DataFrame (``prompt_id``, ``category``, ``depth``, ``verifier`` = "feature" | "independent",
    ``acceptance``) that `verdicts.GainCheck` takes (``value="acceptance"``, resampling prompts).
    ValueError for a record written before per-prompt values were stored."""
    ev = record["evaluation"]
    if "per_prompt_t1" not in ev or "independent_per_prompt_t1" not in ev:
        raise ValueError("record has no per-prompt acceptances: re-run python -m specdec_lib.training.feature.evaluate --export")
    rows = []
    for label, table in (("feature", ev["per_prompt_t1"]), ("independent", ev["independent_per_prompt_t1"])):
        for pid, cat, values in zip(ev["prompt_ids"], ev["prompt_categories"], table):
            rows += [{"prompt_id": pid, "category": cat, "depth": d, "verifier": label, "acceptance": v}
                     for d, v in enumerate(values, start=1)]
    return pd.DataFrame(rows)


def category_frame(record: dict, temperature: str = "1.0", depth: int = 1):
    """The feature draft's acceptance per prompt category at one temperature and depth."""
    by_cat = record["evaluation"]["acceptance_by_category"]
    return pd.DataFrame([{"category": c, "acceptance": v[temperature][depth - 1]} for c, v in by_cat.items()])


def training_summary(record: dict) -> str:
    """One line on how the exported feature draft was trained: `online` runs (on an accelerator), each followed
    by how the draft it started from was trained, down to a record of training on stored target rows on a CPU."""
    fwd = record["forward_time"]
    cost = f"forward {fwd['draft_ms']:.1f} ms vs target {fwd['target_ms']:.1f} ms (ratio {fwd['ratio']:.3f})"
    return f"feature draft: {_training_line(record['training'])}; {cost}"


def _training_line(train: dict) -> str:
    if "sampled_tokens" not in train:  # training on stored target rows on a CPU (step, minutes, data)
        return (f"{train['step']} steps, {train['minutes']:.1f} training minutes, {train['data']['tokens']:,} "
                f"target-sampled tokens, {train['data']['minutes']:.1f} generation minutes on the CPU")
    how = [] if train.get("objective", "kl") == "kl" else [ONLINE_OBJECTIVE_NAME[train["objective"]]]
    how += [] if train.get("head", "committed") == "committed" else [f"{train['head']} head"]
    tokens = f"{train['sampled_tokens']:,} target-sampled tokens"
    line = (f"{train['minutes']:.1f} minutes of online training on {train['device']} "
            f"({'; '.join(how + [tokens])}, {train['steps']} steps)")
    if train.get("started_from"):
        line += ", after " + _training_line(train["started_from"])
    return line


def online_loss_frame(record: dict):
    """The online run's loss per round (total and per training-time-test level), long format; empty for a
    CPU-trained record."""
    train = record["training"]
    if "sampled_tokens" not in train:
        return pd.DataFrame(columns=["minutes", "sampled tokens", "series", "loss"])
    rows = []
    for r in train["loss_curve"]:
        _, minutes, tokens, *losses = r
        for name, value in zip(["total"] + [f"level {m}" for m in range(1, len(losses))], losses):
            rows.append({"minutes": minutes, "sampled tokens": tokens, "series": name, "loss": value})
    return pd.DataFrame(rows)


ONLINE_OBJECTIVE_TEXT = {
    "kl": "forward KL(target || draft) at T=1 on the target's exact rows over the draft's head vocabulary "
          "(online.sub_vocab_kl)",
    "tv": "the rejection probability 1 - sum_x min(p, q) = TV(p, q) at T=1 on the target's exact rows, q over the "
          "draft's head vocabulary (online.sub_vocab_rejection)",
}
"""The record's objective line per `online.OBJECTIVES` key."""

ONLINE_OBJECTIVE_NAME = {"kl": "forward KL", "tv": "rejection-probability objective"}
"""A few words per `online.OBJECTIVES` key, for the one-line training summary."""


def _online_training(weights: Path) -> dict:
    """The training record of a draft trained by `online` (its summary and its own losses per round), with
    the training of the draft it started from (recorded by `online` in its summary)."""
    summary = json.loads((weights.parent / "online_summary.json").read_text())
    name = weights.stem
    rounds = [json.loads(line) for line in (weights.parent / "online_log.jsonl").read_text().splitlines() if line.strip()]
    curve = [[r["round"], r["minutes"], r["sampled_tokens"]] + (r[name]["loss"] or []) for r in rounds if name in r]
    return {"method": "specdec_lib.training.feature.online (target sampling at T = 1 and training in one process)",
            "run": name, "device": summary.get("device"), "minutes": summary["totals"]["minutes"],
            "sampling_dtype": summary.get("sample_dtype", "float32"),
            "objective": summary.get("objectives", {}).get(name, "kl"),  # a summary without the key: the KL objective
            "head": summary.get("heads", {}).get(name, "committed"),  # a summary without the key: the committed head
            "sampled_tokens": summary["totals"]["sampled_tokens"], "steps": summary["totals"]["steps"].get(name),
            "heldout_check_t1_by_depth": {"before": summary.get("acceptance_before"),
                                          "after": summary.get("acceptance_after", {}).get(name)},
            "loss_curve_columns": ["round", "minutes", "sampled tokens", "loss", "level losses..."],
            "loss_curve": curve,
            "started_from": (summary.get("init") or {}).get("training")}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="measure (and export) the feature draft")
    ap.add_argument("--weights", type=Path, default=None,
                    help="a state trained by `online` (<out>/<name>.safetensors); its online_summary.json and "
                         "online_log.jsonl beside it are the training record")
    ap.add_argument("--init", action="store_true", help="measure the untrained feature draft instead")
    ap.add_argument("--export", action="store_true", help=f"write the draft and its record to {EAGLE_DIR}")
    ap.add_argument("--run-dir", default="distill_runs/eagle", help="where the held-out continuations are cached")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-category", type=int, default=None,
                    help="only the first N held-out prompts of each category")
    a = ap.parse_args(argv)
    if (a.weights is None) == (not a.init):
        ap.error("give --weights or --init (one of them)")
    if a.export and a.weights is None:
        ap.error("--export needs --weights")
    torch.set_num_threads(a.threads)
    run = Path(a.run_dir)
    lm = load_model("smollm2-135m-instruct")
    draft = build_feature_draft(lm)
    training = _online_training(a.weights) if a.weights is not None else None
    # a draft trained with the full head by `online --heads full` is measured and exported with it (no vocabulary file)
    full_head = training is not None and training["head"] == "full"
    head_vocab = None if full_head else load_file(str(DRAFT_DIR / "head_vocab.safetensors"))["vocab_ids"]
    if head_vocab is not None:
        use_subset_head(draft.student, head_vocab)
    draft.eval()
    trained = None
    if a.weights is not None:
        trained = {k: v.float() for k, v in load_file(str(a.weights)).items()}
        draft = grow_feature_draft(draft, lm, num_layers_of(trained)).eval()  # a draft grown by online --layers
    t0 = time.time()
    cache = run / (f"heldout_{a.per_category}_per_category.safetensors" if a.per_category else "heldout.safetensors")
    samples, cats = heldout_samples(load_model("smollm2-135m-instruct", dtype="bfloat16"), cache,
                                    per_category=a.per_category)
    # the same positions with the feature input still zero: the independent draft it started from
    base_result = acceptance_by_depth(draft, lm.model, samples, 8, TEMPERATURES)
    if trained is not None:
        draft.load_state_dict(trained, strict=False)
    evaluation = measure(draft, lm, samples, cats)
    evaluation["independent_draft_same_positions"] = mean_acceptance(base_result)
    evaluation["independent_per_prompt_t1"] = per_prompt_acceptance(base_result)
    evaluation["prompt_ids"] = [p.id for p in load_prompts("heldout", per_category=a.per_category)]
    evaluation["prompt_categories"] = list(cats)
    evaluation["minutes"] = (time.time() - t0) / 60
    print(json.dumps({k: evaluation[k] for k in ("mean_acceptance", "acceptance_by_depth",
                                                  "independent_draft_same_positions")}), flush=True)
    if not a.export:
        return 0
    layers = len(draft.student.model.layers)
    start = ("the committed feature draft" if training.get("started_from") is not None
             else "the independent draft's layers")
    record = {
        "name": "smollm2-135m-eagle", "base_model": "smollm2-135m-instruct",
        "design": "feature draft (EAGLE family): input E[x_j] + W RMSNorm(f_{j-1}) (W zero-initialised), the "
                  "2 decoder layers and norm of smollm2-135m-draft as initialisation"
                  + (f", then {layers - 2} copies of the target's last layers with zero output projections "
                     "(model.grow_feature_draft)" if layers > 2 else "")
                  + (", the target's full tied head" if full_head else
                     ", the target's tied head restricted to 8192 frequent tokens")
                  + "; own output fed as the feature below the root",
        "objective": (ONLINE_OBJECTIVE_TEXT[training["objective"]] + ", summed over 3 training-time-test levels; "
                      f"started from {start}"),
        "training": training,
        "evaluation": evaluation,
        "forward_time": forward_times(draft, lm.model),
        "machine": {"processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads()},
        "dtype": "bfloat16 (exported weights)",
    }
    export_feature_draft(draft, EAGLE_DIR, record, head_vocab)
    print("exported to", EAGLE_DIR, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
