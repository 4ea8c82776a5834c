"""speculative_generate / autoregressive_generate on the offline target.

* greedy (T = 0): speculative output equals autoregressive output token for token, which equals
  HF ``generate(do_sample=False)``; EOS and max_new_tokens cut inside an accepted block;
* losslessness end to end (slow): the law of the first two generated tokens under every verifier on
  a chain and a tree matches the exact target law (chi-square), and a broken verifier fails;
  these runs use `MemoLM`, which computes the same distributions by plain forwards memoised by
  context; `test_memo_matches_kv_sessions` shows that with the same seed it gives the very same
  tokens as the real KV-cached tree passes;
* errors, seeds, per-step statistics, greedy block state threading.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from specdec_lib import decoding
from specdec_lib.decoding import autoregressive_generate, resolve_shape, speculative_generate
from specdec_lib.exact import chi_square_pvalue
from specdec_lib.models import LanguageModel
from specdec_lib.models.offline import build_student
from specdec_lib.sampling import process_logits
from specdec_lib.verifiers import VERIFIERS, Outcome, Verifier


@pytest.fixture(scope="module")
def draft4(target):
    """The target truncated to its first 4 layers: a legitimate (if poor) draft."""
    return LanguageModel(build_student(target, 4), target.tokenizer, "smollm2-first-4-layers")


@pytest.fixture(scope="module")
def draft2(target):
    return LanguageModel(build_student(target, 2), target.tokenizer, "smollm2-first-2-layers")


@pytest.fixture(scope="module")
def tiny_pair():
    """A tiny random Llama target over 97 tokens and its first layer as the draft (real KV sessions,
    milliseconds per forward)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    tgt = LanguageModel(LlamaForCausalLM(cfg), None, "tiny-target")
    return tgt, LanguageModel(build_student(tgt, 1), None, "tiny-draft")


class MemoLM:
    """The decode loop's view of a `LanguageModel` (sessions with ``tree_logits`` and ``commit``)
    computing every node's logits by a plain causal forward of its full context, memoised by context.
    Equal-length contexts share one batched forward."""

    def __init__(self, lm):
        self.lm, self.name, self.vocab_size = lm, lm.name + "+memo", lm.vocab_size
        self.tokenizer, self.max_context, self.device = lm.tokenizer, lm.max_context, lm.device
        self.eos_token_id = lm.eos_token_id
        self.memo: dict[tuple[int, ...], torch.Tensor] = {}

    def logits_of(self, contexts):
        missing = {c for c in contexts if c not in self.memo}
        for length in sorted({len(c) for c in missing}):
            group = sorted(c for c in missing if len(c) == length)
            with torch.no_grad():
                out = self.lm.model(input_ids=torch.tensor(group), use_cache=False).logits[:, -1].float()
            self.memo.update(zip(group, out))
        return torch.stack([self.memo[c] for c in contexts])

    def session(self, prompt):
        return _MemoSession(self, [int(t) for t in prompt])


class _MemoSession:
    def __init__(self, lm, prompt):
        self.lm, self.fixed, self.tokens, self.parents = lm, prompt, [], []

    def _set(self, tokens, parents):
        tokens = [int(t) for t in (tokens.tolist() if torch.is_tensor(tokens) else tokens)]
        parents = [int(p) for p in (parents.tolist() if torch.is_tensor(parents) else parents)]
        if len(tokens) >= len(self.tokens):
            self.tokens, self.parents = tokens, parents

    def _context(self, i):
        path = []
        while i > 0:
            path.append(self.tokens[i])
            i = self.parents[i]
        return tuple(self.fixed) + tuple(reversed(path))

    def tree_logits(self, tokens, parents, nodes=None):
        self._set(tokens, parents)
        nodes = range(len(self.tokens)) if nodes is None else nodes
        return self.lm.logits_of([self._context(i) for i in nodes])

    def commit(self, path, extra, tokens=None, parents=None):
        if tokens is not None:
            self._set(tokens, parents)
        self.fixed = self.fixed + [self.tokens[i] for i in path] + [int(extra)]
        self.tokens, self.parents = [], []


