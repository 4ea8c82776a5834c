"""Tests of specdec_lib.training.distill on a tiny random Llama (fast; the real target is not needed)."""

import json
import math

import pytest
import torch

from specdec_lib.training import distill as D
from specdec_lib.training.distill.export import _RoundedWeights
from specdec_lib.training.distill.loss import _rows
from specdec_lib.training.losses import topk_kl

VOCAB = 48


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    return D.tiny_llama(vocab_size=VOCAB, layers=4, hidden=32, seed=1)


@pytest.fixture(scope="module")
def samples(target):
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, VOCAB, (n,), generator=gen).tolist() for n in (3, 5, 2, 6)]
    return D.sample_continuations(target, prompts, max_new_tokens=10, topk=VOCAB, generator=gen, start=1)


def test_student_builds_from_the_first_layers(target):
    from specdec_lib.models.offline import build_student

    student = build_student(target, 2)
    assert student.config.num_hidden_layers == 2
    assert student.lm_head.weight is target.model.embed_tokens.weight
    for name, p in student.model.layers.state_dict().items():
        assert torch.equal(p, target.model.layers.state_dict()[name])
    trainable = D.trainable_parameters(student)
    assert all(k.startswith("model.layers.") or k == "model.norm.weight" for k in trainable)
    assert not target.model.embed_tokens.weight.requires_grad


def test_sampled_rows_are_the_target_distributions(target, samples):
    s = samples[1]
    assert s.topk_idx is None and s.num_rows == len(s.tokens) - 1 - s.start
    with torch.no_grad():
        ref = torch.log_softmax(target(s.tokens[None]).logits[0].float(), -1)[s.start:-1]
    assert torch.allclose(s.topk_logp.float(), ref, rtol=1e-3, atol=2e-3)  # stored as float16


def test_one_training_step_lowers_the_kl(target, samples):
    from specdec_lib.models.offline import build_student

    student = build_student(target, 2)
    params = D.trainable_parameters(student)
    opt = torch.optim.AdamW(list(params.values()), lr=3e-3)

    def kl():
        with torch.no_grad():
            idx, logp = _rows(samples)
            return float(topk_kl(D.student_rows(student, samples), idx, logp).mean())

    before = kl()
    loss = D.train_step(student, opt, samples)
    assert math.isclose(loss, before, rel_tol=1e-4)
    assert kl() < before
    # control: a zero learning rate leaves the KL unchanged (so the decrease above is the step's doing)
    for g in opt.param_groups:
        g["lr"] = 0.0
    frozen = kl()
    D.train_step(student, opt, samples)
    assert math.isclose(kl(), frozen, rel_tol=1e-6)


def test_acceptance_rate_is_one_minus_total_variation(target, samples):
    from specdec_lib.models.offline import build_student

    same = build_student(target, 4)  # all layers: the target itself
    assert D.acceptance_rate(same, samples)["mean"] == pytest.approx(1.0, abs=2e-3)
    student = build_student(target, 1)
    res = D.acceptance_rate(student, samples)
    rows_p, rows_q = [], []
    with torch.no_grad():
        for s in samples:
            first = s.prompt_len - 1
            rows_p.append(torch.softmax(target(s.tokens[None]).logits[0], -1)[first:-1])
            rows_q.append(torch.softmax(student(s.tokens[None]).logits[0], -1)[first:-1])
    p, q = torch.cat(rows_p), torch.cat(rows_q)
    assert res["positions"] == p.shape[0]
    assert res["mean"] == pytest.approx(float(1 - 0.5 * (p - q).abs().sum(-1).mean()), abs=2e-3)
    assert 0.0 < res["mean"] < 0.999
    topk_samples = [D.Sample(s.tokens, s.start, s.prompt_len, torch.zeros(s.num_rows, 2, dtype=torch.long),
                             s.topk_logp[:, :2]) for s in samples]
    with pytest.raises(ValueError, match="full distributions"):
        D.acceptance_rate(student, topk_samples)


def test_samples_round_trip_through_safetensors(samples, tmp_path):
    D.save_samples(samples, tmp_path / "s.safetensors")
    back = D.load_samples(tmp_path / "s.safetensors")
    assert len(back) == len(samples)
    for a, b in zip(samples, back):
        assert torch.equal(a.tokens, b.tokens) and (a.start, a.prompt_len) == (b.start, b.prompt_len)
        assert torch.equal(a.topk_logp.half(), b.topk_logp.half())


