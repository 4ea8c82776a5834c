"""Regime sweep: how each paper's verifier gain scales with the draft's per-token acceptance.

The project's draft accepts about 0.34 per token (T = 1); the papers' pairs accept roughly 0.6-0.8. A
verifier's expected tokens per step on a drafted tree is exact given the tree's rows, so the comparison
needs no cheap draft, only drafts of higher acceptance at the same contexts. The SYNTHETIC family
`models.interpolated.InterpolatedDraft` (q_lam ∝ q^(1 - lam) p^lam) provides them:

1. `tune_lambda` / `tune_lambda_rows`: bisection on lam for a goal acceptance, measured on matched
   target/draft rows at target-sampled contexts (`experiments.matched_rows`); acceptance = mean over the
   rows of sum_x min(p, q_lam) (`acceptance`), non-decreasing in lam (tests/test_regime.py checks it on rows);
2. `sweep_frames`: for one (target, draft) pair, the same experiments as notebooks 01-05 (chains: token /
   block / ASpS / traversal; binary trees: token / traversal; race-drawn trees: GSS / ERSS; Sequoia DP
   trees without replacement vs SpecInfer k x L i.i.d. trees), through the library's exact machinery
   (`experiments.paired_tokens_by_prompt`); ERSS vs GSS on batch(k) is compared with the star integrated
   out at every matched row (`star_batch_frame`), as notebook 03 does: a drafted star per context leaves
   a noise of several % around a difference of a fraction of a %;
3. `sweep_gains`: the paired gains of `comparisons` (`experiments.paired_gain`); traversal is compared on
   its Rao-Blackwellised estimator with a control variate, ``traversal_cv`` (same mean, far less noise:
   `traversal_identity.control_variate_ccdf`), the
   Sequoia and SpecInfer trees on ``token_rb`` (each node's own children draw integrated out, same mean:
   `node_rao_blackwell`);
4. `run_sweep`: all of it for the real draft (lam = 0), each goal, and optionally further real drafts
   (``real_drafts``: the quantized self-draft `models.quantized`, acceptance ~0.7, checks the synthetic
   family against a real draft in the papers' regime).

Tokens per step only: the synthetic drafts run a target forward per drafted level, so their timings mean
nothing (never report wall clock from them).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .. import experiments as E
from ..models.interpolated import InterpolatedDraft, InterpolatedToyLM, mix_rows, synthetic_name
from ..theory import chain_expected_tokens, expected_tokens_positional, k_sequences_expected_tokens, positional_acceptance, sequoia_tree
from ..tree import parent_depths, parse_shape

__all__ = ["GOALS", "acceptance", "acceptance_curve", "LambdaFit", "tune_lambda_rows", "TuningSettings", "tune_lambda",
           "interpolated_pair", "SweepConfig", "Comparison", "comparisons", "PaperPoint", "PAPER_POINTS",
           "implied_acceptance", "paper_points", "race_parents", "sequoia_shapes", "star_batch_frame", "sweep_frames",
           "sweep_gains", "run_sweep", "range_verdict", "SweepResult"]

GOALS = (0.6, 0.7, 0.8)


# ----------------------------------------------------------------------------------------- tuning

def acceptance(target_rows: torch.Tensor, draft_rows: torch.Tensor) -> float:
    """Mean over rows of sum_x min(p(x), q(x)) (the per-token acceptance of one draft, 1 - TV)."""
    p = torch.as_tensor(target_rows, dtype=torch.float64)
    q = torch.as_tensor(draft_rows, dtype=torch.float64)
    if p.shape != q.shape:
        raise ValueError(f"rows differ in shape: {tuple(p.shape)} vs {tuple(q.shape)}")
    return float(torch.minimum(p, q).sum(-1).mean())


def acceptance_curve(target_rows: torch.Tensor, draft_rows: torch.Tensor, lams: Sequence[float]) -> np.ndarray:
    """`acceptance` of the synthetic draft q_lam (`models.interpolated.mix_rows`) for each lam."""
    return np.array([acceptance(target_rows, mix_rows(target_rows, draft_rows, lam)) for lam in lams])


@dataclass
class LambdaFit:
    """The lam whose synthetic draft reaches ``goal``: ``acceptance`` (achieved, same rows), the real
    draft's ``draft_acceptance`` (lam = 0), the number of ``rows`` and bisection ``iterations``."""

    goal: float
    lam: float
    acceptance: float
    draft_acceptance: float
    rows: int
    iterations: int

    @property
    def name(self) -> str:
        return synthetic_name(self.lam)


