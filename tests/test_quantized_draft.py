"""The quantized self-draft (specdec_lib.models.quantized): the 4-bit grid, the CPU int4 kernel against
the dequantised weight, the copy of a model, the offline name, and losslessness with it on the real pair."""

import pytest
import torch
import torch.nn.functional as F

from specdec_lib.models import load_model
from specdec_lib.models.offline import QUANTIZED_DIR, QUANTIZED_NAME
from specdec_lib.models.quantized import QuantizedLinear, dequantize_groups, quantize_groups, quantized_copy


def test_rounding_error_is_at_most_half_a_step_and_codes_are_4_bit():
    w = torch.randn(24, 128, generator=torch.Generator().manual_seed(0))
    codes, scales, lows = quantize_groups(w, 32)
    assert codes.dtype == torch.int32 and int(codes.min()) >= 0 and int(codes.max()) <= 15
    assert scales.shape == lows.shape == (24, 4)
    err = (dequantize_groups(codes, scales, lows) - w).abs().reshape(24, 4, 32)
    assert bool((err <= scales[..., None] / 2 + 1e-6).all())
    # every group uses its whole range: its minimum and maximum are on the grid exactly
    assert bool((codes.reshape(24, 4, 32).amin(-1) == 0).all()) and bool((codes.reshape(24, 4, 32).amax(-1) == 15).all())


def test_a_weight_on_the_grid_is_returned_exactly():
    gen = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 16, (8, 64), generator=gen, dtype=torch.int32)
    codes[:, 0], codes[:, 1], codes[:, 32], codes[:, 33] = 0, 15, 0, 15   # each group spans 0..15
    scales, lows = torch.rand(8, 2, generator=gen) + 0.1, torch.randn(8, 2, generator=gen)
    w = dequantize_groups(codes, scales, lows)
    again = quantize_groups(w, 32)
    assert torch.equal(again[0], codes)
    assert torch.allclose(dequantize_groups(*again), w, atol=1e-6)


@pytest.mark.parametrize("weight,group,match", [
    (torch.zeros(4, 10), 4, "group must divide"), (torch.zeros(8), 4, "weight must be a 2-D"),
    (torch.zeros(4, 8), True, "group must be an integer"), (torch.zeros(4, 8), 1, "group must be an integer"),
    ("w", 4, "weight must be a 2-D")])
def test_bad_arguments_are_value_errors(weight, group, match):
    with pytest.raises(ValueError, match=match):
        quantize_groups(weight, group)


