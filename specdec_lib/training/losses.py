"""The draft-training objectives, per row of target p and draft q at T = 1 unless given:

* `topk_kl` / `full_kl`: forward KL(p || q) from the target's stored top-k (or full) log-probs, the top-k
  form coarsened to the k stored tokens plus one bucket for the rest (DistillSpec's FKL, Zhou et al. 2024);
* `sub_vocab_kl` / `sub_vocab_rejection`: forward KL, or the rejection probability 1 - sum_x min(p, q),
  with q over the draft's head vocabulary and p the target's exact rows.
"""

from __future__ import annotations

import torch

from .evaluation import overlap

__all__ = ["topk_kl", "full_kl", "sub_vocab_kl", "sub_vocab_rejection"]


def topk_kl(student_logits: torch.Tensor, topk_idx: torch.Tensor | None, topk_logp: torch.Tensor,
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


def sub_vocab_kl(target_logp: torch.Tensor, draft_logits: torch.Tensor, vocab_ids: torch.Tensor) -> torch.Tensor:
    """Per row, KL(p || q) restricted to the draft's head vocabulary ``vocab_ids``: sum over x in the
    vocabulary of p(x) (log p(x) - log q(x)), with ``target_logp`` [R, V] the target's full log-probs and
    ``draft_logits`` [R, K] the draft's logits over the vocabulary. The target's mass outside it adds a
    constant the draft cannot change (it is 0 there), left out; with the full vocabulary it is the KL."""
    logp = target_logp[:, vocab_ids].float()
    logq = torch.log_softmax(draft_logits.float(), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)


def sub_vocab_rejection(target_logp: torch.Tensor, draft_logits: torch.Tensor, vocab_ids: torch.Tensor) -> torch.Tensor:
    """Per row, the rejection probability of token-level speculative sampling at T = 1: 1 - sum over x of
    min(p(x), q(x)) = TV(p, q), with q the draft's softmax over its head vocabulary ``vocab_ids`` (0 elsewhere)
    and p the target's full law (``target_logp`` [R, V]). Minimising it maximises the acceptance the draft's
    record measures; forward KL only bounds it (Pinsker). It is `theory.total_variation` against q padded
    with zeros, computed over the head vocabulary only (no [R, V]-wide copy of q)."""
    p = target_logp[:, vocab_ids].float().exp()
    q = torch.softmax(draft_logits.float(), dim=-1)
    return 1.0 - overlap(p, q)