def tune_lambda_rows(target_rows: torch.Tensor, draft_rows: torch.Tensor, goal: float, tol: float = 1e-3,
                     max_iter: int = 60) -> LambdaFit:
    """Bisection on lam in [0, 1] until the rows' acceptance of q_lam is within ``tol`` of ``goal``.

    ``target_rows`` / ``draft_rows``: matched distributions at the sampling temperature (T > 0, top-p 1).
    ValueError when the goal is below the draft's own acceptance or is not reached within ``tol`` (the
    family keeps the draft's support for lam < 1, so goals above the target's mass on it are unreachable).
    """
    goal = float(goal)
    if not 0.0 < goal < 1.0:
        raise ValueError(f"goal acceptance must be in (0, 1), got {goal}")
    lo, hi = 0.0, 1.0
    a_lo = acceptance(target_rows, draft_rows)
    rows = int(torch.as_tensor(target_rows).reshape(-1, torch.as_tensor(target_rows).shape[-1]).shape[0])
    if a_lo > goal + tol:
        raise ValueError(f"the draft already accepts {a_lo:.4f} > goal {goal}: nothing to interpolate")
    if abs(a_lo - goal) <= tol:
        return LambdaFit(goal, 0.0, a_lo, a_lo, rows, 0)
    lam, a = 0.0, a_lo
    for it in range(1, max_iter + 1):
        lam = 0.5 * (lo + hi)
        a = acceptance(target_rows, mix_rows(target_rows, draft_rows, lam))
        if abs(a - goal) <= tol:
            return LambdaFit(goal, lam, a, a_lo, rows, it)
        if a < goal:
            lo = lam
        else:
            hi = lam
    raise ValueError(f"no lam reaches acceptance {goal} within {tol} (last lam {lam:.6f} gives {a:.4f}); "
                     "the synthetic family keeps the draft's support, so its acceptance is bounded by the "
                     "target's mass there")


def _as_pair(pair_or_models) -> "E.Pair":
    if isinstance(pair_or_models, E.Pair):
        return pair_or_models
    target, draft = pair_or_models
    kind = "hf" if hasattr(target, "session") else "toy"
    return E.Pair(target, draft, kind, f"{getattr(target, 'name', 'target')} / {getattr(draft, 'name', 'draft')}")


@dataclass(frozen=True)
class TuningSettings:
    """How `tune_lambda` measures and bisects: the temperature of the matched rows (> 0), the tokens the
    target generates per prompt, the seed of its sampling, the tolerance on the goal acceptance, a progress bar."""

    temperature: float = 1.0
    max_new_tokens: int = 32
    seed: int = 0
    tol: float = 1e-3
    progress: bool = False

    def __post_init__(self) -> None:
        if float(self.temperature) <= 0.0:
            raise ValueError("tune_lambda needs temperature > 0 (at T = 0 every row is one-hot)")


def tune_lambda(pair_or_models, prompts: Sequence["E.PromptIds"], goal: float,
                settings: TuningSettings = TuningSettings(), rows=None) -> LambdaFit:
    """lam of the synthetic draft with per-token acceptance ``goal`` (`tune_lambda_rows`) on matched rows
    of ``pair_or_models`` (an `experiments.Pair` or a (target, draft) tuple) along the target's own
    continuations of ``prompts`` (`experiments.matched_rows`, top-p 1), under ``settings``
    (`TuningSettings`). ``rows``: precomputed (P, Q)."""
    if rows is None:
        rows = E.matched_rows(_as_pair(pair_or_models), prompts, settings.temperature, 1.0,
                              max_new_tokens=settings.max_new_tokens, seed=settings.seed, progress=settings.progress)
    P, Q = rows
    return tune_lambda_rows(P, Q, goal, settings.tol)


def interpolated_pair(pair: "E.Pair", lam: float) -> "E.Pair":
    """``pair`` with its draft replaced by the synthetic draft of weight ``lam`` (toy pairs:
    `InterpolatedToyLM`, hf pairs: `InterpolatedDraft`). TOKENS PER STEP ONLY."""
    if pair.kind == "toy":
        draft = InterpolatedToyLM(pair.target, pair.draft, lam)
    else:
        draft = InterpolatedDraft(pair.target, pair.draft, lam)
    return E.Pair(pair.target, draft, pair.kind, f"{pair.name} -> {synthetic_name(lam)}", 0.0, pair.context_free)


