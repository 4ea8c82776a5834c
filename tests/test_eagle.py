"""The feature draft (`specdec_lib.training.feature`): training levels equal inference, sessions, export, loss.

Tiny random Llama models stand in for the pair (milliseconds per forward); the exact toy proof of
the protocol is in test_feature_draft_exact.py, the real pair's chi-square below.
"""

from collections import Counter

import pytest
import torch

from specdec_lib.decoding import speculative_generate
from specdec_lib.training.distill import tiny_llama
from specdec_lib.training.feature.data import FeatureSample
from specdec_lib.models.feature_net import FeatureDraft, export_feature_draft, grow_feature_draft, load_feature_draft, num_layers_of
from specdec_lib.models.feature import FeatureDraftLM
from specdec_lib.training.feature.levels import draft_levels, level_mask, pack
from specdec_lib.exact import chi_square_pvalue
from specdec_lib.models.hf import LanguageModel
from specdec_lib.models.offline import build_student
from specdec_lib.sampling import process_logits

VOCAB = 64


@pytest.fixture(scope="module")
def tiny():
    target = LanguageModel(tiny_llama(vocab_size=VOCAB, layers=2, hidden=32, seed=3), None, "tiny-target")
    draft = FeatureDraft(build_student(target.model, 1))
    torch.manual_seed(1)
    with torch.no_grad():  # a feature input that matters
        draft.inject.weight.normal_(0.0, 0.5)
    return target, FeatureDraftLM(draft, target, "tiny-eagle")


def _sample(target, tokens, prompt_len):
    tokens = torch.as_tensor(tokens)
    with torch.no_grad():
        hidden = target.model.model(input_ids=tokens[None]).last_hidden_state[0]
    n = len(tokens)
    idx = torch.zeros(n - 1, 2, dtype=torch.long)
    return FeatureSample(tokens, prompt_len, hidden[:-1], idx, torch.zeros(n - 1, 2))


def test_level_mask_is_the_drafted_chain():
    s = FeatureSample(torch.arange(5), 2, torch.zeros(4, 3), torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 1))
    allowed, valid = level_mask(pack([s, s]), 3)
    n = 10
    node = lambda i, m: (m - 1) * n + i  # noqa: E731
    # node (4, 3) of sequence 0 is the 3rd token of a chain rooted at 2: true prefix 0..2, then (3,2), (4,3)
    assert allowed[node(4, 3)].nonzero().flatten().tolist() == [0, 1, 2, node(3, 2), node(4, 3)]
    assert not bool(valid[node(1, 3)]) and bool(valid[node(2, 3)])
    # nothing crosses into the other packed sequence
    assert not bool(allowed[node(7, 2), :5].any())


def test_training_levels_equal_drafting_with_sessions(tiny):
    target, draft_lm = tiny
    tokens = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(0))
    outs = draft_levels(draft_lm.draft, pack([_sample(target, tokens, 3)]), 3)
    for root in (2, 5):
        tsess, dsess = draft_lm.paired_sessions(target, tokens[: root + 1].tolist())
        for m in range(1, 4):
            chain = tokens[root: root + m].tolist()
            got = dsess.tree_logits(chain, list(range(-1, m - 1)), [m - 1])[0]
            want = draft_lm.draft.head(outs[m - 1][root + m - 1]).float()
            assert torch.allclose(got, want, atol=1e-4), (root, m)


def test_depth1_logits_are_level_one(tiny):
    target, draft_lm = tiny
    tokens = torch.randint(0, VOCAB, (9,), generator=torch.Generator().manual_seed(1))
    level1 = draft_levels(draft_lm.draft, pack([_sample(target, tokens, 2)]), 1)[0]
    assert torch.allclose(draft_lm.logits(tokens), draft_lm.draft.head(level1).float(), atol=1e-4)


def test_draft_session_needs_its_target_session(tiny):
    _, draft_lm = tiny
    with pytest.raises(ValueError, match="source"):
        draft_lm.session([1, 2, 3])