def test_export_and_load_give_the_same_logits(target, tmp_path):
    from specdec_lib.models.hf import LanguageModel
    from specdec_lib.models.offline import load_draft

    from specdec_lib.models.offline import build_student

    student = build_student(target, 2)
    with torch.no_grad():
        for p in D.trainable_parameters(student).values():
            p.add_(0.05 * torch.randn_like(p))
    D.export_draft(student, tmp_path, {"training": {"steps": 1}}, dtype="float32")
    record = json.loads((tmp_path / "draft.json").read_text())
    assert record["num_hidden_layers"] == 2 and record["base_model"] == "smollm2-135m-instruct"
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    with torch.no_grad():
        want = student(ids).logits
        mine = D.load_exported(target, tmp_path)(ids).logits
        theirs = load_draft(LanguageModel(target, None, "tiny"), directory=tmp_path).model(ids).logits
    assert torch.equal(mine, want)
    torch.testing.assert_close(theirs, want, rtol=1e-5, atol=1e-5)  # LanguageModel: SmallBatchLinear rounding
    # bfloat16 export: what the record's acceptance describes is the rounded student
    D.export_draft(student, tmp_path, {}, dtype="bfloat16")
    with torch.no_grad(), _RoundedWeights(student, "bfloat16"):
        rounded = student(ids).logits
    with torch.no_grad():
        assert torch.equal(D.load_exported(target, tmp_path)(ids).logits, rounded)
        assert torch.equal(student(ids).logits, want)  # weights restored after the context


def test_resume_continues_from_the_checkpoint(target, samples, tmp_path):
    from specdec_lib.models.offline import build_student

    def fresh():
        student = build_student(target, 2)
        params = D.trainable_parameters(student)
        return student, torch.optim.AdamW(list(params.values()), lr=2e-3)

    straight, opt = fresh()
    for _ in range(3):
        D.train_step(straight, opt, samples)

    first, opt1 = fresh()
    D.train_step(first, opt1, samples)
    D.save_checkpoint(tmp_path, first, opt1, {"steps": 1, "config": {"layers": 2}})
    second, opt2 = fresh()
    state = D.load_checkpoint(tmp_path, second, opt2)
    assert state["steps"] == 1
    for _ in range(2):
        D.train_step(second, opt2, samples)
    for (k, a), b in zip(D.trainable_parameters(straight).items(), D.trainable_parameters(second).values()):
        assert torch.allclose(a, b, atol=1e-6), k
    # control: without the optimizer moments the trajectory differs
    third, opt3 = fresh()
    D.load_checkpoint(tmp_path, third, opt3)
    opt3.state.clear()
    for _ in range(2):
        D.train_step(third, opt3, samples)
    diff = max(float((a - b).detach().abs().max()) for a, b in zip(D.trainable_parameters(straight).values(),
                                                          D.trainable_parameters(third).values()))
    assert diff > 1e-5


def test_distill_run_resumes_and_exports(target, tmp_path):
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, VOCAB, (int(n),), generator=gen).tolist() for n in torch.randint(2, 6, (24,), generator=gen)]
    cfg = D.DistillConfig(layers=2, lr=3e-3, batch_size=4, topk=16, gen_batch=8, new_tokens=8, eval_prompts=4,
                          eval_new_tokens=6, gen_minutes=0.01, train_minutes=0.02, warmup_steps=1, timing_repeats=3,
                          prefix_len=8)
    rec = D.distill(target, tmp_path / "run", prompts[:20], prompts[20:], cfg,
                    D.RunSettings(0.03, export_dir=tmp_path / "out", progress=False, echo=False))
    steps = rec["training"]["steps"]
    assert steps >= 1 and (tmp_path / "out" / "layers.safetensors").is_file()
    saved = json.loads((tmp_path / "out" / "draft.json").read_text())
    assert 0.0 < saved["evaluation"]["mean_acceptance"] <= 1.0 and saved["forward_time"]["draft_ms"] > 0
    with pytest.raises(ValueError, match="resume"):
        D.distill(target, tmp_path / "run", prompts[:20], prompts[20:], cfg, D.RunSettings(0.03, progress=False, echo=False))
    rec2 = D.distill(target, tmp_path / "run", prompts[:20], prompts[20:], cfg,
                     D.RunSettings(0.03, export_dir=tmp_path / "out", resume=True, progress=False, echo=False))
    assert rec2["training"]["steps"] > steps
    assert rec2["training"]["sequences"] > rec["training"]["sequences"]
    with pytest.raises(ValueError, match="layers"):
        D.distill(target, tmp_path / "run", prompts[:20], prompts[20:], D.DistillConfig(layers=3),
                  D.RunSettings(0.03, resume=True, progress=False, echo=False))


