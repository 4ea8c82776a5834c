"""Measuring the independent draft: held-out acceptance at T = 1 (`acceptance_rate`), Sequoia / ERSS
vectors (`measure_theory`), a new measurement of the exported draft with its forward times
(`remeasure_export`, `timing.measure_forward_times`), and the tables the notebook shows."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Sequence

import torch

from ..evaluation import overlap, theory_vectors
from ..timing import measure_forward_times
from .data import DEFAULT_RUN_DIR, Sample, load_samples
from .export import DEFAULT_EXPORT_DIR, RECORD_FILE, TARGET_NAME, _atomic_json, load_exported, write_head_vocab
from .loss import _rows, student_rows


@torch.no_grad()
def acceptance_rate(student, eval_samples: Sequence[Sample], temperature: float = 1.0,
                    batch_size: int = 8) -> dict:
    """Mean acceptance rate on target-sampled continuations: the mean over continuation positions of
    sum_x min(p(x), q(x)) (Leviathan et al. 2023, Sec. 3.3: beta = 1 - TV(p, q)), with p the target and
    q the student at ``temperature``. ``eval_samples`` must hold full target distributions (topk = V).
    Also returns the mean KL(p || q) and the per-depth means (position i of the continuation)."""
    if not eval_samples:
        raise ValueError("no evaluation samples")
    accept, kls, depth_sum, depth_cnt = [], [], {}, {}
    for at in range(0, len(eval_samples), batch_size):
        chunk = eval_samples[at: at + batch_size]
        logits = student_rows(student, chunk, continuation_only=True).float()
        idx, logp = _rows(chunk, continuation_only=True)
        if idx is not None:
            raise ValueError("acceptance_rate needs the target's full distributions (samples drawn with "
                             "topk >= vocabulary size), got top-k rows")
        p = logp.to(logits.device).float().exp()
        q = torch.softmax(logits / temperature, dim=-1)
        acc = overlap(p, q).cpu()
        kl = (p * (torch.log(p.clamp(min=1e-30)) - torch.log(q.clamp(min=1e-30)))).sum(-1).cpu()
        accept.append(acc)
        kls.append(kl)
        at_row = 0
        for s in chunk:
            rows = len(s.tokens) - s.prompt_len
            for d in range(rows):
                depth_sum[d] = depth_sum.get(d, 0.0) + float(acc[at_row + d])
                depth_cnt[d] = depth_cnt.get(d, 0) + 1
            at_row += rows
    accept_all = torch.cat(accept)
    return {"mean": float(accept_all.mean()), "kl": float(torch.cat(kls).mean()),
            "positions": int(accept_all.numel()), "sequences": len(eval_samples),
            "by_depth": [depth_sum[d] / depth_cnt[d] for d in sorted(depth_sum)]}


def measure_theory(student, eval_samples: Sequence[Sample], max_children: int = 8, max_rows: int = 64,
                   num_samples: int = 8, keep_top: int | None = None, seed: int = 0) -> dict | None:
    """Sequoia's positional acceptance vector (children drawn without replacement) and ERSS's 0th-order
    accepted-index distribution r (exponential races), measured with `specdec_lib.theory`
    (``positional_acceptance`` / ``erss_index_distribution``, Monte Carlo with ``num_samples`` per row) on
    ``max_rows`` random held-out (target, draft) row pairs at T = 1.

    With ``keep_top`` the rows are restricted to the union over the chosen rows of each row's ``keep_top``
    most likely target and draft tokens and renormalised (cheaper; the dropped mass is reported as
    ``theory_dropped_mass``, the largest per row of p or q: a poorly trained draft is flat, so the default
    keeps the whole vocabulary)."""
    rows_p, rows_q = [], []
    with torch.no_grad():
        for s in eval_samples:
            logits = student_rows(student, [s], continuation_only=True).float()
            _, logp = _rows([s], continuation_only=True)
            rows_p.append(logp.float().exp())
            rows_q.append(torch.softmax(logits, dim=-1))
    p, q = torch.cat(rows_p), torch.cat(rows_q)
    pick = torch.randperm(p.shape[0], generator=torch.Generator().manual_seed(seed))[:max_rows]
    p, q = p[pick].double(), q[pick].double()
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    keep = torch.ones(p.shape[1], dtype=torch.bool)
    if keep_top is not None and keep_top < p.shape[1]:
        keep[:] = False
        keep[p.topk(keep_top, dim=-1).indices.reshape(-1)] = True
        keep[q.topk(keep_top, dim=-1).indices.reshape(-1)] = True
    dropped = float(torch.maximum(p[:, ~keep].sum(-1), q[:, ~keep].sum(-1)).max()) if bool((~keep).any()) else 0.0
    p, q = p[:, keep], q[:, keep]
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    return {**theory_vectors(p, q, max_children, num_samples, seed),
            "theory_measurement": {"rows": int(p.shape[0]), "max_children": max_children,
                                   "num_samples": num_samples, "vocabulary_kept": int(keep.sum()),
                                   "theory_dropped_mass": dropped, "temperature": 1.0,
                                   "functions": "specdec_lib.theory.positional_acceptance(without_replacement), "
                                                "erss_index_distribution(erss)"}}


def _theory_extras():
    """`measure_theory` as a per-round hook for `distill`."""
    return lambda student, eval_samples: measure_theory(student, eval_samples)


def remeasure_export(export_dir: Path | str = DEFAULT_EXPORT_DIR, run_dir: Path | str = DEFAULT_RUN_DIR,
                     target_model: str = TARGET_NAME, device=None, theory: bool = True,
                     timing: bool = True, head_vocab_size: int | None = None) -> dict:
    """Load the exported draft as it is deployed (`load_exported` with its head vocabulary), measure
    again on the run's held-out set (acceptance at T = 1; optionally the Sequoia / ERSS vectors via
    `measure_theory` and the forward times, `timing.measure_forward_times`) and update its ``draft.json``. ``head_vocab_size`` first
    (re)writes the head vocabulary (`write_head_vocab`); the record then also holds the full head's
    acceptance and the target's mass outside the subset, for comparison. Returns the updated record."""
    from ...models import load_model  # imports transformers (heavy)

    export_dir, run_dir = Path(export_dir), Path(run_dir)
    eval_path = run_dir / "data" / "eval.safetensors"
    if not eval_path.is_file():
        raise ValueError(f"no held-out set at {eval_path}: run the distillation first")
    lm = load_model(target_model, device=device)
    eval_samples = load_samples(eval_path)
    record = json.loads((export_dir / RECORD_FILE).read_text())
    if head_vocab_size:
        record["head_vocabulary"] = write_head_vocab(export_dir, run_dir, head_vocab_size)
    draft = load_exported(lm.model, export_dir, head_vocab=True)
    if "head_vocabulary" in record:
        full = acceptance_rate(load_exported(lm.model, export_dir), eval_samples)
        ids = draft.get_output_embeddings().vocab_ids
        outside = [1.0 - float(_rows([s], continuation_only=True)[1].float().exp()[:, ids].sum(-1).mean())
                   for s in eval_samples]
        record["head_vocabulary"].update(full_head_acceptance=full["mean"], full_head_kl=full["kl"],
                                         target_mass_outside=statistics.fmean(outside),
                                         note="mean_kl below is of the subset head: q = 0 outside it "
                                              "(clamped to 1e-30), so it is large by construction")
    res = acceptance_rate(draft, eval_samples)
    ev = record.setdefault("evaluation", {})
    ev.update({"mean_acceptance": res["mean"], "mean_kl": res["kl"], "positions": res["positions"],
               "sequences": res["sequences"], "acceptance_by_depth": res["by_depth"][:64]})
    if theory:
        extra = measure_theory(draft, eval_samples)
        if extra is not None:
            ev.update(extra)
            record.pop("theory_note", None)
    if timing:
        record["forward_time"] = measure_forward_times(draft, lm.model)
    _atomic_json(record, export_dir / RECORD_FILE)
    return record


