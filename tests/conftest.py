"""Fixtures shared by the test modules."""

import pytest
import torch

from specdec_lib.models import load_model


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The test machine is shared: one intra-op thread avoids oversubscription (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def target():
    """The offline target, loaded once per test session."""
    return load_model("smollm2-135m-instruct")


def build_tiny_llama(vocab_size: int, head_scale: float = 1.0, name: str = "tiny-target", seed: int = 0):
    """A tiny random Llama `LanguageModel` (2 layers, hidden 32) over ``vocab_size`` tokens, its head
    multiplied by ``head_scale`` (larger: more peaked laws); no tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specdec_lib.models import LanguageModel

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    return LanguageModel(model, None, name)


@pytest.fixture(scope="session")
def tiny_llama():
    """`build_tiny_llama` as a fixture (the test modules call it with their own vocabulary and scale)."""
    return build_tiny_llama