def test_export_and_load_round_trip(tiny, tmp_path):
    target, draft_lm = tiny
    export_feature_draft(draft_lm.draft, tmp_path, {"note": "test"}, head_vocab=torch.arange(0, VOCAB, 2))
    loaded = load_feature_draft(target, tmp_path)
    tokens = torch.randint(0, VOCAB, (7,), generator=torch.Generator().manual_seed(2))
    packed = pack([_sample(target, tokens, 2)])
    ref = draft_lm.draft.head(draft_levels(draft_lm.draft, packed, 2)[1])
    got = loaded.head(draft_levels(loaded, packed, 2)[1])
    odd = torch.arange(1, VOCAB, 2)
    assert bool(torch.isinf(got[:, odd]).all())  # the sub-vocabulary head
    even = torch.arange(0, VOCAB, 2)
    # bf16 export: the same model up to rounding, compared as distributions over the kept tokens
    assert torch.allclose(torch.softmax(got[:, even], -1), torch.softmax(ref[:, even].float(), -1), atol=2e-2)


def test_a_grown_draft_computes_what_it_grew_from_and_loads_with_its_layers(tiny, tmp_path):
    from specdec_lib.models.subset_head import use_subset_head

    target = tiny[0]
    small = FeatureDraft(build_student(target.model, 1))
    with torch.no_grad():
        small.inject.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(6))
    use_subset_head(small.student, torch.arange(0, VOCAB, 2))
    grown = grow_feature_draft(small, target, 2)
    assert len(grown.student.model.layers) == 2 and grow_feature_draft(small, target, 1) is small
    tokens = torch.randint(0, VOCAB, (9,), generator=torch.Generator().manual_seed(5))
    packed = pack([_sample(target, tokens, 3)])
    with torch.no_grad():
        for m, (a, b) in enumerate(zip(draft_levels(small, packed, 3), draft_levels(grown, packed, 3))):
            assert torch.equal(small.head(a), grown.head(b)), m  # the added layer adds exactly zero
    # the added layer is the target's last, but for its zeroed output projections
    last, added = target.model.model.layers[-1].state_dict(), grown.student.model.layers[1].state_dict()
    assert torch.equal(added["mlp.up_proj.weight"], last["mlp.up_proj.weight"])
    assert not added["mlp.down_proj.weight"].any() and not added["self_attn.o_proj.weight"].any()
    assert num_layers_of(grown.trainable_state()) == 2
    with torch.no_grad():  # once trained, the added layer matters, and it survives export and loading
        grown.student.model.layers[1].mlp.down_proj.weight.normal_(0.0, 0.3)
    export_feature_draft(grown, tmp_path, {"note": "test"}, head_vocab=torch.arange(0, VOCAB, 2))
    loaded = load_feature_draft(target, tmp_path)
    assert len(loaded.student.model.layers) == 2
    with torch.no_grad():
        ref, got = grown.head(draft_levels(grown, packed, 1)[0]), loaded.head(draft_levels(loaded, packed, 1)[0])
    assert not torch.allclose(ref, small.head(draft_levels(small, packed, 1)[0]))
    even = torch.arange(0, VOCAB, 2)
    assert torch.allclose(torch.softmax(got[:, even], -1), torch.softmax(ref[:, even].float(), -1), atol=2e-2)
    for bad in (0, 3):  # fewer than its own layers; more than the target's
        with pytest.raises(ValueError, match="num_layers"):
            grow_feature_draft(small, target, bad)


def _exact_two_token_law(target, prompt, temperature):
    with torch.no_grad():
        p1 = process_logits(target.logits(prompt)[-1], temperature).double()
        law = {}
        for a in range(VOCAB):
            p2 = process_logits(target.logits(prompt + [a])[-1], temperature).double()
            for b in range(VOCAB):
                law[(a, b)] = float(p1[a] * p2[b])
    return law


@pytest.mark.parametrize("verifier, shape, sampling", [("token", "chain:3", "iid"), ("block", "chain:2", "iid"),
                                                       ("traversal", "kary:2x2", "without_replacement")])