# ----------------------------------------------------------------------------------------- the sweep

@dataclass
class SweepConfig:
    """Sizes of the sweep's experiments (defaults: the papers' headline settings).

    chain: drafted chain length (every chain comparison is a prefix of it); block_gamma / asps_n /
    traversal_depth: the chain lengths compared for block vs token, ASpS vs SpS and traversal vs token;
    binary_depth: drafted levels of the binary tree (traversal vs token); race_batch / race_sequence: the
    star and the chain of the race-drawn tree (ERSS vs GSS); tree_size / tree_depth: size (root included)
    and depth limit of the Sequoia and k x L trees; copies / binary_copies: independent chains / binary trees
    per context; binary_copies_by_regime: regime label (`run_sweep`, e.g. "synthetic 0.80") -> binary trees per
    context there instead (where the gain is smallest); mc_samples: Monte Carlo draws of the positional
    acceptance (without replacement); shape_rows: at most this many of the matched rows (evenly spaced)
    measure the acceptance vectors of those trees; star_samples: verifier -> stars integrated over per matched
    row for ERSS vs GSS on batch(race_batch) (`experiments.index_law_at_rows`, both Rao-Blackwellised: GSS's
    stars; for ERSS, the race winners sampled beyond each row's 32 likeliest tokens)."""

    temperature: float = 1.0
    max_new_tokens: int = 16
    seed: int = 0
    chain: int = 10
    block_gamma: int = 8
    asps_n: int = 10
    traversal_depth: int = 5
    binary_depth: int = 5
    race_batch: int = 4
    race_sequence: int = 4
    tree_size: int = 32
    tree_depth: int = 8
    copies: int = 2
    binary_copies: int = 1
    binary_copies_by_regime: dict = field(default_factory=dict)
    mc_samples: int = 8
    shape_rows: int = 32
    star_samples: dict = field(default_factory=lambda: {"token": 8, "erss": 16})
    experiments: tuple = ("chain", "binary", "race", "star", "trees")

    def __post_init__(self):
        for name in ("copies", "binary_copies"):
            _check_count(name, getattr(self, name))
        if not isinstance(self.binary_copies_by_regime, Mapping):
            raise ValueError(f"binary_copies_by_regime must be a dict, got {self.binary_copies_by_regime!r}")
        for label, count in self.binary_copies_by_regime.items():
            _check_count(f"binary_copies_by_regime[{label!r}]", count)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "SweepConfig":
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"sweep: unknown settings {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        out = cls(**values)
        out.experiments = tuple(out.experiments)
        return out


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True)
class Comparison:
    """One paired comparison: ``method`` vs ``baseline`` (values of ``column``) on ``view`` of
    ``experiment``; ``pair_on`` as in `experiments.paired_gain`; ``paper``: a `results.PAPERS` key;
    ``sign``: the claimed direction (+1: method ahead); ``verifier``: the rows of that verifier (or estimator)
    only, where the arms are compared by ``column`` and each tree carries several."""

    key: str
    title: str
    paper: str
    experiment: str
    view: str
    method: str
    baseline: str
    column: str = "verifier"
    pair_on: str = "tree"
    sign: int = 1
    verifier: str | None = None


