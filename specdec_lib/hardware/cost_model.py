"""Sequoia's hardware-aware optimizer (Sequoia Sec. 3.3, Eq. 1) and the chain-length optimizer, on top of
forward-time profiles (`specdec_lib.hardware.profiling`) read as {size: time}.

* :func:`optimize_tree` maximises Speedup(n, d) = G(n, d) / (t(n) + d c) over the profiled sizes and depths
  (G from Sequoia's DP in :mod:`specdec_lib.theory`), optionally with the decoder's own work per step added
  (`overhead.dp_tree_overheads`, this workbook's extension of Eq. 1); :func:`optimize_chain` picks the best draft length of
  a chain for the token / block / ASpS verifiers from a measured acceptance profile.
* :func:`profile_times`, :func:`level_cost`, :func:`normalised_times`: the times a profile gives;
  :func:`profile_from_columns` pools per-round profiles (`profiling.round_profile`) stored as frame columns;
  :func:`predicted_speedup` is Eq. 1's speedup of one tree (:func:`speedup_from_round_profiles` from such columns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

from .. import theory


def _times(target_profile) -> dict[int, float]:
    """{n: seconds} from a profile dict (median_s) or a plain mapping {n: time}."""
    if isinstance(target_profile, Mapping) and "sizes" in target_profile:
        key = "median_s" if "median_s" in target_profile else None
        if key is None:
            raise ValueError("profile dict has 'sizes' but no 'median_s'")
        sizes, values = target_profile["sizes"], target_profile[key]
        if len(sizes) != len(values):
            raise ValueError("profile 'sizes' and 'median_s' differ in length")
        out = {int(n): float(t) for n, t in zip(sizes, values)}
    elif isinstance(target_profile, Mapping):
        out = {int(n): float(t) for n, t in target_profile.items()}
    else:
        raise ValueError("target_profile must be a profile dict (from profile/load_profile) or {size: time}")
    if not out:
        raise ValueError("the profile has no sizes")
    for n, t in out.items():
        if n < 1 or not math.isfinite(t) or t <= 0:
            raise ValueError(f"bad profile entry size {n}: time {t} (sizes >= 1, times finite and > 0)")
    return dict(sorted(out.items()))


def profile_times(target_profile) -> dict[int, float]:
    """{size: median seconds} of a profile dict, or a validated copy of a {size: time} mapping."""
    return _times(target_profile)


def level_cost(draft_profile, width: int = 1) -> float:
    """The draft's cost of one tree level of ``width`` nodes, from its profile (median seconds)."""
    times = _times(draft_profile)
    if width not in times:
        raise ValueError(f"width {width} was not profiled; profiled sizes: {sorted(times)}")
    return times[width]


def profile_column(model: str, size: int) -> str:
    """The column holding ``model``'s time for ``size`` tokens in a frame of per-round profiles
    (`profiling.round_profile`)."""
    if not isinstance(model, str) or not model or "@" in model:
        raise ValueError(f"model must be a non-empty name without '@', got {model!r}")
    return f"profile {model} @{int(size)}"


def profile_from_columns(frame, model: str) -> dict[int, float]:
    """{size: median seconds over the rows} of ``model``'s profile columns (`profile_column`) in ``frame``: the
    per-round profiles of a timing run (one row per round) pooled by their medians."""
    prefix = profile_column(model, 1)[:-1]
    columns = {int(c[len(prefix):]): c for c in frame.columns if isinstance(c, str) and c.startswith(prefix)}
    if not columns:
        raise ValueError(f"the frame has no profile columns of {model!r} (expected names like {prefix}1)")
    if not len(frame):
        raise ValueError("the frame has no rows")
    return _times({n: float(frame[c].median()) for n, c in columns.items()})


def normalised_times(target_profile) -> dict[int, float]:
    """t(n) = T(n) / T(1), Sequoia's normalisation (needs size 1 in the profile)."""
    times = _times(target_profile)
    if 1 not in times:
        raise ValueError("the profile needs size 1 to normalise t(n) by t(1)")
    return {n: t / times[1] for n, t in times.items()}


# ----- the optimizers --------------------------------------------------------------------------------

#: Sequoia's ``demo-config.json`` (docs/methods/sequoia.md §3.4): target times for sizes 1..32 and the draft time,
#: in the same (arbitrary) unit. With the REPO acceptance vector and depth <= 10 the optimum is (4, 4).
SEQUOIA_DEMO_PROFILE = {1: 10.0, 2: 10.0, 4: 10.0, 8: 12.0, 16: 14.0, 32: 18.0}
SEQUOIA_DEMO_DRAFT_COST = 0.3


