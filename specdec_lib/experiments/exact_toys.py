"""Exact tables on toy pairs for the notebooks: HSD's two readings (the paper's Algorithm 2 and the
authors' released code) against the target's law and Block Verification's (docs/papers/hsd.md), and Block
Verification against token verification at temperature 0, where Sun et al. (Section 6.2) say it degenerates to
token verification."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from .. import exact
from ..models.synthetic import tempered
from ..tree import chain_parents
from ..verifiers import NOT_LOSSLESS

HSD_READINGS = ("hsd", "hsd_released")


def hsd_exact_table(toys: Mapping[str, tuple], gammas: Sequence[int] = (1, 2, 3)) -> pd.DataFrame:
    """One row per (toy pair, gamma, HSD reading): the largest gap of its exact law of the first gamma + 1
    tokens to the target's and to Block Verification's, and the exact tokens per step of token, block
    and the reading. ``toys`` maps a label to ``(target, draft)`` toy LMs (`models.synthetic`)."""
    _check_toys(toys, gammas)
    rows = []
    for label, (target, draft) in toys.items():
        for gamma in gammas:
            parents, horizon = chain_parents(gamma), gamma + 1
            truth = exact.target_law(target, (0,), horizon)
            block = exact.step_output_law("block", target, draft, (0,), parents, "iid", horizon)
            tokens = {v: exact.expected_step_tokens(v, target, draft, (0,), parents) for v in ("token", "block")}
            for reading in HSD_READINGS:
                verifier = NOT_LOSSLESS.get(reading, reading)  # the exact harness takes a measured-only one as an object
                law = exact.step_output_law(verifier, target, draft, (0,), parents, "iid", horizon)
                rows.append({"pair": label, "gamma": gamma, "verifier": reading,
                             "max |output law − target|": exact.max_abs_diff(law, truth),
                             "max |law − Block's law|": exact.max_abs_diff(law, block), **tokens,
                             "tokens per step": exact.expected_step_tokens(verifier, target, draft, (0,), parents)})
    return pd.DataFrame(rows)


def _check_toys(toys: Mapping[str, tuple], gammas: Sequence[int]) -> None:
    if not toys:
        raise ValueError("toys: give at least one (target, draft) pair")
    if not gammas or any(not isinstance(g, int) or isinstance(g, bool) or g < 1 for g in gammas):
        raise ValueError(f"gammas: positive integers expected, got {list(gammas)!r}")


def block_token_gap_table(toys: Mapping[str, tuple], temperatures: Sequence[float] = (0.0, 1.0),
                          gammas: Sequence[int] = (1, 2, 3)) -> pd.DataFrame:
    """One row per (toy pair, temperature, gamma): the exact tokens per step of token and Block Verification on
    a chain of gamma and their difference (both are lossless, so their output laws agree at every
    temperature; what the verification changes is how many tokens a step keeps). Both models of a pair are
    tempered (`models.synthetic.tempered`; T = 0 is the one-hot argmax of each: greedy target and draft)."""
    _check_toys(toys, gammas)
    if not temperatures:
        raise ValueError("temperatures: give at least one")
    rows = []
    for label, (target, draft) in toys.items():
        for temperature in temperatures:
            p, q = tempered(target, temperature), tempered(draft, temperature)
            for gamma in gammas:
                tokens = {v: exact.expected_step_tokens(v, p, q, (0,), chain_parents(gamma)) for v in ("token", "block")}
                rows.append({"pair": label, "temperature": temperature, "gamma": gamma,
                             "tokens per step (token)": tokens["token"], "tokens per step (block)": tokens["block"],
                             "block − token": tokens["block"] - tokens["token"]})
    return pd.DataFrame(rows)