def comparisons(cfg: SweepConfig) -> list[Comparison]:
    """The comparisons the papers make, at the sizes of ``cfg``."""
    out = [
        Comparison("block_vs_token", f"block vs token, chain γ = {cfg.block_gamma}", "block", "chain",
                   f"chain:{cfg.block_gamma}", "block", "token"),
        Comparison("asps_vs_sps", f"ASpS vs SpS, chain n = {cfg.asps_n}", "asps", "chain", f"chain:{cfg.asps_n}",
                   "asps", "token"),
        Comparison("traversal_chain", f"traversal vs token, chain depth {cfg.traversal_depth}", "traversal", "chain",
                   f"chain:{cfg.traversal_depth}", "traversal_cv", "token"),
        Comparison("traversal_binary", f"traversal vs token, binary depth {cfg.binary_depth}", "traversal", "binary",
                   f"binary:d{cfg.binary_depth}", "traversal_cv", "token"),
        Comparison("sequoia_vs_specinfer", f"Sequoia DP tree (w/o repl.) vs SpecInfer k×L (iid), size {cfg.tree_size}",
                   "sequoia", "trees", "tree", "Sequoia", "SpecInfer", column="tree", verifier="token_rb"),
        Comparison("erss_batch", f"ERSS vs GSS, batch k = {cfg.race_batch}", "erss", "star",
                   f"batch:{cfg.race_batch}", "erss", "token"),
        # on the chain both estimators are smooth functions of the drafted tokens: ERSS's exact value given the
        # races is 0/1 per level (node_rao_blackwell.erss_reach)
        Comparison("erss_sequence", f"ERSS vs GSS, sequence k = {cfg.race_sequence}", "erss", "race",
                   f"sequence:{cfg.race_sequence}", "erss_rb", "token_rb", sign=-1),
    ]
    return [c for c in out if c.experiment in cfg.experiments]


@dataclass(frozen=True)
class PaperPoint:
    """A paper's gain for a comparison. ``baseline_tokens`` / ``drafted``: the paper's baseline tokens per
    step on a chain of that many drafts, when reported (gives `implied_acceptance`)."""

    key: str
    gain: float | None
    label: str
    baseline_tokens: float | None = None
    drafted: int | None = None

    @property
    def implied_acceptance(self) -> float | None:
        if self.baseline_tokens is None or self.drafted is None:
            return None
        return implied_acceptance(self.baseline_tokens, self.drafted)


PAPER_POINTS = (
    PaperPoint("block_vs_token", 0.0830, "Sun et al. PaLM-2 XXS→S (γ = 8)", 3.41, 8),
    PaperPoint("block_vs_token", 0.0870, "Spec-Bench Vicuna-68M→7B (γ = 8)"),
    PaperPoint("asps_vs_sps", 0.070, "Hu & Huang Table 7, summarization (n = 10)", 2.254, 10),
    PaperPoint("asps_vs_sps", 0.037, "Hu & Huang Table 6, MT (n = 10)"),
    PaperPoint("traversal_chain", 0.028, "Weng et al. Llama3 1B→8B (depth 5)", 3.88, 5),
    PaperPoint("traversal_chain", 0.057, "Weng et al. 68M→7B (depth 5)"),
    PaperPoint("traversal_binary", 0.022, "Weng et al. Llama3 1B→8B (depth 5)"),
    PaperPoint("traversal_binary", 0.049, "Weng et al. 68M→7B (depth 5)"),
    PaperPoint("sequoia_vs_specinfer", 0.04, "Chen et al. Table 4, low end (1.04×)"),
    PaperPoint("sequoia_vs_specinfer", 0.31, "Chen et al. Table 4, high end (1.31×)"),
    PaperPoint("erss_batch", None, "Kobus & Gündüz C1: ERSS > GSS for k ≥ 3 (no number)"),
    PaperPoint("erss_sequence", None, "Kobus & Gündüz C2: GSS > ERSS on sequences (no number)"),
)
"""The papers' values (all T = 1, T = 1 chains). Paper pairs and sizes differ from ours (notebooks 01-05)."""


def implied_acceptance(baseline_tokens: float, drafted: int) -> float:
    """The i.i.d. per-token acceptance alpha with (1 - alpha^(n+1)) / (1 - alpha) = ``baseline_tokens``
    (`theory.chain_expected_tokens`): the acceptance a paper's own token-verification tokens per step imply.
    Acceptance varies over contexts and the tokens per step are convex in it, so this is an upper estimate
    of the mean acceptance."""
    if not 1.0 <= baseline_tokens <= drafted + 1:
        raise ValueError(f"baseline tokens {baseline_tokens} outside [1, {drafted + 1}]")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if chain_expected_tokens(mid, drafted) < baseline_tokens:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def paper_points(keys: Sequence[str] | None = None):
    """`PAPER_POINTS` as a DataFrame (key, gain, label, implied_acceptance)."""
    rows = [{"key": p.key, "gain": p.gain, "label": p.label, "implied_acceptance": p.implied_acceptance}
            for p in PAPER_POINTS if keys is None or p.key in keys]
    return pd.DataFrame(rows)