@dataclass(frozen=True)
class TreePlan:
    """Result of :func:`optimize_tree`: the (size, depth) maximising Speedup(n, d) and its tree.

    ``speedup`` = G / ((t(n) + d c + overhead) / t(1)); ``time_per_token`` = (t(n) + d c + overhead) / G in
    the profile's unit; ``candidates`` = every (size, depth, G, speedup) scored, for plots.
    """
    size: int
    depth: int
    tree: list[int]
    expected_tokens: float
    speedup: float
    time_per_token: float
    candidates: list[tuple[int, int, float, float]] = field(repr=False)


def _draft_cost(draft_cost) -> float:
    if isinstance(draft_cost, Mapping):
        return level_cost(draft_cost, 1)
    value = float(draft_cost)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"draft_cost must be finite and >= 0, got {draft_cost}")
    return value


def _extra_seconds(name: str, value) -> float:
    """An added cost (an overhead), checked: a finite number >= 0, else a ValueError naming ``name``."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}") from None
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return out


def _overhead_of(step_overhead) -> Callable[[int, int], float]:
    """``optimize_tree``'s ``step_overhead`` as a function of (size, depth): a number for every tree, or a
    mapping {(size, depth): seconds} (`overhead.dp_tree_overheads`)."""
    if isinstance(step_overhead, Mapping):
        table = {(int(n), int(d)): _extra_seconds(f"step_overhead{(n, d)}", v)
                 for (n, d), v in step_overhead.items()}

        def lookup(n: int, d: int) -> float:
            if (n, d) not in table:
                raise ValueError(f"step_overhead has no entry for the tree (size {n}, depth {d})")
            return table[(n, d)]
        return lookup
    value = _extra_seconds("step_overhead", step_overhead)
    return lambda n, d: value


def _baseline(times: dict[int, float], baseline_overhead: float) -> float:
    """t(1) plus the autoregressive decoder's own seconds per token: the step a speedup is counted against."""
    return times[1] + _extra_seconds("baseline_overhead", baseline_overhead)


def optimize_tree(acceptance_vector, target_profile, draft_cost, max_size: int, max_depth: int,
                  step_overhead: float | Mapping[tuple[int, int], float] = 0.0,
                  baseline_overhead: float = 0.0) -> TreePlan:
    """Sequoia's hardware-aware optimizer (Sec. 3.3, Eq. 1; docs/methods/sequoia.md §2.11).

    Maximises Speedup(n, d) = G(n, d) / (t(n) + d c) over the profiled sizes n <= ``max_size`` and depths
    d <= ``max_depth`` (root level counted: one draft pass per level), where G(n, d) is the bounded-depth
    DP value (:func:`specdec_lib.theory.sequoia_table`), t(n) the target time normalised by t(1) and c the
    draft's per-level time normalised by t(1).

    ``target_profile``: a profile dict (:func:`profile` / :func:`load_profile`, medians used) or a mapping
    {size: time}; it must contain size 1. ``draft_cost``: the draft's time per level in the same unit as
    the target times (seconds for a profile), or the draft's profile dict (its size-1 median).
    ``step_overhead`` (same unit, default 0) adds per-step work the paper does not model (sampling, drawing,
    checks, verification, commits; docs/methods/sequoia.md §2.11): one number for every tree, or
    {(size, depth): seconds} measured per tree (`overhead.dp_tree_overheads`).
    ``baseline_overhead`` (default 0) is the autoregressive decoder's own work per token, added to t(1) in
    the speedup's numerator (it scales every speedup alike, so it never changes the choice).
    Ties keep the smaller size, then the smaller depth.
    """
    times = _times(target_profile)
    if 1 not in times:
        raise ValueError("the target profile needs size 1 (t(n) is normalised by t(1))")
    c = _draft_cost(draft_cost)
    max_size = int(max_size)
    max_depth = int(max_depth)
    if max_size < 1 or max_depth < 1:
        raise ValueError("max_size and max_depth must be >= 1")
    overhead = _overhead_of(step_overhead)
    sizes = [n for n in times if n <= max_size]
    table = theory.sequoia_table(acceptance_vector, max(sizes), max_depth)
    base = _baseline(times, baseline_overhead)
    best = None
    candidates = []
    for n in sizes:
        for d in range(1, min(max_depth, n) + 1):
            g = table.expected_tokens(n, d)
            if not math.isfinite(g):
                continue
            cost = times[n] + d * c + overhead(n, d)
            speedup = g / (cost / base)
            candidates.append((n, d, g, speedup))
            if best is None or speedup > best[3] + 1e-12:
                best = (n, d, g, speedup, cost / g)
    n, d, g, speedup, per_token = best
    return TreePlan(size=n, depth=d, tree=table.tree(n, d), expected_tokens=g, speedup=speedup,
                    time_per_token=per_token, candidates=candidates)


