"""Issue #52 (API): every public entry point refuses bad arguments where they enter, by name, before any
model loads or any work runs (ValueError; TypeError for a wrong type).

The decoding checks run against a stand-in model whose ``session`` fails the test if it is ever reached,
so each refusal is shown to come before any drafting or forward pass."""

from __future__ import annotations

import time

import pytest
import torch

import specdec_lib as sd
from specdec_lib import exact
from specdec_lib.arguments import ArgumentTypeError, check_choice, check_int, check_model, check_real, check_seed
from specdec_lib.decoding import MAX_TREE_NODES
from specdec_lib.models import load_model
from specdec_lib.models.names import DRAFT_NAME
from specdec_lib.models.synthetic import ContextIndependentLM, ToyLM, random_markov_pair
from specdec_lib.shapes import resolve_shape, shape_nodes
from specdec_lib.tree import (MAX_SHAPE_NODES, DraftTree, batch, binary, chain_parents, erss_specinfer, kary,
                             parse_shape, shape_size, validate_parents)

PROMPT = [1, 2, 3]


class StandIn:
    """A model with `LanguageModel`'s interface that must never be used: any session fails the test."""

    def __init__(self, name: str = "stand-in", vocab_size: int = 50):
        self.name, self.vocab_size, self.max_context = name, vocab_size, 256
        self.device, self.tokenizer, self.eos_token_id = torch.device("cpu"), None, 0

    def session(self, prompt):
        raise AssertionError(f"{self.name}: a session was opened although the arguments are bad")


@pytest.fixture
def pair():
    return StandIn("stand-in-target"), StandIn("stand-in-draft")


def both(pair, exc, match, **kwargs):
    """The same bad keyword refused by speculative_generate and autoregressive_generate."""
    target, draft = pair
    with pytest.raises(exc, match=match):
        sd.speculative_generate(target, draft, PROMPT, **kwargs)
    with pytest.raises(exc, match=match):
        sd.autoregressive_generate(target, PROMPT, **kwargs)


# ----- the shared checks -----------------------------------------------------------------------------

def test_argument_checks_name_the_argument():
    assert check_int("k", 3, 1, 5) == 3 and check_real("t", 0.5, 0.0, 1.0) == 0.5
    for bad in (None, "3", 3.0, True):
        with pytest.raises(TypeError, match="k must be an integer"):
            check_int("k", bad)
    with pytest.raises(ValueError, match="k must be <= 5"):
        check_int("k", 6, 1, 5)
    for bad in (None, "abc", False, [1.0]):
        with pytest.raises(TypeError, match="t must be a real number"):
            check_real("t", bad)
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="t must be a finite number"):
            check_real("t", bad)
    with pytest.raises(ValueError, match="t must be > 0"):
        check_real("t", 0.0, 0.0, low_open=True)
    with pytest.raises(TypeError, match="mode must be a name"):
        check_choice("mode", ["a"], ("a", "b"))
    with pytest.raises(ValueError, match="unknown mode 'c'"):
        check_choice("mode", "c", ("a", "b"))
    assert check_seed("seed", 2 ** 64 - 1) == 2 ** 64 - 1
    with pytest.raises(ValueError, match="seed must be <="):
        check_seed("seed", 2 ** 70)
    # a wrong type is a TypeError that callers catching ValueError see as well
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)
    with pytest.raises(TypeError, match="load_model"):
        check_model("target", "smollm2-135m-instruct")


# ----- decoding -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["temperature", "top_p"])
def test_sampling_parameters_of_the_wrong_type(pair, name):
    for bad in (None, "abc", "0.5", True):
        both(pair, TypeError, f"{name} must be a real number", **{name: bad})


def test_sampling_parameters_out_of_range(pair):
    for bad in (float("nan"), float("inf"), -float("inf")):
        both(pair, ValueError, "temperature must be a finite number", temperature=bad)
    both(pair, ValueError, "temperature must be >= 0", temperature=-0.5)
    for bad in (0.0, 1.5, -1.0):
        both(pair, ValueError, "top_p must be", top_p=bad)
    both(pair, ValueError, "top_p must be a finite number", top_p=float("nan"))


