"""The distillation objective and one optimisation step: forward KL from the target's top-k (or full)
rows to the student (`topk_kl`, `full_kl`) at the stored rows (`student_rows`), on the student's own
parameters only (`trainable_parameters`), one AdamW step (`train_step`)."""

from __future__ import annotations

from typing import Sequence

import torch

from .data import Sample


def topk_kl(student_logits: torch.Tensor, topk_idx: torch.Tensor, topk_logp: torch.Tensor,
            temperature: float = 1.0) -> torch.Tensor:
    """Per-row forward KL(p || q) between the target p (given by its top-k log-probs) and the student
    q = softmax(student_logits / T), both coarsened to the k stored tokens plus one bucket for the rest:

        KL = sum_{i in K} p_i (log p_i - log q_i) + r_p (log r_p - log r_q),  r = 1 - sum_{i in K} (.)_i.

    Exact full KL when K is the whole vocabulary (r_p = 0), a lower bound on it otherwise (log-sum
    inequality). ``topk_idx = None``: ``topk_logp`` is the full log-distribution. Returns a tensor [R]."""
    if topk_idx is None:
        return full_kl(topk_logp, student_logits, temperature)
    if student_logits.shape[:-1] != topk_idx.shape[:-1] or topk_idx.shape != topk_logp.shape:
        raise ValueError(f"shape mismatch: logits {tuple(student_logits.shape)}, idx {tuple(topk_idx.shape)}, "
                         f"logp {tuple(topk_logp.shape)}")
    logq = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    logq_k = logq.gather(-1, topk_idx)
    logp_k = topk_logp.float()
    p_k = logp_k.exp()
    kl = (p_k * (logp_k - logq_k)).sum(-1)
    if topk_idx.shape[-1] < student_logits.shape[-1]:
        r_p = (1.0 - p_k.sum(-1)).clamp(min=0.0)
        r_q = (1.0 - logq_k.exp().sum(-1)).clamp(min=1e-12)
        kl = kl + r_p * (torch.log(r_p.clamp(min=1e-12)) - torch.log(r_q))
    return kl


def full_kl(target_logp: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-row exact KL(p || q) from full target log-probs [R, V] and student logits [R, V]."""
    if target_logp.shape != student_logits.shape:
        raise ValueError(f"shape mismatch: target {tuple(target_logp.shape)}, student {tuple(student_logits.shape)}")
    logq = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    logp = target_logp.float()
    p = logp.exp()
    return (p * (logp - logq)).masked_fill(p == 0, 0.0).sum(-1)


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