def best_at_size(plan: TreePlan, size: int) -> tuple[int, float, float]:
    """(depth, G, predicted speedup) of the fastest depth at ``size`` among ``plan.candidates``: the
    optimizer held to one tree size (Sequoia's Table 3 compares it with fixed sizes 128 and 256)."""
    at = [c for c in plan.candidates if c[0] == int(size)]
    if not at:
        raise ValueError(f"size {size} was not scored; scored sizes: {sorted({c[0] for c in plan.candidates})}")
    _, depth, g, speedup = max(at, key=lambda c: (c[3], -c[1]))
    return depth, g, speedup


def predicted_step_seconds(target_profile, draft_cost, size: int, depth: int, step_overhead: float = 0.0) -> float:
    """One speculative step of a tree of ``size`` nodes and ``depth`` levels in the profile's unit: t(size) +
    depth c (+ ``step_overhead``), the denominator of :func:`optimize_tree` before normalising by t(1)."""
    times = _times(target_profile)
    if size not in times:
        raise ValueError(f"size {size} was not profiled; profiled sizes: {sorted(times)}")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= size:
        raise ValueError(f"depth must be an int in [1, size], got {depth!r}")
    return times[size] + depth * _draft_cost(draft_cost) + _extra_seconds("step_overhead", step_overhead)


def predicted_speedup(expected_tokens: float, target_profile, draft_cost, size: int, depth: int,
                      step_overhead: float = 0.0, baseline_overhead: float = 0.0) -> float:
    """The optimizer's speedup of a tree over autoregressive decoding: G (t(1) (+ ``baseline_overhead``)) /
    (t(size) + depth c (+ ``step_overhead``)) (Eq. 1 before maximising; :func:`predicted_step_seconds`)."""
    g = float(expected_tokens)
    if not math.isfinite(g) or g < 1:
        raise ValueError(f"expected_tokens must be a finite number >= 1, got {expected_tokens!r}")
    times = _times(target_profile)
    if 1 not in times:
        raise ValueError("the target profile needs size 1 (the autoregressive step t(1))")
    return g * _baseline(times, baseline_overhead) / predicted_step_seconds(times, draft_cost, size, depth,
                                                                            step_overhead)


def speedup_from_round_profiles(frame, expected_tokens: float, size: int, depth: int, target: str = "target",
                                draft: str = "draft", step_overhead: str | None = None,
                                baseline_overhead: str | None = None) -> float:
    """:func:`predicted_speedup` with t(n) and c pooled from per-round profiles in ``frame``'s columns
    (:func:`profile_from_columns` of ``target``; the draft's one-token time of ``draft``): the prediction a
    rule recomputes from each resample of a timing run's prompts (`verdicts.SpeedupCheck`).
    ``step_overhead`` / ``baseline_overhead``: None (Eq. 1 alone) or the columns holding the tree's and the
    autoregressive decoder's own seconds per step (`overhead.overhead_column`), pooled by medians."""
    def median_of(column):
        if column is None:
            return 0.0
        if column not in frame.columns:
            raise ValueError(f"the frame has no column {column!r}")
        return float(frame[column].median())
    return predicted_speedup(expected_tokens, profile_from_columns(frame, target),
                             level_cost(profile_from_columns(frame, draft), 1), size, depth,
                             median_of(step_overhead), median_of(baseline_overhead))


@dataclass(frozen=True)
class ChainPlan:
    """Result of :func:`optimize_chain`: the best draft length ``gamma`` for one chain verifier.

    ``interpolated`` is True when t(gamma + 1) was read off a piecewise-linear interpolation of the profile
    (the size was not measured). ``candidates`` = every (gamma, expected tokens, speedup) scored.
    """
    verifier: str
    gamma: int
    expected_tokens: float
    speedup: float
    time_per_token: float
    interpolated: bool
    candidates: list[tuple[int, float, float]] = field(repr=False)


CHAIN_VERIFIERS = ("token", "block", "asps")


