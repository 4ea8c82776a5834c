"""Online training of the feature draft (`specdec_lib.training.feature.online`): the batched levels are the drafted
chain, the loss is the KL on exact rows, a run trains and saves, it starts from a feature or an independent draft.

Tiny random Llama models stand in for the pair (milliseconds per forward)."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from specdec_lib.models.feature_net import FeatureDraft
from specdec_lib.models.offline import build_student
from specdec_lib.models.subset_head import use_subset_head
from specdec_lib.training.distill import export_draft, load_exported, tiny_llama
from specdec_lib.training.feature.data import FeatureSample
from specdec_lib.training.feature.levels import draft_levels, pack
from specdec_lib.training.feature.online import (
    DraftRun, OnlineConfig, initial_draft, online_loss, own_head, rollout_levels, target_features, train_online,
    with_head,
)
from specdec_lib.training.losses import sub_vocab_kl, sub_vocab_rejection
from specdec_lib.training.sampling import Rollouts

VOCAB = 64
EOS = 1


@pytest.fixture()
def pair():
    target = tiny_llama(vocab_size=VOCAB, layers=2, hidden=32, seed=3)
    draft = FeatureDraft(build_student(target, 1))
    with torch.no_grad():
        draft.inject.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(1))
    use_subset_head(draft.student, torch.arange(0, VOCAB, 2))
    return target, draft


def _rollouts(target, seqs, prompt_lens):
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.as_tensor(s)
    return target_features(target, Rollouts(ids, torch.tensor([len(s) for s in seqs]), torch.tensor(prompt_lens)))


def test_batched_levels_equal_the_packed_levels_of_each_sequence(pair):
    target, draft = pair
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(2, VOCAB, (n,), generator=gen).tolist() for n in (9, 6)]
    roll = _rollouts(target, seqs, [3, 2])
    feats = roll.features.float()
    with torch.no_grad():
        batched = rollout_levels(draft, roll, 3)
        for b, s in enumerate(seqs):
            n = len(s)
            sample = FeatureSample(torch.as_tensor(s), 2, feats[b, : n - 1], torch.zeros(n - 1, 1, dtype=torch.long),
                                   torch.zeros(n - 1, 1))
            packed = draft_levels(draft, pack([sample]), 3)
            for m in range(3):  # real positions (padding comes after them and is never attended)
                assert torch.allclose(batched[m][b, :n], packed[m], atol=1e-5), (b, m)


def test_online_loss_levels_are_the_kl_of_each_level_on_exact_rows(pair):
    target, draft = pair
    gen = torch.Generator().manual_seed(2)
    seqs = [torch.randint(2, VOCAB, (n,), generator=gen).tolist() for n in (8, 5)]
    roll = _rollouts(target, seqs, [3, 2])
    head = target.get_output_embeddings().weight.detach()
    vocab = draft.student.lm_head.vocab_ids
    with torch.no_grad():
        loss, per_level = online_loss(draft, head, vocab, roll, 2, [1.0, 0.5], prompt_weight=0.0)
    # by hand, level 1: continuation rows i in [prompt_len - 1, length - 2], row i predicts x_{i+1}
    feats = roll.features.float()
    with torch.no_grad():
        outs = rollout_levels(draft, roll, 2)
        kls = []
        for m, hidden in enumerate(outs, start=1):
            rows = [(b, i) for b, (n, pl) in enumerate(zip([8, 5], [3, 2])) for i in range(max(pl - 1, m - 1), n - 1)]
            f = torch.stack([feats[b, i] for b, i in rows])
            h = torch.stack([hidden[b, i] for b, i in rows])
            logp = torch.log_softmax(f @ head.T, -1)
            kls.append(float(sub_vocab_kl(logp, h @ head[vocab].T, vocab).mean()))
    assert per_level == pytest.approx(kls, rel=1e-4)
    assert float(loss) == pytest.approx((kls[0] + 0.5 * kls[1]) / 1.5, rel=1e-4)
    with torch.no_grad():  # the rejection objective on the same rows: level 1 is the mean rejection there
        _, tv_levels = online_loss(draft, head, vocab, roll, 2, [1.0, 0.5], prompt_weight=0.0, objective="tv")
        rows = [(b, i) for b, (n, pl) in enumerate(zip([8, 5], [3, 2])) for i in range(pl - 1, n - 1)]
        f = torch.stack([feats[b, i] for b, i in rows])
        h = torch.stack([outs[0][b, i] for b, i in rows])
        tv1 = float(sub_vocab_rejection(torch.log_softmax(f @ head.T, -1), h @ head[vocab].T, vocab).mean())
    assert tv_levels[0] == pytest.approx(tv1, rel=1e-4)
    with pytest.raises(ValueError, match="objective"):
        online_loss(draft, head, vocab, roll, 2, [1.0, 0.5], objective="js")


def test_a_short_run_trains_and_saves_the_exported_format(pair, tmp_path):
    target, draft = pair
    # the run is timed (1.2 s): on a loaded CPU it may get a single step, late in its learning-rate decay (x0.1),
    # so the rate is large enough that one step moves some weight by more than the tolerance below
    run = DraftRun("d", draft, lr=0.1, inject_lr=0.1, warmup=2)
    before = {k: v.clone() for k, v in draft.trainable_state().items()}
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(2, VOCAB, (4,), generator=gen).tolist() for _ in range(6)]
    config = OnlineConfig(0.02, EOS, 0, batch=3, rows_per_step=2, new_tokens=6, levels=2, level_weights=(1.0, 0.5))
    totals = train_online(target, [run], prompts, tmp_path, config, log=lambda r: None)
    assert totals["rounds"] >= 1 and run.step >= 1 and totals["sampled_tokens"] > 0
    saved = load_file(str(tmp_path / "d.safetensors"))
    assert set(saved) == set(before)
    assert any(not torch.allclose(saved[k].float(), before[k].float(), atol=1e-3) for k in saved)
    assert (tmp_path / "online_log.jsonl").read_text().count("\n") == totals["rounds"]


def test_a_bfloat16_sampler_chooses_the_contexts_while_the_float32_target_gives_the_features(pair, tmp_path):
    import copy

    target, draft = pair
    sampler = copy.deepcopy(target).to(torch.bfloat16)
    run = DraftRun("d", draft, lr=1e-3, inject_lr=1e-3, warmup=2)
    prompts = [[2, 3, 4, 5], [6, 7, 8, 9], [3, 5, 7, 9]]
    calls, generate = [], sampler.generate
    sampler.generate = lambda *a, **k: calls.append(1) or generate(*a, **k)
    seen = []
    config = OnlineConfig(0.02, EOS, 0, batch=3, rows_per_step=2, new_tokens=6, levels=2, level_weights=(1.0, 0.5))
    totals = train_online(target, [run], prompts, tmp_path, config, sampler=sampler, log=seen.append)
    assert totals["rounds"] >= 1 and run.step >= 1 and len(calls) == totals["rounds"] == len(seen)
    assert next(target.parameters()).dtype == torch.float32  # the target itself is untouched


def test_the_buffer_keeps_the_newest_batches_within_its_token_budget():
    from specdec_lib.training.feature.online import _keep_recent

    batches = [Rollouts(torch.zeros(2, n, dtype=torch.long), torch.tensor([n, n]), torch.tensor([1, 1]))
               for n in (5, 6, 7)]
    assert [b.ids.shape[1] for b in _keep_recent(batches, 26)] == [6, 7]   # 12 + 14 positions
    assert [b.ids.shape[1] for b in _keep_recent(batches, 100)] == [5, 6, 7]
    assert [b.ids.shape[1] for b in _keep_recent(batches, 1)] == [7]       # the newest always stays


def test_bad_settings_are_refused(pair, tmp_path):
    target, draft = pair
    with pytest.raises(ValueError, match="lr"):
        DraftRun("d", draft, lr=0.0, inject_lr=1e-3)
    with pytest.raises(ValueError, match="objective"):
        DraftRun("d", draft, lr=1e-3, inject_lr=1e-3, objective="mse")
    run = DraftRun("d", draft, lr=1e-3, inject_lr=1e-3)
    with pytest.raises(ValueError, match="at least one run"):
        train_online(target, [run], [], tmp_path, OnlineConfig(0.01, EOS, 0))
    with pytest.raises(ValueError, match="positive"):
        train_online(target, [run], [[2, 3]], tmp_path, OnlineConfig(0.01, EOS, 0, batch=0))
    with pytest.raises(ValueError, match="level_weights"):
        online_loss(draft, target.get_output_embeddings().weight, draft.student.lm_head.vocab_ids,
                    _rollouts(target, [[2, 3, 4]], [1]), 3, [1.0])


def test_a_full_head_scores_every_token_as_the_plain_tied_head_does(pair):
    """``with_head(draft, "full")``: the head's vocabulary is every token and its logits are the tied head's own, so
    `online_loss` trains against the whole row; "committed" keeps the sub-vocabulary (its logits -inf elsewhere)."""
    target, draft = pair
    h = torch.randn(3, 32, generator=torch.Generator().manual_seed(0))
    committed = with_head(draft, "committed").student.get_output_embeddings()
    assert committed.vocab_ids.tolist() == list(range(0, VOCAB, 2)) and torch.isinf(committed(h)[:, 1]).all()
    full = with_head(draft, "full").student.get_output_embeddings()
    assert full.vocab_ids.tolist() == list(range(VOCAB))
    assert torch.allclose(full(h), h @ target.get_output_embeddings().weight.T, atol=1e-5)
    with pytest.raises(ValueError, match="head must be one of"):
        with_head(draft, "wide")
    plain = FeatureDraft(build_student(target, 1))  # a draft exported with the full head loads with the plain tied head
    assert own_head(plain) == "full" and own_head(draft) == "committed"
    with pytest.raises(ValueError, match='head="committed" needs a draft with a sub-vocabulary head'):
        with_head(plain, "committed")
    tied = plain.student.get_output_embeddings()(h)
    assert with_head(plain, "full").student.get_output_embeddings().vocab_ids.tolist() == list(range(VOCAB))
    assert torch.allclose(plain.student.get_output_embeddings()(h), tied, atol=1e-5)


def test_a_run_starts_from_an_exported_feature_draft_or_fresh_on_an_independent_draft(pair, tmp_path):
    """`initial_draft`: a directory with the independent draft's layers gives a fresh feature draft on them (feature
    input zero, so it computes what the independent draft computes) with that draft's head vocabulary."""
    from specdec_lib.models.feature_net import export_feature_draft

    target, draft = pair
    export_feature_draft(draft, tmp_path / "feature", {}, head_vocab=torch.arange(0, VOCAB, 2))
    loaded = initial_draft(target, tmp_path / "feature")
    assert torch.equal(loaded.inject.weight, draft.inject.weight.to(torch.bfloat16).float())
    export_draft(build_student(target, 1), tmp_path / "independent", {})
    save_file({"vocab_ids": torch.arange(0, VOCAB, 4)}, str(tmp_path / "independent" / "head_vocab.safetensors"))
    fresh = initial_draft(target, tmp_path / "independent")
    assert not bool(fresh.inject.weight.detach().any())
    assert fresh.student.get_output_embeddings().vocab_ids.tolist() == list(range(0, VOCAB, 4))
    independent = load_exported(target, tmp_path / "independent", head_vocab=True)
    tokens = torch.tensor([[3, 9, 4, 7]])
    with torch.no_grad():
        hidden, _ = fresh(tokens, torch.randn(1, 4, 32), torch.arange(4)[None])
        assert torch.allclose(fresh.head(hidden), independent(tokens).logits, atol=1e-5)
