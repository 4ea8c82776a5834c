"""One distillation step: the student's logits at the stored rows (`student_rows`), the forward KL from
the target's top-k (or full) rows to them (`losses.topk_kl`), on the student's own parameters only
(`trainable_parameters`), one AdamW step (`train_step`)."""

from __future__ import annotations

from typing import Sequence

import torch

from ..losses import topk_kl
from .data import Sample


def student_rows(student, samples: Sequence[Sample], continuation_only: bool = False) -> torch.Tensor:
    """Student logits [R, V] at the stored rows of ``samples`` (one right-padded forward; the LM head
    runs on the needed rows only). With ``continuation_only`` only the rows after the prompt."""
    device = student.get_input_embeddings().weight.device
    width = max(len(s.tokens) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    mask = torch.zeros(len(samples), width, dtype=torch.long)
    for b, s in enumerate(samples):
        ids[b, : len(s.tokens)] = s.tokens
        mask[b, : len(s.tokens)] = 1
    hidden = student.model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
    picks = []
    for b, s in enumerate(samples):
        first = s.start + (max(s.prompt_len - 1 - s.start, 0) if continuation_only else 0)
        picks.append(hidden[b, first: len(s.tokens) - 1])
    return student.lm_head(torch.cat(picks))


def _rows(samples: Sequence[Sample], continuation_only: bool = False) -> tuple[torch.Tensor | None, torch.Tensor]:
    idx, logp = [], []
    for s in samples:
        skip = max(s.prompt_len - 1 - s.start, 0) if continuation_only else 0
        if s.topk_idx is not None:
            idx.append(s.topk_idx[skip:])
        logp.append(s.topk_logp[skip:])
    if idx and len(idx) != len(logp):
        raise ValueError("cannot mix full-distribution and top-k samples in one batch")
    return (torch.cat(idx) if idx else None), torch.cat(logp)


def trainable_parameters(student) -> dict[str, torch.nn.Parameter]:
    """The student-specific parameters (decoder layers and final norm); everything else frozen."""
    named = {}
    for name, p in student.named_parameters():
        if name.startswith("model.layers.") or name == "model.norm.weight":
            p.requires_grad_(True)
            named[name] = p
        else:
            p.requires_grad_(False)
    if not named:
        raise ValueError("the student has no decoder-layer parameters to train")
    return named


def train_step(student, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], temperature: float = 1.0,
               grad_clip: float | None = 1.0) -> float:
    """One AdamW step on the mean forward KL over all stored rows of ``samples``; returns that loss."""
    student.train()
    logits = student_rows(student, samples)
    idx, logp = _rows(samples)
    device = logits.device
    loss = topk_kl(logits, None if idx is None else idx.to(device), logp.to(device), temperature).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], grad_clip)
    optimizer.step()
    student.eval()
    return float(loss.detach())