def _interpolate(times: dict[int, float], n: int) -> tuple[float, bool] | None:
    if n in times:
        return times[n], False
    sizes = sorted(times)
    if n < sizes[0] or n > sizes[-1]:
        return None
    hi = next(s for s in sizes if s > n)
    lo = max(s for s in sizes if s < n)
    w = (n - lo) / (hi - lo)
    return times[lo] * (1 - w) + times[hi] * w, True


def optimize_chain(acceptance_profile, target_profile, draft_cost, verifier: str = "token",
                   max_length: int = 16, *, interpolate: bool = True, extra_draft_passes: int = 0,
                   step_overhead: float = 0.0) -> ChainPlan:
    """Best draft length gamma of a chain for the ``token``, ``block`` or ``asps`` verifier.

    Speedup(gamma) = E[tokens | gamma] / ((t(gamma + 1) + (gamma + extra_draft_passes) c + overhead) / t(1)):
    the target scores the root plus gamma drafts in one pass, the draft runs gamma one-token passes
    (Leviathan et al.'s accounting, docs/methods/sequoia.md §2.10; ``extra_draft_passes=1`` charges Sequoia's
    d = gamma + 1 passes instead, as :func:`optimize_tree` does).

    ``acceptance_profile`` says how many tokens a step emits, bonus / correction token included:

    * a mapping {gamma: expected emitted tokens per step} measured for this verifier (e.g. the mean of
      ``len(step.emitted)`` over a decoding run with ``shape=f"chain:{gamma}"``), or
    * a mapping {verifier name: {gamma: expected tokens}} from which ``verifier``'s entry is used, or
    * a float alpha in [0, 1] (i.i.d. per-token acceptance), token verifier only: Leviathan's closed form
      (1 - alpha^(gamma+1)) / (1 - alpha). Block and ASpS verification have no closed form in alpha alone
      (their gain depends on the distributions), so they need measured values.

    t comes from ``target_profile`` (profile dict or {size: time}, must contain size 1); sizes not
    profiled are linearly interpolated when ``interpolate`` (reported in ``ChainPlan.interpolated``) and
    skipped otherwise. ``draft_cost`` as in :func:`optimize_tree`.
    """
    if verifier not in CHAIN_VERIFIERS:
        raise ValueError(f"unknown chain verifier {verifier!r}; expected one of {CHAIN_VERIFIERS}")
    times = _times(target_profile)
    if 1 not in times:
        raise ValueError("the target profile needs size 1 (t(n) is normalised by t(1))")
    c = _draft_cost(draft_cost)
    overhead = _extra_seconds("step_overhead", step_overhead)
    max_length = int(max_length)
    if max_length < 1:
        raise ValueError("max_length must be >= 1")
    if isinstance(acceptance_profile, Mapping):
        table = acceptance_profile
        if verifier in table or any(isinstance(v, Mapping) for v in table.values()):
            if verifier not in table:
                raise ValueError(f"acceptance_profile has no entry for verifier {verifier!r}")
            table = table[verifier]
        expected = {int(g): float(e) for g, e in table.items()}
        for g, e in expected.items():
            if g < 0 or not 1.0 <= e <= g + 1 + 1e-9:
                raise ValueError(f"expected tokens {e} for gamma={g} must lie in [1, gamma + 1]")
    else:
        if verifier != "token":
            raise ValueError(f"verifier {verifier!r} needs measured expected tokens per gamma (a mapping); a "
                             "scalar alpha only determines the token verifier (Leviathan's closed form)")
        alpha = float(acceptance_profile)
        expected = {g: theory.chain_expected_tokens(alpha, g) for g in range(1, max_length + 1)}
    base = times[1]
    candidates = []
    best = None
    for gamma in sorted(g for g in expected if 1 <= g <= max_length):
        t = _interpolate(times, gamma + 1) if interpolate else ((times[gamma + 1], False)
                                                                if gamma + 1 in times else None)
        if t is None:
            continue
        t_value, interpolated = t
        cost = t_value + (gamma + extra_draft_passes) * c + overhead
        speedup = expected[gamma] / (cost / base)
        candidates.append((gamma, expected[gamma], speedup))
        if best is None or speedup > best[2] + 1e-12:
            best = (gamma, expected[gamma], speedup, cost / expected[gamma], interpolated)
    if best is None:
        raise ValueError("no draft length could be scored: the profile does not cover gamma + 1 for any "
                         "gamma in the acceptance profile (enable interpolate or profile more sizes)")
    gamma, e, speedup, per_token, interpolated = best
    return ChainPlan(verifier, gamma, e, speedup, per_token, interpolated, candidates)