def test_verifier_sampling_seed_and_eos(pair):
    target, draft = pair
    with pytest.raises(TypeError, match="verifier must be one verifier name"):
        sd.speculative_generate(target, draft, PROMPT, verifier=["block"])
    with pytest.raises(ValueError, match="unknown verifier"):
        sd.speculative_generate(target, draft, PROMPT, verifier="nope")
    with pytest.raises(TypeError, match="sampling must be a name"):
        sd.speculative_generate(target, draft, PROMPT, sampling=None)
    for bad in (2 ** 70, -(2 ** 70)):
        both(pair, ValueError, "seed must be", seed=bad)
    both(pair, ValueError, "eos_token_id 1000000000 is outside the vocabulary", eos_token_id=10 ** 9)
    both(pair, ValueError, "eos_token_id 50 is outside", eos_token_id=50, ignore_eos=True)


def test_models_given_as_names_or_toys(pair):
    target, draft = pair
    toy = ContextIndependentLM([0.5, 0.5])
    with pytest.raises(TypeError, match=r"target must be a loaded LanguageModel.*load_model\('smollm2-135m"):
        sd.speculative_generate("smollm2-135m-instruct", draft, PROMPT)
    with pytest.raises(TypeError, match=r"draft must be a loaded LanguageModel.*load_model"):
        sd.speculative_generate(target, "smollm2-135m-int4", PROMPT)
    with pytest.raises(TypeError, match="target must be a LanguageModel.*toy LM.*call load_model first"):
        sd.speculative_generate(toy, draft, PROMPT)
    with pytest.raises(TypeError, match="draft must be a LanguageModel"):
        sd.speculative_generate(target, toy, PROMPT)
    with pytest.raises(TypeError, match="target must be a loaded LanguageModel"):
        sd.autoregressive_generate("smollm2-135m-instruct", PROMPT)
    with pytest.raises(TypeError, match="target must be a LanguageModel"):
        sd.autoregressive_generate(object(), PROMPT)


def test_acceptance_vector_only_with_sequoia_shapes(pair):
    target, draft = pair
    for shape in ("chain:8", "binary:3", [-1, 0, 0]):
        with pytest.raises(ValueError, match="acceptance_vector is only read by Sequoia shapes"):
            sd.speculative_generate(target, draft, PROMPT, shape=shape, acceptance_vector=[0.6, 0.2])
    with pytest.raises(ValueError, match=r"acceptance_vector\[1\] must be <= 1"):
        sd.speculative_generate(target, draft, PROMPT, shape="sequoia:8", acceptance_vector=[0.6, 2.0])


def test_resolve_shape_refuses_a_vector_it_would_ignore():
    """The public shape helper makes the same check as speculative_generate (shapes.check_acceptance_vector)."""
    for shape in ("chain:3", "binary:3", [-1, 0, 0]):
        with pytest.raises(ValueError, match="acceptance_vector is only read by Sequoia shapes"):
            resolve_shape(shape, [0.9, 0.1])
    for vector, error, message in (([0.9, float("nan")], ValueError, r"acceptance_vector\[1\] must be a finite"),
                                   ([], ValueError, "acceptance_vector must not be empty"),
                                   ("0.9,0.1", TypeError, "acceptance_vector must be a sequence of numbers"),
                                   ([0.9, None], TypeError, r"acceptance_vector\[1\] must be a real number")):
        with pytest.raises(error, match=message):
            resolve_shape("sequoia:6", vector)
    assert resolve_shape("chain:3") == [-1, 0, 1, 2]
    assert len(resolve_shape("sequoia:6", [0.6, 0.2, 0.1])) == 6


def test_sequoia_shape_needs_the_drafts_own_vector(pair):
    """A draft without a record no longer borrows the distilled draft's measured vector."""
    target, draft = pair
    with pytest.raises(ValueError, match="'stand-in-draft', which has no recorded one.*pass acceptance_vector="):
        sd.speculative_generate(target, draft, PROMPT, shape="sequoia:8")
    # with a vector, or for the distilled draft itself (its record is data/models/<name>/draft.json), the
    # arguments pass and the stand-in's session is reached
    with pytest.raises(AssertionError, match="session was opened"):
        sd.speculative_generate(target, draft, PROMPT, shape="sequoia:8", acceptance_vector=[0.6, 0.2])
    distilled = StandIn(DRAFT_NAME)
    try:
        resolve_shape("sequoia:8")
    except ValueError:  # no record in this checkout: the refusal names the file
        with pytest.raises(ValueError, match="draft.json"):
            sd.speculative_generate(target, distilled, PROMPT, shape="sequoia:8")
    else:
        with pytest.raises(AssertionError, match="session was opened"):
            sd.speculative_generate(target, distilled, PROMPT, shape="sequoia:8")


