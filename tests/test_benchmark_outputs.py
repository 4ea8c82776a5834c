"""`specdec bench` writes to a run folder unless published, and checks its arguments and output before the
benchmark runs: no model loads and no prompt is read for a refused command, and the published files are
byte-for-byte unchanged."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
import torch

from specdec_lib.data import Prompt
from specdec_lib.experiments import benchmark
from specdec_lib.reporting import destinations
from specdec_lib.reporting.results import REPO_ROOT

def _published_digest() -> dict[str, str]:
    """sha256 of the published index and bench files (what a wrong bench output would overwrite)."""
    files = [REPO_ROOT / "reports" / "index.html", *sorted((REPO_ROOT / "data" / "results").glob("bench_*.json"))]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


@pytest.fixture
def no_work(monkeypatch):
    """The benchmark's work replaced by stubs: the run records its arguments, loading prompts is counted."""
    calls = {"runs": [], "prompts": 0}

    def fake_run(*args, **kwargs):
        calls["runs"].append((args, kwargs))
        return {"methods": {}, "output": str(kwargs["output"])}

    def fake_prompts(*args, **kwargs):
        calls["prompts"] += 1
        return ["p1", "p2", "p3"]

    monkeypatch.setattr(benchmark, "run_benchmark", fake_run)
    monkeypatch.setattr(benchmark, "load_prompts", fake_prompts)
    return calls


def test_the_default_output_is_a_git_ignored_run_folder_and_publish_names_data_results(tmp_path, no_work):
    assert benchmark.default_output_path("vm") == REPO_ROOT / "runs" / "bench" / "bench_vm.json"
    assert benchmark.default_output_path("vm", publish=True) == REPO_ROOT / "data" / "results" / "bench_vm.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/bench/bench_vm.json"], cwd=REPO_ROOT)
    assert ignored.returncode == 0, "runs/ must be git-ignored"
    before = _published_digest()
    assert benchmark.main(["--num-prompts", "1", "--methods", "autoregressive"]) == 0
    assert benchmark.main(["--num-prompts", "1", "--methods", "autoregressive", "--publish"]) == 0
    (_, plain), (_, published) = no_work["runs"]
    assert plain["output"] == benchmark.default_output_path() and not plain["publish"]
    assert published["output"] == benchmark.default_output_path(publish=True) and published["publish"]
    assert _published_digest() == before


