"""SmallBatchLinear computes what torch.nn.Linear computes (up to float rounding), on every path:
one row through a wide head (cached transposed weight), one row, a few rows, many rows, 3-D inputs,
with and without bias, after in-place weight updates, and under autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec_lib.models import LanguageModel
from specdec_lib.models.cpu_linear import SmallBatchLinear, use_small_batch_linear, use_torch_linear


def _pair(in_features, out_features, bias, seed=0):
    torch.manual_seed(seed)
    ref = torch.nn.Linear(in_features, out_features, bias=bias)
    fast = torch.nn.Linear(in_features, out_features, bias=bias)
    fast.load_state_dict(ref.state_dict())
    assert use_small_batch_linear(fast) == 1
    return ref, fast


@pytest.mark.parametrize("in_features,out_features", [(24, 40), (40, 24), (16, 400)])  # 400 >= 8 * 16: a head
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1,), (1, 1), (2,), (1, 5), (3, 7), (130,)])
def test_equals_torch_linear(in_features, out_features, bias, shape):
    ref, fast = _pair(in_features, out_features, bias)
    x = torch.randn(*shape, in_features)
    with torch.inference_mode():
        expected, got = ref(x), fast(x)
    assert got.shape == expected.shape == (*shape, out_features)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_transposed_head_copy_follows_weight_updates():
    ref, fast = _pair(16, 400, bias=False)
    x = torch.randn(1, 16)
    with torch.no_grad():
        first = fast(x)
        assert fast._weight_t[1].shape == (16, 400)   # (key, transposed copy)
        fast.weight.mul_(-2.0)          # in place: the cached copy must be remade
        ref.weight.mul_(-2.0)
        torch.testing.assert_close(fast(x), ref(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast(x), -2.0 * first, rtol=1e-5, atol=1e-5)
        fast.weight = torch.nn.Parameter(torch.randn(400, 16))   # a new tensor
        torch.testing.assert_close(fast(x), F.linear(x, fast.weight), rtol=1e-5, atol=1e-5)


def test_gradients_use_torch_kernel_and_match():
    ref, fast = _pair(24, 40, bias=True)
    x = torch.randn(3, 24)
    ref(x).square().sum().backward()
    fast(x).square().sum().backward()
    torch.testing.assert_close(fast.weight.grad, ref.weight.grad)
    torch.testing.assert_close(fast.bias.grad, ref.bias.grad)


def test_language_model_switches_cpu_float32_only_and_can_undo():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(1)
    plain = LlamaForCausalLM(cfg).eval()
    torch.manual_seed(1)
    lm = LanguageModel(LlamaForCausalLM(cfg), None, "tiny")
    assert lm.small_batch_linears == 2 * 7 + 1          # q k v o gate up down per layer + head
    assert "small-batch linears: 15" in repr(lm)
    ids = torch.randint(0, 300, (1, 6))
    with torch.inference_mode():
        torch.testing.assert_close(lm.model(ids).logits, plain(ids).logits, rtol=1e-5, atol=1e-5)
    assert use_torch_linear(lm.model) == 15
    assert not any(isinstance(m, SmallBatchLinear) for m in lm.model.modules())
    torch.manual_seed(1)
    half = LanguageModel(LlamaForCausalLM(cfg).to(torch.bfloat16), None, "tiny-bf16")
    assert half.small_batch_linears == 0