def test_parents_of_floats_are_refused_not_truncated(pair):
    target, draft = pair
    floats = [-1, 0, 0.7, 1.9]
    with pytest.raises(TypeError, match=r"parents\[2\] must be an integer, got 0.7"):
        validate_parents(floats)
    with pytest.raises(ValueError, match=r"parents\[2\] must be an integer"):
        resolve_shape(floats)
    with pytest.raises(ValueError, match=r"parents\[2\] must be an integer"):
        sd.speculative_generate(target, draft, PROMPT, shape=floats)
    with pytest.raises(ValueError, match="parents must hold integers"):
        DraftTree(tokens=[0, 1, 1, 0], parents=floats, draft_probs=torch.full((4, 2), 0.5),
                  target_probs=torch.full((4, 2), 0.5))
    with pytest.raises(TypeError, match="parents must be a sequence"):
        validate_parents("-1,0")
    assert validate_parents(torch.tensor([-1, 0, 0])) == [-1, 0, 0]
    with pytest.raises(TypeError, match="chain length must be an integer"):
        chain_parents(2.0)
    with pytest.raises(TypeError, match="k must be an integer"):
        kary(2.0, 3)


def test_tree_sizes_are_computed_before_anything_is_built(pair):
    target, draft = pair
    assert shape_size("binary:40") == 2 ** 40 - 1 and shape_size("kary:8x3") == 73
    assert shape_size("chain:8") == 9 and shape_size("batch:3x4") == 13 and shape_size("eagle") == 26
    assert shape_size("parents:-1,0,0,1") == 4 and shape_size("kary:1x5") == 5
    for spec in ("chain:8", "binary:5", "kary:3x3", "batch:3x4", "specinfer:2x5", "erss_specinfer:7", "eagle"):
        assert shape_size(spec) == len(parse_shape(spec)) == shape_nodes(spec)
    assert shape_nodes("sequoia:32x6") == 32 and shape_nodes([-1, 0, 1]) == 3
    with pytest.raises(ValueError, match=f"more than the limit MAX_SHAPE_NODES = {MAX_SHAPE_NODES}"):
        parse_shape("binary:40")
    for spec, size in (("binary:16", 2 ** 16 - 1), ("binary:40", 2 ** 40 - 1), ("sequoia:5000", 5000),
                       ("chain:5000", 5001)):
        start = time.perf_counter()
        with pytest.raises(ValueError, match=f"has {size} nodes, more than the limit MAX_TREE_NODES = "
                                             f"{MAX_TREE_NODES}"):
            sd.speculative_generate(target, draft, PROMPT, shape=spec)
        assert time.perf_counter() - start < 1.0
    # the shape builders are limited as parse_shape is, from their arguments before anything is built
    start = time.perf_counter()
    for build, size in ((lambda: binary(40), 2 ** 40 - 1), (lambda: kary(2, 40), 2 ** 40 - 1),
                        (lambda: kary(3, 30), (3 ** 30 - 1) // 2), (lambda: batch(10 ** 6, 10 ** 6), 10 ** 12 + 1),
                        (lambda: chain_parents(10 ** 9), 10 ** 9 + 1), (lambda: erss_specinfer(10 ** 9), 10 ** 9 + 1)):
        with pytest.raises(ValueError, match=f"has {size} nodes, more than the limit MAX_SHAPE_NODES = "
                                             f"{MAX_SHAPE_NODES}"):
            build()
    assert time.perf_counter() - start < 1.0
    start = time.perf_counter()   # an absurd depth is refused at once, without computing k ** depth
    for spec in ("kary:3x1000000000", "binary:1000000000000"):
        with pytest.raises(ValueError, match="has at least 2\\^64 nodes, more than the limit MAX_SHAPE_NODES"):
            parse_shape(spec)
    assert time.perf_counter() - start < 1.0
    assert len(kary(2, 20)) == MAX_SHAPE_NODES - 1 and len(chain_parents(MAX_SHAPE_NODES - 1)) == MAX_SHAPE_NODES
    # the largest tree within the limit passes the checks (and reaches the stand-in's session)
    with pytest.raises(AssertionError, match="session was opened"):
        sd.speculative_generate(target, draft, PROMPT, shape="binary:12")


# ----- the exact harness ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toys():
    return random_markov_pair(4, 0.5, seed=0)


def test_exact_enumeration_limit_is_checked_first(toys):
    target, draft = toys
    k8x3 = parse_shape("kary:8x3")
    start = time.perf_counter()
    with pytest.raises(ValueError, match="73 nodes drafted 'iid' over 4 tokens.*MAX_DRAFTED_TREES"):
        exact.step_output_law("block", target, draft, [0], k8x3, horizon=3)
    with pytest.raises(ValueError, match="MAX_DRAFTED_TREES"):
        exact.multistep_output_law("block", target, draft, [0], k8x3, horizon=3)
    with pytest.raises(ValueError, match="MAX_DRAFTED_TREES"):
        exact.enumerate_drafts(target, draft, [0], parse_shape("kary:3x4"), "without_replacement")
    with pytest.raises(ValueError, match="MAX_LAW_CELLS"):
        exact.target_law(target, [0], 40)
    assert time.perf_counter() - start < 1.0
    assert exact.drafted_tree_bound(k8x3, 4, "topk") == 1
    assert exact.drafted_tree_bound([-1, 0, 0, 1], 4, "iid") == 4 ** 3
    assert exact.drafted_tree_bound([-1, 0, 0, 1], 4, "without_replacement") == 4 * 3 * 4
    assert len(exact.enumerate_drafts(target, draft, [0], [-1, 0, 0, 1], "without_replacement")) <= 48


def test_exact_horizon_prefix_and_counts(toys):
    target, draft = toys
    chain = [-1, 0, 1]
    calls = {
        "step_output_law": lambda **kw: exact.step_output_law("block", target, draft, kw.pop("prefix", [0]), chain, **kw),
        "multistep_output_law": lambda **kw: exact.multistep_output_law("block", target, draft,
                                                                        kw.pop("prefix", [0]), chain, **kw),
        "target_law": lambda **kw: exact.target_law(target, kw.pop("prefix", [0]), kw.pop("horizon", 2)),
        "sample_output_counts": lambda **kw: exact.sample_output_counts(
            "block", target, draft, kw.pop("prefix", [0]), chain, exact.SamplerSettings(n=kw.pop("n", 5), **kw)),
        "sample_multistep_counts": lambda **kw: exact.sample_multistep_counts(
            "block", target, draft, kw.pop("prefix", [0]), chain, exact.SamplerSettings(n=kw.pop("n", 5), **kw)),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="horizon must be >= 0"):
            call(horizon=-1)
        with pytest.raises(TypeError, match="horizon must be an integer"):
            call(horizon=2.0)
        with pytest.raises(ValueError, match=r"prefix\[1\] must be an integer"):
            call(prefix=[0, 1.5])
        with pytest.raises(ValueError, match="out of range"):
            call(prefix=[7])
        with pytest.raises(ValueError, match="prefix must hold at least one token"):
            call(prefix=[])
    for name in ("sample_output_counts", "sample_multistep_counts"):
        with pytest.raises(ValueError, match="n must be >= 1"):
            calls[name](n=0)
        with pytest.raises(ValueError, match="seed must be"):
            calls[name](seed=2 ** 70)
    assert sum(calls["step_output_law"](horizon=2).values()) == pytest.approx(1.0)
    with pytest.raises(TypeError, match="verifier must be a name or a Verifier"):
        exact.step_output_law(["block"], target, draft, [0], chain)
    with pytest.raises(TypeError, match="target must be a toy LM"):
        exact.step_output_law("block", "smollm2-135m-instruct", draft, [0], chain)
    with pytest.raises(TypeError, match="draft must be a toy LM"):
        exact.sample_output_counts("block", target, object(), [0], chain)
    with pytest.raises(ValueError, match=r"parents\[1\] must be an integer"):
        exact.accepted_length_law("block", target, draft, [0], [-1, 0.5])


class ShortRows(ToyLM):
    """A toy LM whose rows have one entry fewer than its vocabulary."""

    def _next(self, context):
        return torch.full((self.vocab_size - 1,), 1.0 / (self.vocab_size - 1), dtype=torch.float64)


class ShortRowsDuck:
    """The same, duck-typed (no ToyLM base, as the harness's own wrappers are)."""

    vocab_size, eos_token_id = 4, None

    def probs(self, context):
        return torch.full((3,), 1 / 3, dtype=torch.float64)


@pytest.mark.parametrize("short", [ShortRows(4), ShortRowsDuck()], ids=["ToyLM", "duck"])
def test_exact_refuses_rows_shorter_than_the_vocabulary(toys, short):
    target, draft = toys
    for call in (lambda: exact.step_output_law("block", short, draft, [0], [-1, 0], horizon=2),
                 lambda: exact.step_output_law("block", target, short, [0], [-1, 0], horizon=2),
                 lambda: exact.target_law(short, [0], 2),
                 lambda: exact.sample_output_counts("block", target, short, [0], [-1, 0], exact.SamplerSettings(n=3))):
        with pytest.raises(ValueError, match=r"shape \(3,\).*vocab_size"):
            call()


def test_toy_lm_constructor_arguments():
    with pytest.raises(TypeError, match="vocab_size must be an integer"):
        ShortRows(4.0)
    with pytest.raises(ValueError, match="eos_token_id 9 out of range"):
        ShortRows(4, eos_token_id=9)
    from specdec_lib.models.synthetic import tempered

    with pytest.raises(TypeError, match="temperature must be a real number"):
        tempered(ContextIndependentLM([0.5, 0.5]), None)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        tempered(ContextIndependentLM([0.5, 0.5]), float("nan"))


# ----- model loading ---------------------------------------------------------------------------------

def test_load_model_dtype_and_device():
    start = time.perf_counter()
    with pytest.raises(ValueError, match="dtype torch.float8_e4m3fn is not supported"):
        load_model("smollm2-135m-instruct", dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="dtype torch.int8 is not supported"):
        load_model("smollm2-135m-instruct", dtype=torch.int8)
    for bad in (16, 16.0, ["bfloat16"]):  # a wrong type: a TypeError (that callers catching ValueError see too)
        with pytest.raises(TypeError, match="dtype must be a torch dtype or a name"):
            load_model("smollm2-135m-instruct", dtype=bad)
    with pytest.raises(ValueError, match="device 'meta'.*holds no weights"):
        load_model("smollm2-135m-instruct", device="meta")
    with pytest.raises(ValueError, match="device 'meta'"):
        load_model("smollm2-135m-draft", device=torch.device("meta"))
    assert time.perf_counter() - start < 2.0  # refused before anything loads


@pytest.mark.parametrize("name", ["smollm2-135m-draft", "smollm2-135m-eagle", "smollm2-135m-int4"])
def test_load_model_refuses_a_target_that_is_no_loaded_model(name):
    start = time.perf_counter()
    with pytest.raises(TypeError, match="target must be a LanguageModel.*toy LM.*call load_model first"):
        load_model(name, target=ContextIndependentLM([0.5, 0.5]))
    with pytest.raises(TypeError, match=r"target must be a loaded LanguageModel.*load_model\('smollm2-135m-instruct'\)"):
        load_model(name, target="smollm2-135m-instruct")
    assert time.perf_counter() - start < 1.0  # refused before anything loads


def test_model_folder_without_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="has no tokenizer files.*tokenizer.json"):
        load_model(str(tmp_path), device="cpu")


def test_an_offline_name_whose_weights_are_missing_is_refused_by_name(tmp_path, monkeypatch):
    from specdec_lib import models
    from specdec_lib.models import feature_net, offline

    models.check_model_name(DRAFT_NAME)  # the committed weights are found
    monkeypatch.setattr(offline, "DRAFT_DIR", tmp_path / "no-draft")
    monkeypatch.setattr(feature_net, "EAGLE_DIR", tmp_path / "no-eagle")
    for name, folder in ((DRAFT_NAME, "no-draft"), (models.EAGLE_NAME, "no-eagle")):
        with pytest.raises(ValueError, match=f"could not load model '{name}': its weights .*{folder}.* are missing"):
            models.check_model_name(name)
    models.check_model_name("smollm2-135m-int4")  # derived from the target: no weights of its own
