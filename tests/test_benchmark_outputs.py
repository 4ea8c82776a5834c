"""`specdec bench` writes to a run folder unless published, and checks its arguments and output before the
benchmark runs: no model loads and no prompt is read for a refused command, and the published files are
byte-for-byte unchanged."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from specdec_lib.experiments import benchmark
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
])
def test_bad_arguments_and_outputs_are_refused_before_the_benchmark_runs(tmp_path, capsys, no_work, argv, message):
    before = _published_digest()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert benchmark.main(["--methods", "autoregressive"] + argv) == 2
    err = capsys.readouterr().err
    assert err == f"error: {err[7:]}" and message in err and len(err.strip().splitlines()) == 1
    assert no_work == {"runs": [], "prompts": 0}
    assert _published_digest() == before


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
