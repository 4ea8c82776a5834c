"""What both drafts' measurements share: the per-row acceptance of token-level speculative sampling
(`overlap`: sum_x min(p(x), q(x)) = 1 - TV(p, q), Leviathan et al. 2023, Sec. 3.3), Sequoia's positional
acceptance vector and ERSS's accepted-index distribution from (target, draft) rows (`theory_vectors`),
and a draft's record ``draft.json`` (`read_record`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .. import theory

__all__ = ["RECORD_FILE", "overlap", "theory_vectors", "read_record"]

RECORD_FILE = "draft.json"


def overlap(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Per row, sum_x min(p(x), q(x)): the probability that token-level speculative sampling accepts a draw
    of q against p (rows [R, V] -> [R])."""
    return torch.minimum(p, q).sum(-1)


def theory_vectors(p: torch.Tensor, q: torch.Tensor, max_children: int = 8, num_samples: int = 8,
                   seed: int = 0) -> dict[str, list[float]]:
    """Sequoia's positional acceptance vector (children drawn without replacement) and ERSS's 0th-order
    accepted-index distribution r (exponential races) over the (target, draft) row pairs ``p``, ``q``
    (normalised float64 rows [R, V]), both by Monte Carlo with ``num_samples`` draws per row
    (`theory.positional_acceptance`, `theory.erss_index_distribution`), each from a generator seeded
    with ``seed``."""
    kw = dict(method="monte_carlo", num_samples=num_samples)
    seq = theory.positional_acceptance(p, q, max_children, "without_replacement",
                                       generator=torch.Generator().manual_seed(seed), **kw)
    r = theory.erss_index_distribution(p, q, max_children, coupling="erss",
                                       generator=torch.Generator().manual_seed(seed), **kw)
    return {"sequoia_positional_acceptance": [float(x) for x in seq], "erss_r_vector": [float(x) for x in r]}


def read_record(directory: Path | str) -> dict | None:
    """The record ``draft.json`` of the draft exported to ``directory`` (None when there is none)."""
    path = Path(directory) / RECORD_FILE
    return json.loads(path.read_text()) if path.is_file() else None
