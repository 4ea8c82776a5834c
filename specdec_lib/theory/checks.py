"""Input checks shared by the theory modules: acceptance vectors, parents lists, integers, monotone r,
and matched [M, V] target / draft rows (validated as distributions, float64 on the CPU)."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ..tree import validate_parents

_TOL = 1e-9


def _prob_vector(values, name: str = "acceptance_vector", allow_empty: bool = False) -> np.ndarray:
    """A 1-D float64 vector of probabilities with sum <= 1 (a sub-distribution over positions)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of probabilities, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty; it needs at least p_1")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has non-finite entries")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries: {arr[arr < 0][:5].tolist()}")
    total = float(arr.sum())
    if total > 1 + 1e-6:
        raise ValueError(
            f"{name} sums to {total:.6g} > 1; entries must be marginal probabilities that the k-th child is "
            "THE accepted one (not conditional acceptance rates), so they sum to at most 1")
    return arr


def _parents_list(parents) -> list[int]:
    """Validate a parents list (DraftTree convention); accepts a list, a tensor or a DraftTree."""
    if hasattr(parents, "parent_list"):
        parents = parents.parent_list
    if isinstance(parents, torch.Tensor):
        parents = parents.tolist()
    return validate_parents(parents)


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _is_non_increasing(r: np.ndarray) -> bool:
    return bool(np.all(np.diff(r) <= 1e-12))


def _monotone_check(r: np.ndarray, mode: str, what: str) -> None:
    if mode not in ("warn", "raise", "ignore"):
        raise ValueError(f"check_monotone must be 'warn', 'raise' or 'ignore', got {mode!r}")
    if mode == "ignore" or _is_non_increasing(r):
        return
    message = (f"r is not non-increasing in the index ({what}); Algorithm 3's greedy tree is then not "
               "guaranteed optimal (docs/methods/erss.md §2.7 and test T3: r=(.5,.1,.4), k=3 gives the chain, "
               "G=1.875, while batch(3) gives 2.0)")
    if mode == "raise":
        raise ValueError(message)
    warnings.warn(message, UserWarning, stacklevel=3)


def _cumulative(p: np.ndarray, k: int) -> float:
    """P_k = sum_{i <= k} p_i (positions beyond the vector contribute 0)."""
    return float(p[:k].sum())


def _matched(target_rows, draft_rows) -> tuple[torch.Tensor, torch.Tensor]:
    """Shape checks of matched [M, V] target / draft rows (1-D inputs are one row)."""
    p = torch.as_tensor(target_rows)
    q = torch.as_tensor(draft_rows)
    if p.dim() == 1:
        p = p.unsqueeze(0)
    if q.dim() == 1:
        q = q.unsqueeze(0)
    if p.dim() != 2 or q.dim() != 2:
        raise ValueError(f"rows must be [M, V] tensors, got target {tuple(p.shape)} and draft {tuple(q.shape)}")
    if p.shape[1] != q.shape[1]:
        raise ValueError(f"target vocabulary {p.shape[1]} differs from draft vocabulary {q.shape[1]}")
    if p.shape[0] != q.shape[0]:
        raise ValueError(f"{p.shape[0]} target rows but {q.shape[0]} draft rows; rows must be matched contexts")
    if p.shape[0] == 0:
        raise ValueError("no rows given")
    return p, q


def _to_distributions(p: torch.Tensor, q: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a block of rows as distributions and return them in float64 on the CPU."""
    p = p.detach().to("cpu", torch.float64)
    q = q.detach().to("cpu", torch.float64)
    for name, rows in (("target", p), ("draft", q)):
        if not bool(torch.isfinite(rows).all()):
            raise ValueError(f"{name} rows have non-finite entries")
        if bool((rows < 0).any()):
            raise ValueError(f"{name} rows have negative entries")
        sums = rows.sum(-1)
        bad = (sums - 1).abs() > 1e-4
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"{name} row {offset + i} sums to {float(sums[i]):.6g}, not 1: rows must be "
                             "distributions (after temperature / top-p)")
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def _rows(target_rows, draft_rows) -> tuple[torch.Tensor, torch.Tensor]:
    return _to_distributions(*_matched(target_rows, draft_rows))