def test_speculative_decoding_with_the_feature_draft_is_lossless(tiny, verifier, shape, sampling):
    target, draft_lm = tiny
    prompt = [5, 17, 3]
    law = _exact_two_token_law(target, prompt, 1.0)
    counts = Counter()
    for seed in range(400):
        out = speculative_generate(target, draft_lm, prompt, verifier=verifier, shape=shape, sampling=sampling,
                                   max_new_tokens=2, seed=seed, ignore_eos=True)
        counts[tuple(out.tokens)] += 1
    assert chi_square_pvalue(counts, law) > 1e-3


@pytest.mark.slow
def test_real_pair_is_lossless_at_temperature_one(target):
    """End to end on the offline pair with the committed feature draft: the first two tokens of
    speculative decoding (a Sequoia-style tree, sampling without replacement) follow the target's
    exact two-token law at T = 1 (chi-square over the likely cells, the rest pooled)."""
    from specdec_lib.models import load_model

    draft = load_model("smollm2-135m-eagle", target=target)
    prompt = target.encode("Name three animals that live in the ocean.").tolist()
    with torch.no_grad():
        p1 = process_logits(target.logits(prompt)[-1], 1.0).double()
        firsts = torch.nonzero(p1 > 2e-3).flatten().tolist()
        law = {}
        for a in firsts:
            p2 = process_logits(target.logits(prompt + [a])[-1], 1.0).double()
            kept = 0.0
            for b in torch.nonzero(p1[a] * p2 > 2e-3).flatten().tolist():
                law[(a, b)] = float(p1[a] * p2[b])
                kept += law[(a, b)]
            law[(a, "*")] = float(p1[a]) - kept
    law["other"] = 1.0 - sum(law.values())
    counts = Counter()
    for seed in range(300):
        out = speculative_generate(target, draft, prompt, verifier="token", shape="kary:2x2",
                                   sampling="without_replacement", max_new_tokens=2, seed=seed, ignore_eos=True)
        a, b = out.tokens
        cell = (a, b) if (a, b) in law else ((a, "*") if (a, "*") in law else "other")
        counts[cell] += 1
    assert chi_square_pvalue(counts, law) > 1e-3


def test_per_prompt_acceptance_and_paired_frame():
    from specdec_lib import verdicts as V
    from specdec_lib.training.feature import evaluate as EV

    sums = torch.tensor([[[1.0, 0.5], [0.8, 0.4]], [[3.0, 1.0], [2.0, 1.0]]], dtype=torch.float64)  # [S, D, T]
    counts = torch.tensor([[2, 2], [4, 4]])
    result = {"temperatures": [1.0, 0.2], "sums": sums, "counts": counts}
    assert EV.per_prompt_acceptance(result) == [[0.5, 0.4], [0.75, 0.5]]
    assert EV.per_prompt_acceptance(result, 0.2) == [[0.25, 0.2], [0.25, 0.25]]
    record = {"evaluation": {"per_prompt_t1": [[0.5, 0.4], [0.75, 0.5]], "independent_per_prompt_t1": [[0.4, 0.4], [0.7, 0.7]],
                             "prompt_ids": ["a", "b"], "prompt_categories": ["qa", "math"]}}
    frame = EV.paired_prompt_frame(record)
    assert len(frame) == 8 and set(frame["verifier"]) == {"feature", "independent"}
    d = V.GainCheck("feature > independent", "feature", "independent", {"depth": 1}, value="acceptance",
                    relative=False).evaluate(frame)
    assert abs(d.estimate - 0.075) < 1e-12
    with pytest.raises(ValueError, match="per-prompt"):
        EV.paired_prompt_frame({"evaluation": {}})






