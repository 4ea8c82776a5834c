"""The synthetic draft family (models.interpolated) and the regime sweep (regime.py).

* the mixture's endpoints: lam = 0 is the draft, lam = 1 the target (rows, toy LMs, tiny Llama models
  through plain forwards and through the KV-cached tree sessions); the draft's zeros stay zeros;
* acceptance sum_x min(p, q_lam) is non-decreasing in lam on random rows; `tune_lambda` hits its goals;
* speculative decoding with an `InterpolatedDraft` is lossless: chi-square of the first two tokens
  against the exact target law (tiny random Llama models over 64 tokens, also with a sub-vocabulary draft);
* the sweep runs on the toy pair (notebook 07 on the smoke profile: tests/test_notebooks.py).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from specdec_lib import exact, experiments as E
from specdec_lib.experiments import regime as RG
from specdec_lib.decoding import speculative_generate
from specdec_lib.exact import chi_square_pvalue
from specdec_lib.models import LanguageModel
from specdec_lib.models.interpolated import InterpolatedDraft, InterpolatedToyLM, mix_log_probs, mix_rows
from specdec_lib.models.offline import build_student
from specdec_lib.models.synthetic import random_markov_pair, tempered
from specdec_lib.sampling import process_logits
from specdec_lib.tree import parse_shape

VOCAB = 64


def _random_rows(m, v, seed, concentration=0.3, zero_prob=0.0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(v, concentration), size=m)
    q = rng.dirichlet(np.full(v, concentration), size=m)
    if zero_prob:
        keep = rng.random(q.shape) >= zero_prob
        keep[np.arange(m), q.argmax(1)] = True
        q = q * keep
        q /= q.sum(1, keepdims=True)
    return torch.tensor(p), torch.tensor(q)


@pytest.fixture(scope="module")
def tiny_llamas(tiny_llama):
    """A tiny random Llama target over 64 tokens (head scaled up so its laws are peaked: ~86% of the mass
    on 8 tokens) and its first layer as the draft, with a noisy, flatter copy of the target's head
    (acceptance ~0.4; ~0.73 for lam = 0.5)."""
    tgt = tiny_llama(VOCAB, head_scale=25.0)
    return tgt, _tiny_draft(tgt)


def _tiny_draft(tgt, subset=None):
    student = build_student(tgt, 1)
    w = tgt.model.lm_head.weight.detach() / 25.0
    noise = torch.randn(w.shape, generator=torch.Generator().manual_seed(1)) * w.std()
    student.lm_head.weight = torch.nn.Parameter(10.0 * (w + 0.5 * noise), requires_grad=False)
    if subset is not None:
        from specdec_lib.models.subset_head import use_subset_head

        use_subset_head(student, subset)
    return LanguageModel(student, None, "tiny-draft" if subset is None else "tiny-draft-subset")


# ----- the mixture ---------------------------------------------------------------------------------

def test_mix_rows_endpoints_and_zeros():
    P, Q = _random_rows(20, 30, 0, zero_prob=0.5)
    assert torch.allclose(mix_rows(P, Q, 0.0), Q, atol=1e-12)
    assert torch.allclose(mix_rows(P, Q, 1.0), P, atol=1e-12)
    for lam in (0.3, 0.9, 0.999):
        R = mix_rows(P, Q, lam)
        assert torch.allclose(R.sum(-1), torch.ones(20, dtype=torch.float64))
        assert bool((R[Q == 0] == 0).all())  # the draft's zeros stay zeros below lam = 1
    # supports that do not meet: the draft's row
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 0.4, 0.6]], dtype=torch.float64)
    assert torch.allclose(mix_rows(p, q, 0.5), q)
    with pytest.raises(ValueError):
        mix_log_probs(torch.zeros(3), torch.zeros(3), 1.5)


def test_geometric_mixture_commutes_with_temperature():
    P, Q = _random_rows(5, 12, 1)
    lam, T = 0.4, 0.6
    logits = mix_log_probs(torch.log(Q), torch.log(P), lam)
    tempered_rows = process_logits(logits, T, apply_top_p=False)
    pT, qT = process_logits(torch.log(P), T), process_logits(torch.log(Q), T)
    assert torch.allclose(tempered_rows, mix_rows(pT, qT, lam), atol=1e-12)


def test_toy_endpoints_and_tempering():
    target, draft = random_markov_pair(6, 0.8, seed=3, eos=True, zero_prob=0.2)
    for ctx in [(), (1,), (2, 3), (5,)]:
        assert torch.allclose(InterpolatedToyLM(target, draft, 0.0).probs(ctx), draft.probs(ctx), atol=1e-12)
        assert torch.allclose(InterpolatedToyLM(target, draft, 1.0).probs(ctx), target.probs(ctx), atol=1e-12)
        mixed = tempered(InterpolatedToyLM(target, draft, 0.3), 0.5).probs(ctx)
        assert torch.allclose(mixed, mix_rows(tempered(target, 0.5).probs(ctx), tempered(draft, 0.5).probs(ctx), 0.3),
                              atol=1e-12)


def test_hf_endpoints_plain_and_tree_sessions(tiny_llamas):
    tgt, dft = tiny_llamas
    ids = [3, 14, 15, 9, 2, 6]
    p = torch.softmax(tgt.logits(ids).double(), -1)
    q = torch.softmax(dft.logits(ids).double(), -1)
    assert torch.allclose(torch.softmax(InterpolatedDraft(tgt, dft, 0.0).logits(ids), -1), q, atol=1e-6)
    assert torch.allclose(torch.softmax(InterpolatedDraft(tgt, dft, 1.0).logits(ids), -1), p, atol=1e-6)
    lam = 0.35
    syn = InterpolatedDraft(tgt, dft, lam)
    assert syn.name == "synthetic(lam=0.350)" and syn.vocab_size == VOCAB
    assert torch.allclose(torch.softmax(syn.logits(ids), -1), mix_rows(p, q, lam), atol=1e-6)
    # a tree scored level by level through the two KV sessions = plain forwards of each path
    sess = syn.session(ids)
    tokens, parents = [ids[-1], 7, 8, 11], [-1, 0, 0, 1]
    lvl0 = sess.tree_logits(tokens[:1], parents[:1], [0])
    lvl1 = sess.tree_logits(tokens[:3], parents[:3], [1, 2])
    lvl2 = sess.tree_logits(tokens, parents, [3])
    paths = [ids, ids + [7], ids + [8], ids + [7, 11]]
    want = torch.stack([torch.softmax(syn.logits(c)[-1], -1) for c in paths])
    got = torch.softmax(torch.cat([lvl0, lvl1, lvl2]), -1)
    assert torch.allclose(got, want, atol=1e-5)
    emitted = sess.commit([1, 3], 5, tokens, parents)
    assert emitted == [7, 11, 5] and sess.fixed == ids + [7, 11, 5]
    nxt = torch.softmax(sess.next_logits(), -1)
    assert torch.allclose(nxt, torch.softmax(syn.logits(ids + [7, 11, 5])[-1], -1), atol=1e-5)


# ----- acceptance and tuning -----------------------------------------------------------------------

@pytest.mark.parametrize("seed,concentration,zero_prob", [(0, 0.3, 0.0), (1, 1.0, 0.0), (2, 0.1, 0.3), (3, 0.05, 0.6)])
def test_acceptance_monotone_in_lam(seed, concentration, zero_prob):
    P, Q = _random_rows(200, 40, seed, concentration, zero_prob)
    lams = np.linspace(0.0, 1.0, 41)
    for i in range(P.shape[0]):  # row by row, not only on average
        curve = RG.acceptance_curve(P[i:i + 1], Q[i:i + 1], lams)
        assert np.all(np.diff(curve) >= -1e-12), (i, curve)
    assert RG.acceptance_curve(P, Q, [1.0])[0] == pytest.approx(1.0)


def test_tune_lambda_hits_goals_on_toy_rows():
    pair = E.toy_pair(8, 0.9, seed=0)
    prompts = E.prompts_for(pair, 3)
    P, Q = E.matched_rows(pair, prompts, 1.0, max_new_tokens=20, progress=False)
    base = RG.acceptance(P, Q)
    assert base < 0.6
    for goal in RG.GOALS:
        fit = RG.tune_lambda(pair, prompts, goal, RG.TuningSettings(max_new_tokens=20, tol=1e-3))
        assert abs(fit.acceptance - goal) <= 1e-3 and 0 < fit.lam < 1 and fit.draft_acceptance == pytest.approx(base)
        # the same acceptance from the synthetic toy draft itself, at the same contexts
        P2, Q2 = E.matched_rows(RG.interpolated_pair(pair, fit.lam), prompts, 1.0, max_new_tokens=20, progress=False)
        assert torch.allclose(P2, P) and RG.acceptance(P2, Q2) == pytest.approx(fit.acceptance, abs=1e-9)
    with pytest.raises(ValueError, match="already accepts"):
        RG.tune_lambda_rows(P, Q, base / 2)
    fit_t = RG.tune_lambda(pair, prompts, 0.7, RG.TuningSettings(temperature=0.5, max_new_tokens=20))
    assert abs(fit_t.acceptance - 0.7) <= 1e-3
    with pytest.raises(ValueError, match="temperature > 0"):
        RG.TuningSettings(temperature=0.0)


def test_implied_acceptance_and_paper_points():
    from specdec_lib.theory import chain_expected_tokens

    a = RG.implied_acceptance(3.41, 8)
    assert chain_expected_tokens(a, 8) == pytest.approx(3.41, abs=1e-9) and 0.6 < a < 0.8
    table = RG.paper_points()
    assert set(table["key"]) == {c.key for c in RG.comparisons(RG.SweepConfig())}
    parents = RG.race_parents(4, 3)  # batch(4) and sequence(3) are both inside the race tree
    assert E.index_tuples(parents)[1:] == [(1,), (2,), (3,), (4,), (1, 1), (1, 1, 1)]


def test_no_wall_clock_from_a_synthetic_draft(tiny_llamas):
    tgt, dft = tiny_llamas
    pair = RG.interpolated_pair(E.Pair(tgt, dft, "hf", "tiny"), 0.5)
    with pytest.raises(ValueError, match="never wall clock"):
        E.timed_generation(pair, [E.PromptIds("p", "c", torch.tensor([1, 2, 3]))], "token", "chain:2", progress=False)


def test_range_verdict():
    rows = [{"gain": 0.05, "ci_low": 0.01, "ci_high": 0.09}, {"gain": 0.07, "ci_low": 0.02, "ci_high": 0.1}]
    assert RG.range_verdict(rows, [0.06]) == "reproduced"
    assert RG.range_verdict(rows, [0.5]) == "partly"
    assert RG.range_verdict(rows, [None]) == "reproduced"
    assert RG.range_verdict([{"gain": -0.02, "ci_low": -0.04, "ci_high": -0.01}], [None], sign=-1) == "reproduced"
    assert RG.range_verdict([{"gain": 0.02, "ci_low": -0.01, "ci_high": 0.04}], [0.02]) == "partly"
    assert RG.range_verdict([{"gain": -0.02, "ci_low": -0.04, "ci_high": 0.01}], [0.02]) == "not reproduced"


def test_sweep_on_toy_pair():
    pair = E.toy_pair(8, 0.9, seed=0)
    prompts = E.prompts_for(pair, 2)
    rows = E.matched_rows(pair, prompts, 1.0, max_new_tokens=16, progress=False, with_index=True)
    cfg = RG.SweepConfig(chain=4, block_gamma=4, asps_n=3, traversal_depth=2, binary_depth=2, race_batch=3,
                         race_sequence=2, tree_size=6, tree_depth=3, max_new_tokens=8, copies=2, mc_samples=4)
    res = RG.run_sweep(pair, prompts, rows, goals=(0.7,), cfg=cfg, n_boot=50)
    assert list(res.fits["regime"]) == ["real draft", "synthetic 0.70"]
    assert set(res.gains["key"]) == {c.key for c in RG.comparisons(cfg)} and len(res.gains) == 2 * 7
    chain = res.frames.query("experiment == 'chain' and verifier in ['block', 'traversal']").pivot_table(
        index=["regime", "prompt_id", "step", "draw", "view"], columns="verifier", values="expected_tokens")
    assert float((chain["block"] - chain["traversal"]).abs().max()) < 1e-9  # Theorem 3.4 on every chain
    one = res.frames.query("view == 'chain:1'").pivot_table(index=["regime", "prompt_id", "step", "draw"],
                                                            columns="verifier", values="expected_tokens")
    assert float((one["asps"] - one["token"]).abs().max()) < 1e-9
    assert res.gains["predicted_gain"].notna().sum() == 2
    # ERSS vs GSS on batch(3): the star integrated out at every matched row, both regimes
    star = res.frames.query("experiment == 'star'")
    assert set(star["view"]) == {"batch:3"} and set(star["verifier"]) == {"token", "erss"}
    assert len(star) == 2 * 2 * rows[0].shape[0]
    assert res.gains.query("key == 'erss_batch'")["steps"].tolist() == [rows[0].shape[0]] * 2
    # ERSS vs GSS on the sequence: both estimators on every race chain, each a function of the drafted tokens
    seq = res.frames.query("experiment == 'race' and view == 'sequence:2'")
    assert {"token", "erss", "token_rb", "erss_rb"} <= set(seq["verifier"])
    counts = seq.groupby("verifier").size()
    assert counts["erss_rb"] == counts["token_rb"] == counts["erss"]
    sequence = next(c for c in RG.comparisons(cfg) if c.key == "erss_sequence")
    assert (sequence.method, sequence.baseline, sequence.sign) == ("erss_rb", "token_rb", -1)
    with pytest.raises(ValueError, match="index"):
        RG.run_sweep(pair, prompts, rows[:2], goals=(), cfg=cfg, n_boot=50)


def test_star_batch_frame_integrates_the_star_out():
    """Per matched row, GSS's batch(k) expected tokens is 1 + p1 + ... + pk of its index law; with one child it
    is 1 + (1 - TV) exactly, the closed form of a single draft (ERSS: its own closed form)."""
    pair = E.toy_pair(8, 0.9, seed=1)
    P, Q, index = E.matched_rows(pair, E.prompts_for(pair, 2), 1.0, max_new_tokens=6, progress=False, with_index=True)
    one = RG.star_batch_frame((P, Q, index), 1, {"token": 4, "erss": 4}).query("verifier == 'token'")
    assert one["view"].eq("batch:1").all() and len(one) == P.shape[0]
    tv = 0.5 * (P - Q).abs().sum(1).numpy()
    assert np.allclose(one["expected_tokens"].to_numpy(), 2.0 - tv, atol=1e-12)
    three = RG.star_batch_frame((P, Q, index), 3, {"token": 4, "erss": 4})
    assert (three["expected_tokens"].to_numpy() >= 1.0).all() and set(three["nodes"]) == {4}
    with pytest.raises(ValueError, match="index"):
        RG.star_batch_frame((P, Q), 3, {"token": 4, "erss": 4})
    with pytest.raises(ValueError, match="erss"):
        RG.star_batch_frame((P, Q, index), 3, {"token": 4})


def test_sweep_takes_further_real_drafts_of_the_same_target():
    pair = E.toy_pair(8, 0.9, seed=0)
    prompts = E.prompts_for(pair, 2)
    rows = E.matched_rows(pair, prompts, 1.0, max_new_tokens=12, progress=False, with_index=True)
    closer = E.Pair(pair.target, InterpolatedToyLM(pair.target, pair.draft, 0.5), "toy", "closer draft")
    closer_rows = E.matched_rows(closer, prompts, 1.0, max_new_tokens=12, progress=False, with_index=True)
    cfg = RG.SweepConfig(chain=3, block_gamma=3, asps_n=2, traversal_depth=2, binary_depth=2, race_batch=3,
                         race_sequence=2, tree_size=5, tree_depth=3, max_new_tokens=6, copies=1, mc_samples=4)
    res = RG.run_sweep(pair, prompts, rows, goals=(0.7,), cfg=cfg, n_boot=50,
                       real_drafts={"closer draft": (closer, closer_rows)})
    fit = res.fits.set_index("regime").loc["closer draft"]
    assert not fit["synthetic"] and np.isnan(fit["lam"])
    assert fit["acceptance"] == pytest.approx(RG.acceptance(*closer_rows[:2]))
    assert fit["acceptance"] > res.fits.set_index("regime").loc["real draft", "acceptance"]
    assert len(res.gains) == 3 * len(RG.comparisons(cfg)) and "closer draft" in res.seconds
    with pytest.raises(ValueError, match="taken"):
        RG.run_sweep(pair, prompts, rows, goals=(), cfg=cfg, n_boot=50, real_drafts={"real draft": (closer, closer_rows)})


def test_binary_copies_by_regime_drafts_more_binary_trees_in_that_regime_only():
    pair = E.toy_pair(8, 0.9, seed=0)
    prompts = E.prompts_for(pair, 2)
    rows = E.matched_rows(pair, prompts, 1.0, max_new_tokens=12, progress=False)
    cfg = RG.SweepConfig(binary_depth=2, max_new_tokens=4, experiments=("binary",),
                         binary_copies_by_regime={"synthetic 0.70": 3})
    res = RG.run_sweep(pair, prompts, rows, goals=(0.7,), cfg=cfg, n_boot=50)
    draws = res.frames.groupby("regime")["draw"].unique().map(sorted)
    assert draws["synthetic 0.70"] == [0, 1, 2] and draws["real draft"] == [0]
    # the first copy is the tree a one-copy run drafts (each copy has its own generator)
    one = RG.run_sweep(pair, prompts, rows, goals=(0.7,), cfg=RG.SweepConfig(binary_depth=2, max_new_tokens=4,
                                                                           experiments=("binary",)), n_boot=50)
    first = res.frames.query("draw == 0").reset_index(drop=True)
    assert np.allclose(first["expected_tokens"], one.frames["expected_tokens"], atol=1e-12)
    with pytest.raises(ValueError, match="binary_copies_by_regime: no regime"):
        RG.run_sweep(pair, prompts, rows, goals=(0.7,), n_boot=50,
                     cfg=RG.SweepConfig(experiments=("binary",), binary_copies_by_regime={"synthetic 0.80": 2}))


@pytest.mark.parametrize("values, match", [
    ({"binary_copie": 2}, "unknown settings"), ({"binary_copies": 0}, "binary_copies"), ({"copies": 1.5}, "copies"),
    ({"binary_copies_by_regime": {"synthetic 0.80": 0}}, "binary_copies_by_regime"),
    ({"binary_copies_by_regime": [3]}, "binary_copies_by_regime")])
def test_sweep_config_rejects_bad_settings(values, match):
    with pytest.raises(ValueError, match=match):
        RG.SweepConfig.from_mapping(values)


# ----- losslessness --------------------------------------------------------------------------------

def _two_token_law(target, prompt):
    """Exact law of the first two tokens at T = 1 (all 64 x 64 cells; small ones are pooled by the test)."""
    p1 = torch.softmax(target.logits(prompt)[-1].double(), -1)
    law = {}
    for a in range(VOCAB):
        p2 = torch.softmax(target.logits(prompt + [a])[-1].double(), -1)
        for b in range(VOCAB):
            law[(a, b)] = float(p1[a] * p2[b])
    total = sum(law.values())
    return {k: v / total for k, v in law.items()}


@pytest.mark.slow
@pytest.mark.parametrize("verifier,shape,sampling,subset", [("token", "chain:2", "iid", False),
                                                             ("block", "chain:2", "iid", True),
                                                             ("traversal", "kary:2x3", "iid", False)])
def test_lossless_with_interpolated_draft(tiny_llamas, verifier, shape, sampling, subset):
    tgt, dft = tiny_llamas
    if subset:  # a sub-vocabulary draft: q = 0 outside 41 tokens, so q_lam = 0 there too
        dft = _tiny_draft(tgt, list(range(0, VOCAB, 3)) + list(range(1, VOCAB, 3))[:19])
        assert float(torch.softmax(dft.logits([1, 2])[-1], -1)[2]) == 0.0
    syn = InterpolatedDraft(tgt, dft, 0.5)
    prompt = [5, 17, 33]
    law = _two_token_law(tgt, prompt)
    counts = Counter()
    accepted = 0
    for s in range(400):
        out = speculative_generate(tgt, syn, prompt, verifier=verifier, shape=shape, sampling=sampling,
                                   temperature=1.0, max_new_tokens=2, seed=10_000 + s, ignore_eos=True)
        counts[tuple(out.tokens)] += 1
        accepted += out.steps[0].accepted
    assert accepted > 0  # the synthetic draft does get accepted
    assert chi_square_pvalue(counts, law) > 1e-3, counts.most_common(8)


def test_chi_square_harness_detects_the_synthetic_drafts_own_law(tiny_llamas):
    """Control: pairs drawn from the synthetic draft itself (no verification) fail the same test."""
    tgt, dft = tiny_llamas
    syn = InterpolatedDraft(tgt, dft, 0.5)
    prompt = [5, 17, 33]
    law = _two_token_law(tgt, prompt)
    gen = torch.Generator().manual_seed(0)
    q1 = torch.softmax(syn.logits(prompt)[-1], -1)
    firsts = torch.multinomial(q1, 400, replacement=True, generator=gen).tolist()
    counts = Counter()
    for a in firsts:
        b = int(torch.multinomial(torch.softmax(syn.logits(prompt + [a])[-1], -1), 1, generator=gen))
        counts[(a, b)] += 1
    assert chi_square_pvalue(counts, law) < 1e-3


def test_every_gain_over_token_vanishes_as_the_draft_becomes_the_target():
    """verdicts.TIES[("block, ASpS, traversal", "token", "draft = target (acceptance 1)")], exact on a toy: at
    lam = 1 (q = p) token-level emits depth + 1 tokens, the most any verifier can, so every gain over it is 0.
    Along the synthetic family the toy's traversal gain on a chain rises and then falls (2.2% at lam = 0, 7.0% at
    0.4, 4.9% at 0.8, 0 at 1): a gain need not grow with acceptance (07's growth claim, traversal on binary trees)."""
    target, draft = random_markov_pair(3, 1.0, seed=0, eos=False)
    same = InterpolatedToyLM(target, draft, 1.0)
    for shape, depth, verifiers in (("chain:3", 3, ["block", "asps", "traversal"]), ("binary:3", 2, ["traversal"])):
        parents = parse_shape(shape)
        for verifier in ["token", *verifiers]:
            assert exact.expected_step_tokens(verifier, target, same, (0,), parents, "iid") == pytest.approx(
                depth + 1, abs=1e-12)
    # control: with the toy's own draft (lam = 0) token-level stays well below depth + 1, so the check above can fail
    assert exact.expected_step_tokens("token", target, draft, (0,), parse_shape("chain:3"), "iid") < 3.5
    gain = {}
    for lam in (0.0, 0.4, 0.8):
        q = InterpolatedToyLM(target, draft, lam)
        tokens = {v: exact.expected_step_tokens(v, target, q, (0,), parse_shape("chain:3"), "iid")
                  for v in ("token", "traversal")}
        gain[lam] = tokens["traversal"] / tokens["token"] - 1
    assert gain[0.0] < gain[0.4] and gain[0.8] < gain[0.4] and gain[0.8] > 0.01


def test_tree_prompts_draft_only_the_sequoia_and_specinfer_trees():
    pair = E.toy_pair(8, 0.9, seed=0)
    prompts = E.prompts_for(pair, 1, categories=["a"])
    more = E.prompts_for(pair, 3, categories=["a", "b"])
    rows = E.matched_rows(pair, prompts, 1.0, max_new_tokens=12, progress=False)
    cfg = RG.SweepConfig(binary_depth=2, tree_size=5, tree_depth=3, max_new_tokens=4, mc_samples=4,
                         experiments=("binary", "trees"))
    res = RG.run_sweep(pair, prompts, rows, goals=(0.7,), cfg=cfg, n_boot=50, tree_prompts=more)
    ids = res.frames.groupby("experiment")["prompt_id"].unique().map(sorted)
    assert ids["binary"] == ["a-0"] and ids["trees"] == sorted(p.id for p in more)
    gains = res.gains.set_index(["regime", "key"])
    assert (gains.xs("sequoia_vs_specinfer", level="key")["prompts"] == 6).all()
    # the same prompts given both ways draft the same trees
    same = RG.run_sweep(pair, prompts, rows, goals=(0.7,), cfg=cfg, n_boot=50, tree_prompts=prompts)
    plain = RG.run_sweep(pair, prompts, rows, goals=(0.7,), cfg=cfg, n_boot=50)
    assert np.allclose(same.frames["expected_tokens"], plain.frames["expected_tokens"], atol=1e-12)
    with pytest.raises(ValueError, match="tree_prompts"):
        RG.run_sweep(pair, prompts, rows, goals=(), cfg=cfg, n_boot=50, tree_prompts=[])