@pytest.mark.parametrize("argv, message", [
    (["--output", "reports/index.html"], "output: reports/index.html lies inside the published reports"),
    (["--output", "reports/bench.json", "--publish"], "lies inside the published reports"),
    (["--output", "data/results/bench_vm.json"], "lies inside the published"),
    (["--output", "{tmp}/"], "is a folder"),
    (["--output", "{tmp}"], "is a folder"),
    (["--num-prompts", "-1"], "--num-prompts must be >= 1, got -1"),
    (["--num-prompts", "0"], "--num-prompts must be >= 1, got 0"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["--max-new-tokens", "-2"], "--max-new-tokens must be >= 1"),
    (["--per-category", "0"], "--per-category must be >= 1"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--temperature", "inf"], "--temperature must be a finite number"),
    (["--top-p", "0"], "--top-p must be > 0.0"),
    (["--methods", "fastest"], "--methods: unknown method 'fastest'"),
    (["--acceptance-vector", "0.5,x"], "--acceptance-vector"),
    # shapes and samplings: known forms, within the tree size limit, from the spec (nothing is built)
    (["--methods", "token/binary:40"], "--methods: shape 'binary:40' has 1099511627775 nodes, more than the limit "
                                       "MAX_TREE_NODES"),
    (["--methods", "token/nonsense:3"], "--methods: unknown shape 'nonsense:3'"),
    (["--methods", "token/chain:4/bogus"], "--methods: unknown sampling 'bogus'"),
    (["--methods", "token/sequoia:100000"], "--methods: shape 'sequoia:100000' has 100000 nodes, more than the "
                                            "limit MAX_TREE_NODES"),
    (["--methods", "hf_assisted/chain:100000"], "--methods: shape 'chain:100000' has 100001 nodes"),
    (["--methods", "token/kary:2x3x4"], "--methods: shape 'kary:2x3x4': expected 'kary:KxN' with integers"),
    # settings: the checks BenchSettings makes (SETTING_CHECKS), naming the option
    (["--seed", str(2 ** 70)], "--seed must be <= 18446744073709551615, got 1180591620717411303424"),
    (["--seed", "-1180591620717411303424"], "--seed must be >="),
    (["--methods", "token/sequoia:16x6", "--acceptance-vector", "2.0,nan"], "--acceptance-vector[0] must be <= 1.0"),
    (["--methods", "token/sequoia:16x6", "--acceptance-vector", "0.5,nan"], "--acceptance-vector[1] must be a finite"),
    (["--methods", "token/chain:4,block/chain:4", "--acceptance-vector", "0.6,0.2"],
     "--acceptance-vector is only read by Sequoia trees, and no method of ['token/chain:4', 'block/chain:4'] is one"),
    (["--dtype", "float8"], "--dtype: unknown dtype 'float8'"),
    (["--device", "meta"], "--device: device 'meta': a meta device holds no weights"),
    # models by name: found (offline name, folder, cached or reachable HF id) before anything loads
    (["--hf-draft", "nonexistent-model-xyz", "--methods", "hf_assisted"],
     "--hf-draft: could not load model 'nonexistent-model-xyz'"),
    (["--methods", "token/chain:2@nonexistent-model-xyz"], "--methods: could not load model 'nonexistent-model-xyz'"),
    (["--hf-draft", "smollm2-135m-draft"], "--hf-draft 'smollm2-135m-draft' is the draft of HF assisted generation, "
                                           "and no method of ['autoregressive'] is one"),
    (["--target", "nonexistent-model-xyz"], "--target: could not load model 'nonexistent-model-xyz'"),
    (["--draft", "{tmp}/no_such_folder", "--methods", "token/chain:2"], "--draft: could not load model"),
])
def test_bad_arguments_and_outputs_are_refused_before_the_benchmark_runs(tmp_path, capsys, no_work, monkeypatch,
                                                                         argv, message):
    monkeypatch.setattr(benchmark, "load_model", _no_model_loads)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # an unknown HF id is refused at once, without the network
    before = _published_digest()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert benchmark.main(["--methods", "autoregressive"] + argv) == 2
    err = capsys.readouterr().err
    assert err == f"error: {err[7:]}" and message in err and len(err.strip().splitlines()) == 1
    assert no_work == {"runs": [], "prompts": 0}
    assert _published_digest() == before


def test_a_benchmark_larger_than_its_limit_is_refused_before_it_runs(capsys, no_work, monkeypatch):
    monkeypatch.setattr(benchmark, "load_model", _no_model_loads)
    tokens = benchmark.MAX_BENCH_TOKENS // 3 + 1  # the stub's 3 prompts x 1 method
    assert benchmark.main(["--methods", "autoregressive", "--max-new-tokens", str(tokens)]) == 2
    err = capsys.readouterr().err
    assert f"--max-new-tokens: 3 prompts x 1 methods x {tokens} tokens is" in err and "MAX_BENCH_TOKENS" in err
    assert no_work["runs"] == []
    assert benchmark.main(["--methods", "autoregressive", "--max-new-tokens", str(tokens - 1)]) == 0


def test_run_benchmark_refuses_a_run_larger_than_its_limit_before_any_model_loads(monkeypatch):
    monkeypatch.setattr(benchmark, "load_model", _no_model_loads)
    with pytest.raises(ValueError, match="max_new_tokens: 2 prompts x 2 methods x .* more than the limit MAX_BENCH_TOKENS"):
        benchmark.run_benchmark(["p", "q"], "smollm2-135m-instruct", "smollm2-135m-draft",
                                ["autoregressive", "token/chain:2"],
                                benchmark.BenchSettings(max_new_tokens=benchmark.MAX_BENCH_TOKENS // 4 + 1), output=False)


def _no_model_loads(*args, **kwargs):
    raise AssertionError(f"a model was loaded ({args}, {kwargs}) although the arguments are bad")


def test_run_benchmark_checks_its_output_before_any_model_loads(tmp_path):
    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"the model was used ({name}) although the output is bad")

    for output, message in ((tmp_path, "is a folder"), (REPO_ROOT / "reports" / "index.html", "published reports"),
                            (REPO_ROOT / "data" / "results" / "bench_vm.json", "publish=True")):
        with pytest.raises(ValueError, match=message):
            benchmark.run_benchmark(["p"], Untouchable(), Untouchable(), ["autoregressive"],
                                    benchmark.BenchSettings(max_new_tokens=2), output=output)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        benchmark.run_benchmark(["p"], Untouchable(), Untouchable(), ["autoregressive"],
                                benchmark.BenchSettings(max_new_tokens=0), output=False)
    assert benchmark.bench_output_path(tmp_path / "new" / "b.json") == tmp_path / "new" / "b.json"
    assert not Path(tmp_path / "new").exists()


def test_run_benchmark_and_its_settings_refuse_what_the_command_line_refuses(monkeypatch):
    """The API shares the command line's checks (SETTING_CHECKS, check_methods, check_model_names), by
    argument name, before any model loads."""
    monkeypatch.setattr(benchmark, "load_model", _no_model_loads)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for field, value, error, message in (
            ("seed", 2 ** 70, ValueError, "seed must be <="),
            ("seed", 1.5, TypeError, "seed must be an integer"),
            ("temperature", None, TypeError, "temperature must be a real number"),
            ("top_p", 0.0, ValueError, "top_p must be > 0.0"),
            ("acceptance_vector", [0.5, float("nan")], ValueError, r"acceptance_vector\[1\] must be a finite"),
            ("acceptance_vector", "0.5", TypeError, "acceptance_vector must be a sequence of numbers"),
            ("dtype", "float8", ValueError, "dtype: unknown dtype 'float8'"),
            ("dtype", 16, TypeError, "dtype: dtype must be a torch dtype or a name"),
            ("device", "meta", ValueError, "device: device 'meta'")):
        with pytest.raises(error, match=message):
            benchmark.BenchSettings(**{field: value})
    for methods, settings, hf_draft, message in (
            (["token/binary:40"], benchmark.BenchSettings(), None, "methods: shape 'binary:40' has"),
            (["token/chain:4/bogus"], benchmark.BenchSettings(), None, "methods: unknown sampling 'bogus'"),
            ([], benchmark.BenchSettings(), None, "methods: no method given"),
            (["token/chain:4"], benchmark.BenchSettings(acceptance_vector=[0.5]), None,
             "acceptance_vector is only read by Sequoia trees"),
            (["hf_assisted"], benchmark.BenchSettings(), "nonexistent-model-xyz",
             "hf_draft: could not load model 'nonexistent-model-xyz'"),
            (["token/chain:4"], benchmark.BenchSettings(), "smollm2-135m-draft",
             r"hf_draft 'smollm2-135m-draft' is the draft of HF assisted generation, and no method of \['token/chain:4'\]")):
        with pytest.raises(ValueError, match=message):
            benchmark.run_benchmark(["p"], "smollm2-135m-instruct", "smollm2-135m-draft", methods, settings,
                                    hf_draft=hf_draft, output=False)


def _digest(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_bench_that_fails_part_way_writes_nothing(tmp_path, monkeypatch, tiny_llama):
    """The real run_benchmark on toy models whose draft fails at the second prompt: neither the published
    bench file it was to replace (--publish) nor a run folder's output is written, nor anything beside them."""
    published = tmp_path / "published"
    monkeypatch.setattr(destinations, "PUBLISHED_REPORTS_DIR", published / "reports")
    monkeypatch.setattr(destinations, "PUBLISHED_RESULTS_DIR", published / "data" / "results")
    (published / "reports").mkdir(parents=True)
    (published / "reports" / "index.html").write_text("published index")
    bench_file = published / "data" / "results" / "bench_vm.json"
    bench_file.parent.mkdir(parents=True)
    bench_file.write_text('{"published": true}')
    target, draft = tiny_llama(97, name="tiny-target"), tiny_llama(97, name="tiny-draft", seed=1)
    for lm in (target, draft):
        lm.encode = lambda text, chat=True: torch.tensor([1, 2, 3])  # no tokenizer: every prompt is 3 tokens
    sessions, draft_session = [], draft.session

    def failing_session(prompt):
        sessions.append(prompt)
        if len(sessions) == 3:  # the warm-up, the first prompt, then the second prompt fails
            raise RuntimeError("the draft failed at the second prompt")
        return draft_session(prompt)

    draft.session = failing_session
    prompts = [Prompt(f"p{i}", "toy", "a prompt") for i in range(3)]
    settings = benchmark.BenchSettings(max_new_tokens=2, progress=False)
    before, real_before = _digest(published), _published_digest()
    run_folder = tmp_path / "runs" / "bench.json"
    for output, publish in ((bench_file, True), (run_folder, False)):
        sessions.clear()
        with pytest.raises(RuntimeError, match="second prompt"):
            benchmark.run_benchmark(prompts, target, draft, ["autoregressive", "token/chain:2"], settings,
                                    output=output, publish=publish)
        assert len(sessions) == 3
    assert _digest(published) == before and not run_folder.parent.exists()
    assert _published_digest() == real_before
    # the same toy run without the failure writes its one file
    draft.session = draft_session
    report = benchmark.run_benchmark(prompts[:1], target, draft, ["autoregressive", "token/chain:2"], settings,
                                     output=run_folder)
    assert report["output"] == str(run_folder) and [p.name for p in run_folder.parent.iterdir()] == ["bench.json"]