def race_parents(batch: int, sequence: int) -> list[int]:
    """A race tree holding ERSS's batch(``batch``) (the root's children) and sequence(``sequence``) (the
    chain under the first child) as sub-shapes (`experiments.restrict_to_shape`); level order."""
    if batch < 1 or sequence < 1:
        raise ValueError("batch and sequence must be >= 1")
    parents = [-1] + [0] * batch
    prev = 1
    for _ in range(sequence - 1):
        parents.append(prev)
        prev = len(parents) - 1
    return parents


def sequoia_shapes(target_rows: torch.Tensor, draft_rows: torch.Tensor, cfg: SweepConfig, seed: int = 1):
    """Sequoia's DP tree (children without replacement) and the best SpecInfer k x L tree (i.i.d.) of size
    ``cfg.tree_size`` and depth <= ``cfg.tree_depth`` from the rows' positional acceptance vectors
    (`theory.positional_acceptance`, as notebook 05; at most ``cfg.shape_rows`` rows, evenly spaced: the
    Monte Carlo of sampling without replacement costs ~0.15 s per row at V = 49152).
    Returns (sequoia parents, (k, L), p_wr, p_iid)."""
    target_rows, draft_rows = torch.as_tensor(target_rows), torch.as_tensor(draft_rows)
    stride = max(1, math.ceil(target_rows.shape[0] / max(1, cfg.shape_rows)))
    target_rows, draft_rows = target_rows[::stride], draft_rows[::stride]
    vocab = int(target_rows.shape[-1])
    K = max(1, min(cfg.tree_size - 1, vocab - 1))
    gen = torch.Generator().manual_seed(seed)
    p_wr = positional_acceptance(target_rows, draft_rows, K, "without_replacement", num_samples=cfg.mc_samples,
                                 generator=gen).numpy()
    p_iid = positional_acceptance(target_rows, draft_rows, K, "iid").numpy()
    depth = max(2, min(cfg.tree_depth, cfg.tree_size))
    parents, _ = sequoia_tree(p_wr, size=cfg.tree_size, depth=depth)
    best = (-1.0, 1, 1)
    for k in range(1, cfg.tree_size):
        length = min((cfg.tree_size - 1) // k, depth - 1)
        if length < 1:
            break
        value = k_sequences_expected_tokens(p_iid, k, length)
        if value > best[0] + 1e-15:
            best = (value, k, length)
    return [int(p) for p in parents], (best[1], best[2]), p_wr, p_iid


def _split_rows(rows) -> tuple[torch.Tensor, torch.Tensor, "pd.DataFrame | None"]:
    """(P, Q, index) from matched rows given as (P, Q) or (P, Q, index) (`experiments.matched_rows`)."""
    if not isinstance(rows, (tuple, list)) or len(rows) not in (2, 3):
        raise ValueError("rows must be matched (P, Q) or (P, Q, index) of experiments.matched_rows")
    P, Q = rows[0], rows[1]
    index = rows[2] if len(rows) == 3 else None
    if index is not None and (not isinstance(index, pd.DataFrame) or len(index) != P.shape[0]):
        raise ValueError("rows: the index must be a DataFrame naming each row's context "
                         "(matched_rows(..., with_index=True))")
    return P, Q, index


def star_batch_frame(rows, batch: int, samples: Mapping[str, int], seed: int = 0) -> pd.DataFrame:
    """GSS's and ERSS's expected tokens of batch(``batch``) at every matched row, the race-drawn star integrated
    out (`experiments.index_law_at_rows`, `experiments.batch_tokens_by_context`): no drafting noise, so their paired
    difference per context is the methods' difference there (up to the Monte Carlo of ``samples`` stars per row,
    verifier -> count). ``rows``: matched (P, Q, index). Columns as `experiments.paired_expected_tokens` frames
    (``view`` = "batch:k", ``draw`` = 0)."""
    P, Q, index = _split_rows(rows)
    if index is None:
        raise ValueError("rows: integrating the star out needs each row's context (matched_rows(..., with_index=True))")
    k = min(int(batch), int(P.shape[-1]) - 1)
    parts = []
    for verifier in ("token", "erss"):
        if verifier not in samples:
            raise ValueError(f"samples must give a number of stars for {verifier!r}, got {dict(samples)!r}")
        law = E.index_law_at_rows(P, Q, index, k, verifier, num_samples=int(samples[verifier]), seed=seed)
        parts.append(E.batch_tokens_by_context(law, [k]).assign(verifier=verifier))
    return pd.concat(parts, ignore_index=True).assign(view=f"batch:{batch}", draw=0, nodes=k + 1)


def sweep_frames(pair: "E.Pair", prompts: Sequence["E.PromptIds"], rows, cfg: SweepConfig,
                 progress: bool = False, tree_prompts: Sequence["E.PromptIds"] | None = None):
    """Exact expected tokens per step of every verifier of the sweep on trees drafted by ``pair``.

    ``rows``: matched (P, Q) or (P, Q, index) of this pair's draft (for the Sequoia / SpecInfer shapes, and with
    the index for the stars of "star"). One long DataFrame (`experiments.paired_expected_tokens` columns) with
    ``experiment`` (chain | binary | race | star | trees) and,
    for the trees, ``tree`` (Sequoia | SpecInfer), ``drafted`` (the shape) and ``predicted`` (the tree's expected
    tokens under the positional model, `theory.expected_tokens_positional`). The two trees and the binary trees
    (``cfg.binary_copies`` per context, ``draw`` = the copy) are drafted at the same target-sampled contexts
    (`experiments.paired_tokens_at_shared_contexts`, ``cfg.max_new_tokens`` per prompt), so the trees are paired
    per context like the verifiers on one tree; chains and race trees are drafted along the text their advancing
    verifier decodes (`experiments.paired_tokens_by_prompt`); the race trees carry token-level's and ERSS's
    node-Rao-Blackwellised estimators beside their exact values ("token_rb", "erss_rb": on the sequence view,
    functions of the drafted tokens alone, `node_rao_blackwell.erss_reach`). "star": ERSS vs GSS on
    batch(race_batch) at every matched row with the star integrated out (`star_batch_frame`); the drafted race
    trees keep a batch view too, a Monte Carlo check of it with one star per context. ``tree_prompts``: the
    prompts of the Sequoia / SpecInfer trees instead of ``prompts`` (more of them: most of that gain's noise is
    between prompts, not between the contexts of one prompt)."""
    tree_prompts = prompts if tree_prompts is None else tree_prompts
    if not len(tree_prompts):
        raise ValueError("tree_prompts must hold at least one prompt")
    T, common = cfg.temperature, dict(max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, progress=progress)
    frames = []
    if "chain" in cfg.experiments:
        lengths = sorted({1, cfg.block_gamma, cfg.asps_n, cfg.traversal_depth, cfg.chain})
        views = {f"chain:{n}": (lambda t, n=n: E.truncate_chain(t, n)) for n in lengths if n <= cfg.chain}
        frames.append(E.paired_tokens_by_prompt(pair, prompts, f"chain:{cfg.chain}", "iid", T,
                                                ["token", "block", "asps", "traversal", "traversal_rb", "traversal_cv"],
                                                views=views,
                                                labels={"experiment": "chain"}, advance="traversal",
                                                copies=cfg.copies, **common))
    if "binary" in cfg.experiments:
        # at every target-sampled context, like the trees: a decoded text would give few steps per prompt where
        # acceptance is high (3.5 at 0.8 with 12 tokens), and the per-prompt noise of the binary gain is its steps'
        copies = {f"binary {c}": (f"binary:{cfg.binary_depth + 1}", "iid") for c in range(cfg.binary_copies)}
        binary = E.paired_tokens_at_shared_contexts(pair, prompts, copies, T,
                                                    ["token", "traversal", "traversal_rb", "traversal_cv"],
                                                    contexts=cfg.max_new_tokens, seed=cfg.seed,
                                                    views={f"binary:d{cfg.binary_depth}": lambda t: t},
                                                    labels={"experiment": "binary"}, progress=progress)
        frames.append(binary.assign(draw=binary["arm"].map({name: c for c, name in enumerate(copies)}))
                      .drop(columns="arm"))
    if "race" in cfg.experiments:
        kb, ks = min(cfg.race_batch, pair.vocab_size - 1), cfg.race_sequence
        views = {f"batch:{cfg.race_batch}": (lambda t, s=parse_shape(f"batch:{kb}x1"): E.restrict_to_shape(t, s)),
                 f"sequence:{ks}": (lambda t, s=parse_shape(f"chain:{ks}"): E.restrict_to_shape(t, s))}
        frames.append(E.paired_tokens_by_prompt(pair, prompts, race_parents(kb, ks), "race", T,
                                                ["token", "erss", "token_rb", "erss_rb"],
                                                views=views, labels={"experiment": "race"}, advance="erss", **common))
    if "star" in cfg.experiments:
        frames.append(star_batch_frame(rows, cfg.race_batch, cfg.star_samples, cfg.seed).assign(experiment="star"))
    if "trees" in cfg.experiments:
        P, Q, _ = _split_rows(rows)
        seq_parents, (k, length), p_wr, p_iid = sequoia_shapes(P, Q, cfg)
        arms = {"Sequoia": (seq_parents, "without_replacement"), "SpecInfer": (f"batch:{k}x{length}", "iid")}
        trees = E.paired_tokens_at_shared_contexts(pair, tree_prompts, arms, T, ["token", "token_rb"],
                                                   contexts=cfg.max_new_tokens,
                                                   seed=cfg.seed, column="tree", labels={"experiment": "trees"},
                                                   progress=progress)
        trees["drafted"] = trees["tree"].map({"Sequoia": f"sequoia:{len(seq_parents)} depth {_depth(seq_parents)}",
                                              "SpecInfer": f"batch:{k}x{length}"})
        trees["predicted"] = trees["tree"].map({"Sequoia": expected_tokens_positional(seq_parents, p_wr),
                                                "SpecInfer": k_sequences_expected_tokens(p_iid, k, length)})
        frames.append(trees)
    return pd.concat(frames, ignore_index=True)


def _depth(parents: Sequence[int]) -> int:
    return max(parent_depths(list(parents))) + 1


def sweep_gains(frame, cfg: SweepConfig, n_boot: int = 1000):
    """`experiments.paired_gain` of every comparison of `comparisons` (one row each, with ``key``,
    ``title``, ``paper``, ``sign``), ``predicted_gain`` (Sequoia vs SpecInfer: the ratio of the trees'
    expected tokens under the positional model of the same rows, a paired prediction; NaN elsewhere) and
    ``root_acceptance``: the mean P(first draft accepted) of token verification on the chains (the per-token
    acceptance at the drafted contexts)."""
    rows = []
    for c in comparisons(cfg):
        sub = frame[(frame["experiment"] == c.experiment) & (frame["view"] == c.view)]
        if c.verifier is not None:
            sub = sub[sub["verifier"] == c.verifier]
        g = E.paired_gain(sub, c.method, c.baseline, column=c.column, pair_on=c.pair_on, n_boot=n_boot).iloc[0]
        predicted = float("nan")
        if "predicted" in sub.columns and sub["predicted"].notna().any():
            f = sub.groupby(c.column)["predicted"].first()
            predicted = float(f[c.method] / f[c.baseline] - 1)
        rows.append({"key": c.key, "title": c.title, "paper": c.paper, "sign": c.sign, **g.to_dict(),
                     "predicted_gain": predicted})
    out = pd.DataFrame(rows)
    chain1 = frame[(frame["experiment"] == "chain") & (frame["view"] == "chain:1") & (frame["verifier"] == "token")]
    out["root_acceptance"] = float(chain1["p_accept_first"].mean()) if len(chain1) else float("nan")
    return out


@dataclass
class SweepResult:
    """`run_sweep`'s output: ``fits`` (one row per regime: label, goal, lam, acceptance on the tuning rows),
    ``frames`` (exact tokens per step, all regimes), ``gains`` (one row per regime and comparison),
    ``seconds`` (wall time per regime: NOT a speed measurement of any method)."""

    fits: Any
    frames: Any
    gains: Any
    seconds: dict = field(default_factory=dict)


def run_sweep(pair: "E.Pair", prompts: Sequence["E.PromptIds"], rows, goals: Sequence[float] = GOALS,
              cfg: SweepConfig | None = None, tol: float = 1e-3, n_boot: int = 1000,
              progress: bool = False, real_drafts: Mapping[str, tuple] | None = None,
              tree_prompts: Sequence["E.PromptIds"] | None = None) -> SweepResult:
    """The real draft (lam = 0) and the synthetic draft tuned to each goal (`tune_lambda_rows` on ``rows``
    = matched (P, Q) of ``pair``): `sweep_frames` and `sweep_gains` for each, labelled by regime.

    ``rows`` and the rows of ``real_drafts``: matched (P, Q, index) (`experiments.matched_rows(...,
    with_index=True)`; (P, Q) when ``cfg.experiments`` leaves out "star"). ``real_drafts``: further REAL drafts
    of the same target, label -> (pair, matched rows at the same contexts), e.g. the quantized self-draft whose
    acceptance lies in the papers' range; each is one more regime (``synthetic`` False, ``lam`` NaN; the first
    regime, "real draft", is ``pair``'s own draft). ``tree_prompts``: as in `sweep_frames`, every regime."""
    cfg = cfg or SweepConfig()
    P, Q, index = _split_rows(rows)
    base = acceptance(P, Q)
    fits = [dict(regime="real draft", goal=float("nan"), lam=0.0, acceptance=base, synthetic=False)]
    for goal in goals:
        fit = tune_lambda_rows(P, Q, goal, tol)
        fits.append(dict(regime=f"synthetic {goal:.2f}", goal=float(goal), lam=fit.lam, acceptance=fit.acceptance,
                         synthetic=True))
    # (fit, pair, rows) made when their turn comes: the synthetic rows are as large as P
    def regime_rows(lam):
        synthetic = (P, mix_rows(P, Q, lam))
        return synthetic if index is None else (*synthetic, index)

    regimes = [(f, lambda f=f: pair if not f["synthetic"] else interpolated_pair(pair, f["lam"]),
                lambda f=f: rows if not f["synthetic"] else regime_rows(f["lam"])) for f in fits]
    for label, (other, rows_x) in (real_drafts or {}).items():
        if label in {f["regime"] for f in fits}:
            raise ValueError(f"real_drafts: the label {label!r} is taken")
        P_x, Q_x, _ = _split_rows(rows_x)
        f = dict(regime=label, goal=float("nan"), lam=float("nan"), acceptance=acceptance(P_x, Q_x), synthetic=False)
        fits.append(f)
        regimes.append((f, lambda other=other: other, lambda rx=rows_x: rx))
    unknown = set(cfg.binary_copies_by_regime) - {f["regime"] for f, _, _ in regimes}
    if unknown:
        raise ValueError(f"binary_copies_by_regime: no regime {sorted(unknown)}; the regimes are "
                         f"{[f['regime'] for f, _, _ in regimes]}")
    frames, gains, seconds = [], [], {}
    for f, make_pair, make_rows in regimes:
        t0 = time.perf_counter()
        regime_cfg = replace(cfg, binary_copies=cfg.binary_copies_by_regime.get(f["regime"], cfg.binary_copies))
        frame = sweep_frames(make_pair(), prompts, make_rows(), regime_cfg, progress, tree_prompts)
        labels = dict(regime=f["regime"], lam=f["lam"], acceptance=f["acceptance"], synthetic=f["synthetic"])
        frames.append(frame.assign(**labels))
        gains.append(sweep_gains(frame, cfg, n_boot).assign(**labels))
        seconds[f["regime"]] = time.perf_counter() - t0
    return SweepResult(pd.DataFrame(fits), pd.concat(frames, ignore_index=True), pd.concat(gains, ignore_index=True),
                       seconds)


def range_verdict(points: Sequence[Mapping[str, Any]], paper_gains: Sequence[float | None], sign: int = 1) -> str:
    """Verdict of "our gains at the papers' acceptance agree with the papers'", from `sweep_gains` rows of
    the synthetic regimes.

    reproduced: every row's CI is on the claimed side of 0 (``sign``) and, when the papers give numbers,
    the range of our point gains overlaps the range of theirs (within a factor 2 of its ends); partly: every
    point is on the claimed side; not reproduced otherwise."""
    gains = [float(p["gain"]) * sign for p in points]
    if not gains:
        raise ValueError("no rows")
    lows = [(float(p["ci_low"]) if sign > 0 else -float(p["ci_high"])) for p in points]
    lows = [g if math.isnan(lo) else lo for g, lo in zip(gains, lows)]
    numbers = [abs(float(x)) for x in paper_gains if x is not None]
    if all(lo > 0 for lo in lows):
        if not numbers or (min(gains) <= 2 * max(numbers) and max(gains) >= 0.5 * min(numbers)):
            return "reproduced"
        return "partly"
    return "partly" if all(g > 0 for g in gains) else "not reproduced"
