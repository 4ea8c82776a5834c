"""Logits -> the distributions that are actually sampled from (temperature, top-p).

One convention for every method in the workbook (autoregressive sampling, every verifier, every
drafter), taken from Sequoia's code (docs/methods/sequoia.md §2.0):

* temperature ``T > 0``: ``softmax(logits / T)``; ``T = 0``: a one-hot vector on the argmax (greedy
  decoding; ties go to the lowest token id);
* top-p is applied to the TARGET only: keep the shortest prefix of tokens, sorted by probability under
  ``softmax(logits / T)``, whose cumulative probability reaches ``top_p`` (the token that crosses
  ``top_p`` is kept, the most likely token always is), renormalise;
* the DRAFT gets ``softmax(logits / T)`` without top-p (``apply_top_p=False``). Losslessness only
  concerns the target law, so this is a choice of proposal, and it is the same for every method.
"""

from __future__ import annotations

import torch

__all__ = ["process_logits", "top_p_mask", "check_sampling_args"]


def check_sampling_args(temperature: float, top_p: float) -> None:
    """ValueError unless ``temperature >= 0`` (finite) and ``0 < top_p <= 1``."""
    t = float(temperature)
    if not (t >= 0.0) or t == float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    p = float(top_p)
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def top_p_mask(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Bool mask ``[..., V]`` of the tokens kept by nucleus filtering of ``probs`` (Sequoia §2.0):
    a token is kept iff the probability of the tokens sorted strictly before it is below ``top_p``
    (sorted by decreasing probability, ties by increasing token id).

    Only the head of the order is needed: the most probable ``k`` tokens (`torch.topk`, k quadrupled until
    the nucleus ends inside them) give the number kept and the smallest kept probability; every token
    above it is kept and, among the tokens equal to it, the lowest ids fill the count. The same mask as
    a full stable sort (`_top_p_mask_by_sort`, the reference in the tests), several times faster on
    ~50k-token rows."""
    flat = probs.reshape(-1, probs.shape[-1])
    vocab = flat.shape[-1]
    k = min(vocab, 256)
    while True:
        head = torch.topk(flat, k, dim=-1, sorted=True).values
        before = torch.cumsum(head, dim=-1) - head
        kept = (before < top_p).sum(dim=-1).clamp(min=1)  # the most likely token is always kept
        if k == vocab or bool((kept < k).all()):
            break
        k = min(vocab, 4 * k)
    smallest = head.gather(-1, (kept - 1).unsqueeze(-1))
    above = flat > smallest
    ties = flat == smallest
    need = (kept - above.sum(dim=-1)).unsqueeze(-1)
    mask = above | (ties & (torch.cumsum(ties.to(torch.int64), dim=-1) <= need))
    return mask.reshape(probs.shape)


def _top_p_mask_by_sort(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`top_p_mask` by a full stable sort: the definition, kept as the tests' reference."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    keep_sorted = before < top_p
    keep_sorted[..., 0] = True
    mask = torch.zeros_like(keep_sorted)
    mask.scatter_(-1, order, keep_sorted)
    return mask


def process_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                   apply_top_p: bool = True) -> torch.Tensor:
    """Distributions ``[..., V]`` (float64: a float32 softmax over ~50k tokens can miss a total of 1
    by more than the 1e-5 a `DraftTree` tolerates) to sample from.

    ``temperature == 0`` gives the one-hot argmax; otherwise ``softmax(logits / temperature)``,
    then, when ``apply_top_p`` and ``top_p < 1``, nucleus filtering and renormalisation. Use
    ``apply_top_p=True`` for the target and ``apply_top_p=False`` for the draft (module docstring).
    """
    check_sampling_args(temperature, top_p)
    logits = logits.to(torch.float64)
    if float(temperature) == 0.0:
        out = torch.zeros_like(logits)
        out.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
        return out
    probs = torch.softmax(logits / float(temperature), dim=-1)
    if apply_top_p and float(top_p) < 1.0:
        probs = torch.where(top_p_mask(probs, float(top_p)), probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