def test_seed_instructions_are_varied_and_deterministic():
    a, b = D.seed_instructions(500, seed=0), D.seed_instructions(500, seed=0)
    assert a == b and len(a) == 500 and len(set(a)) > 400
    assert any(t.startswith("Translate") for t in a) and any(t.startswith("Summar") for t in a)
    assert D.common_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    with pytest.raises(ValueError):
        D.seed_instructions(-1)


def test_measure_theory_first_position_is_the_acceptance_rate(target, samples):
    from specdec_lib.models.offline import build_student

    student = build_student(target, 1)
    res = D.measure_theory(student, samples, max_children=3, max_rows=1000, num_samples=4)
    assert res is not None
    acc = D.acceptance_rate(student, samples)["mean"]
    # p_1 of sampling without replacement is sum_x min(p, q) (exact in the Rao-Blackwellised estimator);
    # the race coupling's first index can not beat the maximal coupling (Monte Carlo slack)
    assert res["sequoia_positional_acceptance"][0] == pytest.approx(acc, abs=3e-3)
    assert 0.0 < res["erss_r_vector"][0] <= acc + 0.05
    assert sum(res["sequoia_positional_acceptance"]) <= 1.0 + 1e-9
    assert res["theory_measurement"]["rows"] == sum(len(s.tokens) - s.prompt_len for s in samples)


def test_summary_table_shows_goals_and_head_vocabulary():
    record = {"num_hidden_layers": 2, "evaluation": {"mean_acceptance": 0.34},
              "forward_time": {"draft_ms": 5.0, "target_ms": 60.0, "ratio": 5 / 60},
              "head_vocabulary": {"size": 8192, "full_head_acceptance": 0.343, "target_mass_outside": 0.1}}
    table = D.summary_table(record)["value"]
    assert not table["acceptance goal >= 0.6"] and table["cost goal <= 0.25"]
    assert table["head vocabulary (most frequent tokens)"] == 8192
    assert "head vocabulary (most frequent tokens)" not in D.summary_table({})["value"]


def test_write_head_vocab_then_the_loaded_draft_scores_only_those_tokens(target, tmp_path):
    from specdec_lib.models.hf import LanguageModel
    from specdec_lib.models.offline import build_student, load_draft
    from specdec_lib.models.subset_head import SubsetHead

    run = tmp_path / "run"
    text = [D.Sample(torch.tensor([5, 7, 7, 9, 7, 9]), 3, 2, None, torch.zeros(2, VOCAB)),
            D.Sample(torch.tensor([3, 7, 11]), 1, 2, None, torch.zeros(1, VOCAB))]
    D.save_samples(text, run / "data" / "train_0000.safetensors")
    D.export_draft(build_student(target, 2), tmp_path, {}, dtype="float32")
    info = D.write_head_vocab(tmp_path, run, 3)
    assert info["size"] == 3 and "9 tokens" in info["source"]
    assert D.load_exported(target, tmp_path).get_output_embeddings().__class__ is not SubsetHead  # training: full
    draft = load_draft(LanguageModel(target, None, "tiny"), directory=tmp_path)
    assert draft.vocab_size == VOCAB
    with torch.no_grad():
        logits = draft.model(torch.tensor([[1, 5, 7]])).logits
    # counts: 7 x4, 9 x2, then 3, 5 and 11 once each (ties: smaller id first)
    assert torch.isfinite(logits[0, -1]).nonzero().flatten().tolist() == [3, 7, 9]
    assert D.load_exported(target, tmp_path, head_vocab=True).get_output_embeddings().vocab_ids.tolist() == [7, 9, 3]