def test_cpu_int4_kernel_matches_the_dequantised_weight():
    w = torch.randn(96, 192, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    layer = QuantizedLinear(w, 64)
    assert "int4 CPU kernel" in repr(layer)
    x = torch.randn(2, 5, 192, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    y = layer(x)
    ref = F.linear(x.float(), layer.weight.float())
    assert y.shape == (2, 5, 96) and y.dtype == torch.bfloat16
    assert float((y.float() - ref).abs().max()) <= 0.02 * float(ref.abs().max())
    # float32 layers (and other devices) multiply by the dequantised weight itself
    layer32 = QuantizedLinear(w.float(), 64)
    assert "dequantised weight" in repr(layer32)
    assert torch.equal(layer32(x.float()), F.linear(x.float(), layer32.weight))


@pytest.mark.parametrize("dtype,group", [(torch.float32, 16), (torch.bfloat16, 32)])
def test_quantized_copy_replaces_every_linear_and_shares_the_embeddings(tiny_llama, dtype, group):
    lm = tiny_llama(64)
    model = lm.model.to(dtype)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    draft = quantized_copy(model, group)
    linears = [m for m in draft.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    assert linears == [] and isinstance(draft.lm_head, QuantizedLinear)
    assert draft.model.embed_tokens.weight is model.model.embed_tokens.weight
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())   # the target is untouched
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with torch.no_grad():
        p = torch.softmax(model(ids).logits.float(), -1)
        q = torch.softmax(draft(ids).logits.float(), -1)
    assert float(torch.minimum(p, q).sum(-1).mean()) > 0.9       # close to the model it copies
    assert not torch.equal(p, q)                                  # but a different law


def test_quantized_copy_refuses_what_it_cannot_copy(tiny_llama):
    with pytest.raises(ValueError, match="Llama-style"):
        quantized_copy(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="group must divide"):
        quantized_copy(tiny_llama(64).model, 48)


@pytest.fixture(scope="module")
def int4(target):
    return load_model(QUANTIZED_NAME, target=target)


def test_the_offline_name_loads_the_requantized_target_with_its_record(target, int4):
    assert int4.name == QUANTIZED_NAME and int4.vocab_size == target.vocab_size
    assert int4.record_dir == QUANTIZED_DIR
    ids = target.encode("Write a short poem about the sea.")
    with torch.no_grad():
        p = torch.softmax(target.model(ids[None]).logits[0].double(), -1)
        q = torch.softmax(int4.model(ids[None]).logits[0].double(), -1)
    beta = float(torch.minimum(p, q).sum(-1).mean())
    assert 0.55 < beta < 0.95, beta      # the papers' regime, not the target itself


@pytest.mark.slow
def test_lossless_with_the_quantized_draft_on_the_real_pair(target, int4, monkeypatch):
    from test_decoding import (E2E_ALPHA, E2E_TEMPERATURE, MemoLM, _accept_everything, _two_token_counts,
                               chi_square_pvalue, two_token_law)
    from specdec_lib.verifiers import VERIFIERS, Verifier

    t, d = MemoLM(target), MemoLM(int4)
    prompt = target.encode("Once upon a time", chat=False).tolist()
    law = two_token_law(t, prompt, E2E_TEMPERATURE)
    for verifier, shape, sampling in [("block", "chain:2", "iid"), ("traversal", "kary:2x3", "iid")]:
        counts = _two_token_counts(t, d, prompt, law, verifier, shape, sampling, 250, seed0=2000)
        assert chi_square_pvalue(counts, law) > E2E_ALPHA, (verifier, counts.most_common(6))
    # control: a verifier that accepts every draft outputs the draft's law, which the same test must reject
    monkeypatch.setitem(VERIFIERS, "broken", Verifier("broken", _accept_everything, None, lambda tree: None,
                                                      "accepts every draft"))
    counts = _two_token_counts(t, d, prompt, law, "broken", "chain:2", "iid", 250, seed0=2000)
    assert chi_square_pvalue(counts, law) < E2E_ALPHA


# ----- draft_measure: the record's acceptance ------------------------------------------------------------

def test_acceptance_frame_measures_every_held_out_prompt_on_the_experiments_rows(target):
    """The record's rows are `experiments.matched_rows` (the target's own continuation of the chat-encoded prompt,
    both models teacher-forced on it): a draft equal to the target accepts every position."""
    from specdec_lib import experiments as E
    from specdec_lib.experiments.draft_measure import MeasureSettings, acceptance_frame

    frame, rows = acceptance_frame(target, target, [1.0], per_category=1, new_tokens=2, progress=False)
    assert sorted(frame["category"]) == E.prompt_categories() and frame["acceptance"].to_numpy() == pytest.approx(1.0)
    p, q = rows[1.0]
    assert p.shape == q.shape == (int(frame["positions"].sum()), target.vocab_size)
    for kwargs, match in [(dict(temperatures=[0.0], new_tokens=2), "temperature"),
                          (dict(temperatures=[1.0], new_tokens=0), "new_tokens")]:
        with pytest.raises(ValueError, match=match):
            acceptance_frame(target, target, per_category=1, progress=False, **kwargs)
        with pytest.raises(ValueError, match=match):
            MeasureSettings(**kwargs)


def test_summarize_acceptance_weights_prompts_by_positions():
    import pandas as pd

    from specdec_lib.experiments.draft_measure import summarize_acceptance

    frame = pd.DataFrame({"temperature": [1.0] * 4, "category": ["a", "a", "b", "b"],
                          "prompt_id": list("wxyz"), "positions": [10, 30, 20, 20], "acceptance": [0.5, 0.7, 0.6, 0.8]})
    out = summarize_acceptance(frame).iloc[0]
    assert out["mean"] == pytest.approx((5 + 21 + 12 + 16) / 80) and out["prompts"] == 4 and out["positions"] == 80
    assert out["ci_low"] <= out["mean"] <= out["ci_high"]
    by_cat = summarize_acceptance(frame, ("temperature", "category")).set_index("category")
    assert by_cat.loc["a", "mean"] == pytest.approx(0.65)


def test_another_target_gets_its_own_named_copy_without_the_offline_record():
    from transformers import LlamaConfig, LlamaForCausalLM

    from specdec_lib.models import LanguageModel
    from specdec_lib.models.offline import load_quantized_draft

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
    target = LanguageModel(LlamaForCausalLM(cfg), None, "my-target")
    draft = load_quantized_draft(target)
    assert draft.name == "my-target-int4-self-draft" and draft.record_dir is None
    assert draft.vocab_size == 40 and isinstance(draft.model.lm_head, QuantizedLinear)
    assert target.model.lm_head.weight is target.model.model.embed_tokens.weight   # the target stays tied


def test_acceptance_frame_skips_a_prompt_the_target_answers_with_nothing_and_nothing_else(monkeypatch):
    import types

    from specdec_lib.experiments import draft_measure
    from specdec_lib.experiments import NoRowsError
    from specdec_lib.experiments.collection import joined_rows

    with pytest.raises(NoRowsError):   # the shared mechanism's own error, a ValueError
        joined_rows([], [], "hf")
    assert issubclass(NoRowsError, ValueError)
    prompts = [types.SimpleNamespace(id=f"qa-{i}", category="qa") for i in range(3)]
    monkeypatch.setattr(draft_measure, "prompts_for", lambda pair, per_category: prompts)
    rows = torch.softmax(torch.randn(2, 5, dtype=torch.float64), -1)

    def fake_rows(pair, chosen, temperature, **kwargs):
        if chosen[0].id == "qa-1":
            raise NoRowsError("no rows collected (every generation was empty)")
        return rows, rows

    monkeypatch.setattr(draft_measure, "matched_rows", fake_rows)
    lm = types.SimpleNamespace(name="m")
    frame, _ = draft_measure.acceptance_frame(lm, lm, [1.0], per_category=1, new_tokens=2, progress=False)
    assert list(frame["prompt_id"]) == ["qa-0", "qa-2"] and frame["acceptance"].to_numpy() == pytest.approx(1.0)
    monkeypatch.setattr(draft_measure, "matched_rows", lambda *a, **k: (_ for _ in ()).throw(ValueError("other")))
    with pytest.raises(ValueError, match="other"):   # any other error is not swallowed
        draft_measure.acceptance_frame(lm, lm, [1.0], per_category=1, new_tokens=2, progress=False)