def summary_table(record: dict, acceptance_goal: float = 0.6, cost_goal: float = 0.25):
    """A one-column pandas table of a draft record: data, steps, acceptance (goal >= ``acceptance_goal``),
    forward times (goal: draft / target <= ``cost_goal``)."""
    import pandas as pd  # only for the notebook's tables

    tr, ev, ft = record.get("training", {}), record.get("evaluation", {}), record.get("forward_time") or {}
    rows = {
        "layers": record.get("num_hidden_layers", tr.get("layers")),
        "training sequences": tr.get("sequences"), "training tokens": tr.get("tokens"),
        "trained positions": tr.get("trained_positions"), "steps": tr.get("steps"),
        "training minutes": round(tr.get("train_minutes", float("nan")), 1),
        "text generation minutes": round(tr.get("generation_minutes", float("nan")), 1),
        "learning rate": tr.get("lr"),
        "held-out acceptance (T=1), untrained": ev.get("untrained_acceptance"),
        "held-out acceptance (T=1)": ev.get("mean_acceptance"),
        f"acceptance goal >= {acceptance_goal}": (ev.get("mean_acceptance") or 0) >= acceptance_goal,
        "draft forward ms (1 token, cache)": ft.get("draft_ms"), "target forward ms": ft.get("target_ms"),
        "draft / target": ft.get("ratio"),
        f"cost goal <= {cost_goal}": (ft.get("ratio") or math.inf) <= cost_goal,
    }
    head = record.get("head_vocabulary")
    if head:
        rows["head vocabulary (most frequent tokens)"] = head.get("size")
        rows["held-out acceptance (T=1), full head"] = head.get("full_head_acceptance")
        rows["target mass outside the head vocabulary"] = head.get("target_mass_outside")
    if "sequoia_positional_acceptance" in ev:
        rows["Sequoia p_1..p_4"] = [round(x, 3) for x in ev["sequoia_positional_acceptance"][:4]]
    if "erss_r_vector" in ev:
        rows["ERSS r(1..4)"] = [round(x, 3) for x in ev["erss_r_vector"][:4]]
    return pd.DataFrame({"value": list(rows.values())}, index=list(rows.keys()))


def loss_curve_frame(record: dict, label: str = "draft"):
    """The recorded training loss curve (EMA of the KL) as a pandas frame: step, loss, minutes, run."""
    import pandas as pd  # only for the notebook's tables

    curve = record.get("training", {}).get("loss_curve") or []
    return pd.DataFrame([{"step": c[0], "loss (KL, EMA)": c[1], "train minutes": c[2], "run": label} for c in curve])