# ----- greedy ----------------------------------------------------------------------------------------

def test_greedy_speculative_equals_autoregressive_equals_hf(target, draft4):
    ids = target.encode("Name three fruits.")
    n = 10
    ar = autoregressive_generate(target, ids, temperature=0, max_new_tokens=n, ignore_eos=True)
    with torch.no_grad():
        hf = target.model.generate(input_ids=ids[None], attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                   max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert ar.tokens == hf[0, len(ids):].tolist()
    assert len(ar.steps) == n and ar.stop_reason == "length"
    runs = [(target, "block", "chain:4", "iid"),               # draft == target: whole blocks accepted
            (draft4, "token", "kary:2x3", "without_replacement")]
    for draft, verifier, shape, sampling in runs:
        out = speculative_generate(target, draft, ids, verifier=verifier, shape=shape, sampling=sampling,
                                   temperature=0, max_new_tokens=n, ignore_eos=True)
        assert out.tokens == ar.tokens, (verifier, shape)
        assert sum(s.emitted for s in out.steps) == n and out.stop_reason == "length"


@pytest.mark.parametrize("verifier,shape,sampling", [
    ("token", "chain:4", "iid"), ("asps", "chain:3", "iid"), ("block", "chain:5", "iid"),
    ("greedy_block", "chain:3", "iid"), ("traversal", "binary:3", "topk"), ("erss", "chain:3", "race"),
    ("spectr", "batch:2x3", "iid"), ("match", "kary:3x2", "topk"), ("token", "specinfer:2x3", "without_replacement")])
def test_greedy_on_tiny_models(tiny_pair, verifier, shape, sampling):
    tgt, dr = tiny_pair
    prompt = [5, 17, 42, 8]
    ar = autoregressive_generate(tgt, prompt, temperature=0, max_new_tokens=24, ignore_eos=True)
    for draft in (dr, tgt):
        out = speculative_generate(tgt, draft, prompt, verifier=verifier, shape=shape, sampling=sampling,
                                   temperature=0, max_new_tokens=24, ignore_eos=True)
        assert out.tokens == ar.tokens
    assert out.tokens_per_step > 1.5  # draft == target: blocks accepted


def test_eos_and_length_cut_inside_a_block(target):
    ids = target.encode("Count from one to ten.")
    ar = autoregressive_generate(target, ids, temperature=0, max_new_tokens=6, ignore_eos=True)
    eos = ar.tokens[2]
    expected = ar.tokens[: ar.tokens.index(eos) + 1]
    out = speculative_generate(target, target, ids, verifier="block", shape="chain:5", temperature=0,
                               max_new_tokens=20, eos_token_id=eos)
    assert out.tokens == expected and out.stop_reason == "eos" and len(out.steps) == 1
    assert out.steps[0].accepted == 5 and out.steps[0].emitted == len(expected)
    out = speculative_generate(target, target, ids, verifier="token", shape="chain:5", temperature=0,
                               max_new_tokens=4, ignore_eos=True)
    assert out.tokens == ar.tokens[:4] and out.stop_reason == "length" and len(out.steps) == 1
    ar_eos = autoregressive_generate(target, ids, temperature=0, max_new_tokens=20, eos_token_id=eos)
    assert ar_eos.tokens == expected and ar_eos.stop_reason == "eos"


# ----- the same seed, the same output; statistics; state -----------------------------------------------

def test_seed_and_statistics(tiny_pair):
    tgt, dr = tiny_pair
    prompt = [5, 17, 42, 8]
    kw = dict(verifier="traversal", shape="kary:2x3", sampling="iid", temperature=1.0, max_new_tokens=30,
              ignore_eos=True, keep_trees=True)
    a = speculative_generate(tgt, dr, prompt, seed=5, **kw)
    b = speculative_generate(tgt, dr, prompt, seed=5, **kw)
    assert a.tokens == b.tokens and len(a.tokens) == 30
    outs = {tuple(speculative_generate(tgt, dr, prompt, seed=s, **kw).tokens) for s in range(4)}
    assert len(outs) > 1
    for s in a.steps:
        assert s.drafted == 6 and 0 <= s.accepted <= 2 and 1 <= s.emitted <= s.accepted + 1
        assert min(s.draft_s, s.target_s, s.verify_s) >= 0 and s.tree is not None and s.tree.num_nodes == 7
    assert sum(s.emitted for s in a.steps) == 30
    assert a.tokens_per_step == 30 / len(a.steps) and a.settings["verifier"] == "traversal"
    assert any(s.accepted > 0 for s in a.steps)
    r1 = autoregressive_generate(tgt, prompt, temperature=1.0, max_new_tokens=5, seed=3, ignore_eos=True)
    r2 = autoregressive_generate(tgt, prompt, temperature=1.0, max_new_tokens=5, seed=3, ignore_eos=True)
    assert r1.tokens == r2.tokens


def test_greedy_block_state_is_threaded(tiny_pair, monkeypatch):
    calls = []
    real = decoding.verify

    def spy(name, tree, gen, state=None):
        verdict = real(name, tree, gen, state)
        calls.append((state, verdict.state))
        return verdict

    monkeypatch.setattr(decoding, "verify", spy)
    tgt, dr = tiny_pair
    speculative_generate(tgt, dr, [5, 17, 42, 8], verifier="greedy_block", shape="chain:3", temperature=1.0,
                         max_new_tokens=20, ignore_eos=True, seed=1)
    assert len(calls) >= 2 and calls[0][0] is None
    for (_, out_state), (in_state, _) in zip(calls, calls[1:]):
        assert in_state is out_state


def test_memo_matches_kv_sessions(target, draft4, tiny_pair):
    """With the same seed the real KV-cached tree passes and the memoised plain forwards give the same
    tokens: the end-to-end law test below is a test of the real decode path."""
    runs = [("token", "kary:2x3", "without_replacement"), ("block", "chain:3", "iid"), ("erss", "kary:2x3", "race"),
            ("traversal", "binary:3", "iid")]
    tgt, dr = tiny_pair
    t, d = MemoLM(tgt), MemoLM(dr)
    for verifier, shape, sampling in runs:
        for seed in range(2):
            kw = dict(verifier=verifier, shape=shape, sampling=sampling, temperature=1.0, max_new_tokens=20,
                      seed=seed, ignore_eos=True)
            real = speculative_generate(tgt, dr, [5, 17, 42, 8], **kw)
            memo = speculative_generate(t, d, [5, 17, 42, 8], **kw)
            assert real.tokens == memo.tokens, (verifier, seed)
            assert [s.accepted for s in real.steps] == [s.accepted for s in memo.steps]
    ids = target.encode("Once upon a time", chat=False)
    kw = dict(verifier="token", shape="kary:2x3", sampling="iid", temperature=E2E_TEMPERATURE, max_new_tokens=6,
              seed=2, ignore_eos=True)
    real = speculative_generate(target, draft4, ids, **kw)
    memo = speculative_generate(MemoLM(target), MemoLM(draft4), ids, **kw)
    assert real.tokens == memo.tokens and any(s.accepted > 0 for s in real.steps)


# ----- errors -------------------------------------------------------------------------------------------

def test_errors(target, draft2):
    ids = target.encode("Hi", chat=False)
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny = LanguageModel(LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=16, intermediate_size=32,
                                                       num_hidden_layers=1, num_attention_heads=2,
                                                       num_key_value_heads=1)), None, "tiny")
    with pytest.raises(ValueError, match="vocabulary size"):
        speculative_generate(target, tiny, ids)

    class OtherTokenizer:
        def __len__(self):
            return len(target.tokenizer)

        def get_vocab(self):
            return {"a": 0}

    other = SimpleNamespace(name="other", vocab_size=target.vocab_size, tokenizer=OtherTokenizer())
    with pytest.raises(ValueError, match="different tokenizers"):
        speculative_generate(target, other, ids)
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(target, draft2, [])
    with pytest.raises(ValueError, match="empty"):
        autoregressive_generate(target, torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="too long"):
        speculative_generate(target, draft2, [1] * target.max_context)
    with pytest.raises(ValueError, match="too long"):
        autoregressive_generate(target, [1] * target.max_context)
    with pytest.raises(ValueError, match="unknown verifier"):
        speculative_generate(target, draft2, ids, verifier="nope")
    with pytest.raises(ValueError, match="unknown shape"):
        speculative_generate(target, draft2, ids, shape="star:3")
    with pytest.raises(ValueError, match="sampling"):
        speculative_generate(target, draft2, ids, sampling="beam", max_new_tokens=2)
    with pytest.raises(ValueError, match="chains only"):
        speculative_generate(target, draft2, ids, verifier="asps", shape="kary:2x2", max_new_tokens=2)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(target, draft2, ids, temperature=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        autoregressive_generate(target, ids, max_new_tokens=0)


def test_bad_prompt_seed_and_length_arguments(tiny_pair):
    """Issue #13: a prompt batch of two rows, float / bool ids, non-integer seed or max_new_tokens are
    ValueErrors naming the argument (both generate functions); a batch of one [1, n] is fine."""
    tgt, dr = tiny_pair
    prompt = [5, 17, 42, 8]
    kw = dict(shape="chain:2", temperature=1.0, max_new_tokens=3, ignore_eos=True, seed=0)
    ref = speculative_generate(tgt, dr, prompt, **kw).tokens
    assert speculative_generate(tgt, dr, torch.tensor([prompt]), **kw).tokens == ref
    assert speculative_generate(tgt, dr, tuple(prompt), **kw).tokens == ref
    assert speculative_generate(tgt, dr, torch.tensor(prompt, dtype=torch.int32), **kw).tokens == ref
    ar = dict(temperature=1.0, max_new_tokens=3, ignore_eos=True, seed=0)
    assert autoregressive_generate(tgt, torch.tensor([prompt]), **ar).tokens == \
        autoregressive_generate(tgt, prompt, **ar).tokens

    def both(match, prompt_ids=prompt, **overrides):
        with pytest.raises(ValueError, match=match):
            speculative_generate(tgt, dr, prompt_ids, **{**kw, **overrides})
        with pytest.raises(ValueError, match=match):
            autoregressive_generate(tgt, prompt_ids, **{**ar, **overrides})

    both("batch of one", torch.tensor([prompt, prompt]))
    both("batch of one", [prompt, prompt])
    both("prompt_ids must hold integer", torch.tensor([5.0, 17.5, 42.0]))
    both("prompt_ids must hold integer", [5, 17.5, 42])
    both("prompt_ids must hold integer", torch.tensor([True, False]))
    both("not text", "hello")
    both("outside the vocabulary", [5, 97])
    both("outside the vocabulary", [-1, 5])
    for bad in (1.5, 0.0, "0", True, None):
        both("seed must be an integer", seed=bad)
    for bad in (2.0, "3", True, 2.5):
        both("max_new_tokens must be an integer", max_new_tokens=bad)
    both("max_new_tokens must be >= 1", max_new_tokens=0)
    both("eos_token_id must be an integer", eos_token_id=1.5, ignore_eos=False)
    import numpy as np

    assert speculative_generate(tgt, dr, prompt, **{**kw, "seed": np.int64(0)}).tokens == ref


def test_generator_none_is_refused():
    """Issue #13: no silent fall back to torch's global RNG: every drawing entry point needs a Generator."""
    from specdec_lib.drafting import draw_children, draw_tree
    from specdec_lib.tree import DraftTree
    from specdec_lib.verifiers import verify
    from specdec_lib.verifiers.base import sample_categorical, uniform

    row = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    tree = DraftTree(torch.tensor([0, 1]), torch.tensor([-1, 0]), row.expand(2, 3).clone(), row.expand(2, 3).clone())
    for verifier in ("token", "block", "traversal"):
        with pytest.raises(ValueError, match="generator must be a torch.Generator"):
            verify(verifier, tree, None)
    with pytest.raises(ValueError, match="generator must be a torch.Generator"):
        draw_tree([-1, 0], 0, lambda t, p, n: row.expand(len(n), 3), "iid", None)
    with pytest.raises(ValueError, match="generator must be a torch.Generator"):
        draw_children(row, 2, "without_replacement", 0)
    with pytest.raises(ValueError, match="generator must be a torch.Generator"):
        sample_categorical(row, None)
    with pytest.raises(ValueError, match="generator must be a torch.Generator"):
        uniform(None)
    assert verify("token", tree, torch.Generator().manual_seed(0)).token in (0, 1, 2)


def test_measured_acceptance_vector_reads_the_draft_record(tmp_path):
    """Issue #13: "sequoia:N" without acceptance_vector= reads the vector where draft.json stores it
    (evaluation.sequoia_positional_acceptance); another draft's record is read from its directory."""
    from specdec_lib.models.offline import DRAFT_DIR
    from specdec_lib.theory import sequoia_tree
    from specdec_lib.tree import level_order

    if (DRAFT_DIR / "draft.json").is_file():
        stored = json.loads((DRAFT_DIR / "draft.json").read_text())["evaluation"]["sequoia_positional_acceptance"]
        assert decoding.measured_acceptance_vector() == stored
        assert decoding.measured_acceptance_vector(0.6) == stored
        parents = resolve_shape("sequoia:6")
        assert len(parents) == 6 and parents == level_order(sequoia_tree(stored, 6)[0])
    other = tmp_path / "other-draft"
    other.mkdir()
    with pytest.raises(ValueError, match="does not exist"):
        decoding.measured_acceptance_vector(directory=other)
    (other / "draft.json").write_text(json.dumps({"evaluation": {"sequoia_positional_acceptance": [0.5, 0.2]}}))
    assert decoding.measured_acceptance_vector(directory=other) == [0.5, 0.2]
    (other / "draft.json").write_text(json.dumps({"acceptance_vectors": {"0.6": [0.7], "1.0": [0.4]}}))
    assert decoding.measured_acceptance_vector(0.5, directory=str(other)) == [0.7]
    assert decoding.measured_acceptance_vector(directory=other) == [0.4]
    (other / "draft.json").write_text(json.dumps({"evaluation": {"mean_acceptance": 0.3}}))
    with pytest.raises(ValueError, match="holds no measured acceptance vector"):
        decoding.measured_acceptance_vector(directory=other)
    (other / "draft.json").write_text(json.dumps({"evaluation": {"sequoia_positional_acceptance": "high"}}))
    with pytest.raises(ValueError, match="non-empty list of numbers"):
        decoding.measured_acceptance_vector(directory=other)


def test_resolve_shape():
    assert resolve_shape("chain:3") == [-1, 0, 1, 2]
    assert resolve_shape([-1, 0, 1, 0]) == [-1, 0, 0, 1]  # relabelled to level order
    parents = resolve_shape("sequoia:6", acceptance_vector=[0.6, 0.2, 0.1])
    assert len(parents) == 6 and parents[0] == -1
    from specdec_lib.theory import sequoia_tree
    from specdec_lib.tree import level_order

    assert parents == level_order(sequoia_tree([0.6, 0.2, 0.1], 6)[0])
    deep = resolve_shape("sequoia:7x3", acceptance_vector=[0.9, 0.05])
    depths = [0] * 7
    for i in range(1, 7):
        depths[i] = depths[deep[i]] + 1
    assert max(depths) <= 2
    with pytest.raises(ValueError, match="Sequoia shape"):
        resolve_shape("sequoia:axb", acceptance_vector=[0.5])


# ----- losslessness end to end -----------------------------------------------------------------------

OTHER = ("other",)


def two_token_law(target_memo, prompt, temperature, min_prob=1e-4):
    """Exact law of the first two tokens under the target (cells below ``min_prob`` pooled per first
    token, unlikely first tokens pooled into OTHER)."""
    p1 = process_logits(target_memo.logits_of([tuple(prompt)])[0], temperature)
    firsts = [int(a) for a in torch.nonzero(p1 > min_prob).flatten()]
    rows = process_logits(target_memo.logits_of([tuple(prompt) + (a,) for a in firsts]), temperature)
    law = {}
    for a, p2 in zip(firsts, rows):
        pa = float(p1[a])
        kept = 0.0
        for b in torch.nonzero(pa * p2 > min_prob).flatten().tolist():
            law[(a, b)] = pa * float(p2[b])
            kept += law[(a, b)]
        law[(a, "*")] = max(pa - kept, 0.0)
    law[OTHER] = max(1.0 - sum(law.values()), 0.0)
    total = sum(law.values())
    return {k: v / total for k, v in law.items()}


def _cell(law, pair):
    if pair in law:
        return pair
    return (pair[0], "*") if (pair[0], "*") in law else OTHER


E2E_RUNS = [  # (verifier, shape, sampling): every verifier on a chain, the tree verifiers on a tree
    ("token", "chain:2", "iid"), ("asps", "chain:2", "iid"), ("block", "chain:2", "iid"),
    ("greedy_block", "chain:2", "iid"), ("traversal", "chain:2", "iid"), ("erss", "chain:2", "race"),
    ("spectr", "chain:2", "iid"), ("match", "chain:2", "iid"),
    ("token", "kary:2x3", "iid"), ("token", "kary:2x3", "without_replacement"),
    ("traversal", "kary:2x3", "iid"), ("erss", "kary:2x3", "race"), ("spectr", "kary:2x3", "iid"),
    ("match", "kary:2x3", "topk"),
]
E2E_SAMPLES = 250
E2E_TEMPERATURE = 0.7
E2E_ALPHA = 1e-3


@pytest.fixture(scope="module")
def e2e(target, draft4):
    t, d = MemoLM(target), MemoLM(draft4)
    prompt = target.encode("Once upon a time", chat=False).tolist()
    return t, d, prompt, two_token_law(t, prompt, E2E_TEMPERATURE)


def _two_token_counts(t, d, prompt, law, verifier, shape, sampling, n, seed0=0):
    counts = Counter()
    for s in range(n):
        out = speculative_generate(t, d, prompt, verifier=verifier, shape=shape, sampling=sampling,
                                   temperature=E2E_TEMPERATURE, max_new_tokens=2, seed=seed0 + s,
                                   ignore_eos=True)
        counts[_cell(law, tuple(out.tokens))] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("verifier,shape,sampling", E2E_RUNS, ids=[f"{v}-{s}-{m}" for v, s, m in E2E_RUNS])
def test_lossless_first_two_tokens(e2e, verifier, shape, sampling):
    t, d, prompt, law = e2e
    counts = _two_token_counts(t, d, prompt, law, verifier, shape, sampling, E2E_SAMPLES, seed0=1000)
    pvalue = chi_square_pvalue(counts, law)
    assert pvalue > E2E_ALPHA, (verifier, shape, sampling, pvalue, counts.most_common(6))


def _accept_everything(tree, generator, state=None):
    """Broken on purpose: accept the first root-to-leaf path, bonus from the leaf's target row."""
    path, node = [], 0
    while tree.children[node]:
        node = tree.children[node][0]
        path.append(node)
    row = tree.target_probs[node].double()
    return Outcome(tuple(path), int(torch.multinomial(row / row.sum(), 1, generator=generator)))


@pytest.mark.slow
def test_lossless_harness_rejects_a_broken_verifier(e2e, monkeypatch):
    t, d, prompt, law = e2e
    broken = Verifier("broken", _accept_everything, None, lambda tree: None, "accepts every draft")
    monkeypatch.setitem(VERIFIERS, "broken", broken)
    counts = _two_token_counts(t, d, prompt, law, "broken", "chain:2", "iid", E2E_SAMPLES, seed0=1000)
    assert chi_square_pvalue(counts, law) < E2E_ALPHA


# ----- benchmark (smoke test: one prompt, a few tokens) -------------------------------------------------

def test_benchmark_smoke(target, draft2, tmp_path):
    from specdec_lib.experiments.benchmark import (DEFAULT_METHODS, BenchSettings, _parse_method,
                                                   measure_acceptance_vector, run_benchmark)
    from specdec_lib.data import load_prompts

    assert [_parse_method(m)["name"] for m in DEFAULT_METHODS] == list(DEFAULT_METHODS)
    assert _parse_method("erss/kary:2x3")["sampling"] == "race"
    with pytest.raises(ValueError, match="unknown method"):
        _parse_method("fastest")
    vector = measure_acceptance_vector(target, draft2, load_prompts("train")[:1], 1.0, max_children=3,
                                       tokens_per_prompt=4)
    assert len(vector) == 3 and all(v >= 0 for v in vector) and sum(vector) <= 1 + 1e-9
    methods = ["autoregressive", "hf_assisted", "block/chain:2", "token/sequoia:6x3"]
    out = tmp_path / "bench.json"
    settings = BenchSettings(max_new_tokens=3, temperature=1.0, acceptance_vector=[0.5, 0.2, 0.1], progress=False)
    report = run_benchmark(load_prompts("heldout")[:1], target, draft2, methods, settings, output=out)
    saved = json.loads(out.read_text())
    assert list(saved["methods"]) == methods and saved["parameters"]["max_new_tokens"] == 3
    assert {"machine", "versions", "parameters", "methods"} <= set(saved)
    assert saved["versions"]["transformers"] and saved["machine"]["hostname"] and saved["machine"]["bf16_matrix"]
    for name in methods:
        median = saved["methods"][name]["median"]
        assert median["tokens"] <= 3 and median["tokens_per_s"] > 0
    assert len(saved["methods"]["token/sequoia:6x3"]["parents"]) == 6
    assert report["methods"]["autoregressive"]["median"]["speedup_vs_autoregressive"] == 1.0
    assert report["methods"]["autoregressive"]["median"]["paired_speedup_vs_autoregressive"] == 1.0
    hf = saved["parameters"]["hf_assisted_settings"]  # what HF resolved, not the unset config fields
    assert hf["before"]["num_assistant_tokens"] >= 1 and hf["after"]["num_assistant_tokens_schedule"]
    assert saved["parameters"]["small_batch_linears"] == {"target": target.small_batch_linears,
                                                          draft2.name: draft2.small_batch_linears}
    assert saved["parameters"]["hf_draft"] == draft2.name  # HF runs the draft it was given


@pytest.mark.parametrize("draft_tokens", [1, 3])
def test_hf_assisted_fixed_chain_drafts_that_many_tokens(target, draft2, draft_tokens):
    """'hf_assisted/chain:k' makes HF draft exactly k tokens per target forward, then restores HF's settings."""
    from specdec_lib.experiments.benchmark import _hf_assisted, _parse_method

    assert _parse_method(f"hf_assisted/chain:{draft_tokens}")["draft_tokens"] == draft_tokens
    with pytest.raises(ValueError, match="chains only"):
        _parse_method("hf_assisted/sequoia:6x3")
    config = draft2.model.generation_config
    before = (config.num_assistant_tokens, config.assistant_confidence_threshold)
    scored = []   # tokens in each target forward: the prompt once, then k drafted + 1 per step
    hook = target.model.register_forward_hook(
        lambda module, args, kwargs, out: scored.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    try:
        ids = target.encode("Name three colours.")
        toks, _ = _hf_assisted(target, draft2, ids, 1.0, 1.0, 16, 0, None, draft_tokens)
    finally:
        hook.remove()
    assert len(toks) == 16
    assert scored[1] == max(scored[1:]) == draft_tokens + 1   # fewer only near the length limit
    assert (config.num_assistant_tokens, config.assistant_confidence_threshold) == before


def test_bench_main_autoregressive_only(tmp_path, capsys):
    """The `specdec bench` entry point; autoregressive-only runs never load a draft."""
    from specdec_lib.experiments import benchmark

    out = tmp_path / "b.json"
    assert benchmark.main(["--num-prompts", "1", "--max-new-tokens", "2", "--methods", "autoregressive",
                           "--output", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["parameters"]["draft"] is None and saved["methods"]["autoregressive"]["median"]["tokens"] == 2
    assert "autoregressive" in capsys.readouterr().out