def test_training_summary_and_loss_frame_read_both_record_kinds():
    from specdec_lib.training.feature.evaluate import online_loss_frame, training_summary

    cpu = {"step": 10, "minutes": 2.0, "data": {"tokens": 1234, "minutes": 1.5}}
    fwd = {"draft_ms": 1.0, "target_ms": 10.0, "ratio": 0.1}
    assert "10 steps" in training_summary({"training": cpu, "forward_time": fwd})
    assert online_loss_frame({"training": cpu}).empty
    online = {"sampled_tokens": 5000, "minutes": 3.0, "device": "GPU X", "steps": 7, "started_from": cpu,
              "loss_curve": [[1, 0.5, 2500, 1.0, 0.9, 1.1], [2, 1.0, 5000, 0.8, 0.7, 0.9]]}
    text = training_summary({"training": online, "forward_time": fwd})
    assert "GPU X" in text and "5,000" in text and "10 steps" in text
    # an online run that started from an online run that started from the CPU-trained draft
    second = {**online, "sampled_tokens": 7000, "device": "GPU Y", "started_from": online}
    text = training_summary({"training": second, "forward_time": fwd})
    assert text.index("GPU Y") < text.index("GPU X") < text.index("10 steps") and "7,000" in text
    assert "objective" not in text and "head" not in text  # KL with the committed head: the defaults, unnamed
    third = {**online, "objective": "tv", "head": "full", "started_from": second}
    text = training_summary({"training": third, "forward_time": fwd})
    assert "(rejection-probability objective; full head; 5,000 target-sampled tokens, 7 steps)" in text
    frame = online_loss_frame({"training": online})
    assert sorted(frame["series"].unique()) == ["level 1", "level 2", "total"] and len(frame) == 6


def test_online_training_record_reads_its_run_and_the_draft_it_started_from(tmp_path):
    import json

    from specdec_lib.training.feature.evaluate import _online_training

    (tmp_path / "online_summary.json").write_text(json.dumps({
        "totals": {"minutes": 2.0, "sampled_tokens": 900, "steps": {"d": 5, "e": 5}}, "device": "GPU X",
        "acceptance_before": [0.3], "acceptance_after": {"d": [0.4], "e": [0.35]},
        "init": {"directory": "x", "training": {"step": 10}}}))
    (tmp_path / "online_log.jsonl").write_text(
        "\n".join(json.dumps({"round": i, "minutes": i / 2, "sampled_tokens": 450 * i,
                              "d": {"steps": 2, "loss": [1.0 / i, 0.9 / i]}, "e": {"steps": 2, "loss": None}})
                  for i in (1, 2)) + "\n")
    rec = _online_training(tmp_path / "d.safetensors")
    assert rec["run"] == "d" and rec["steps"] == 5 and rec["device"] == "GPU X"
    assert rec["sampling_dtype"] == "float32"  # summaries written before --sample-dtype existed
    assert rec["started_from"] == {"step": 10} and rec["heldout_check_t1_by_depth"]["after"] == [0.4]
    assert rec["loss_curve"] == [[1, 0.5, 450, 1.0, 0.9], [2, 1.0, 900, 0.5, 0.45]]
    assert rec["objective"] == "kl"  # summaries written before --objectives existed
    summary = json.loads((tmp_path / "online_summary.json").read_text())
    (tmp_path / "online_summary.json").write_text(json.dumps({**summary, "objectives": {"d": "kl", "e": "tv"}}))
    assert _online_training(tmp_path / "e.safetensors")["objective"] == "tv"
    assert _online_training(tmp_path / "e.safetensors")["head"] == "committed"  # summaries before --heads existed
    (tmp_path / "online_summary.json").write_text(json.dumps({**summary, "heads": {"d": "committed", "e": "full"}}))
    assert _online_training(tmp_path / "e.safetensors")["head"] == "full"




def test_an_export_without_a_head_vocabulary_loads_with_the_full_head(tmp_path):
    """Exporting a full-head draft over a directory that held a head vocabulary removes the stale file: the
    reloaded draft has the plain tied head, not the earlier sub-vocabulary one."""
    target = tiny_llama(vocab_size=VOCAB, layers=2, hidden=32, seed=5)
    draft = FeatureDraft(build_student(target, 1))
    export_feature_draft(draft, tmp_path, {}, head_vocab=torch.arange(0, VOCAB, 2))
    assert getattr(load_feature_draft(target, tmp_path).student.get_output_embeddings(), "vocab_ids", None) is not None
    export_feature_draft(draft, tmp_path, {})
    assert not (tmp_path / "head_vocab.safetensors").exists()
    assert getattr(load_feature_draft(target, tmp_path).student.get_output_embeddings(), "vocab_ids", None) is None




