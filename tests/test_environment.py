"""environment.yml (conda) and pyproject.toml (pip) must describe the same package set."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;#]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_requirements(text: str) -> dict[str, str]:
    data = tomllib.loads(text)
    reqs = list(data["project"]["dependencies"]) + list(data["tool"]["specdec"]["no-deps"])
    return {_name(r): r.replace(" ", "") for r in reqs}


def _environment_pip_requirements(text: str) -> dict[str, str]:
    block = text.split("- pip:", 1)[1]
    reqs = [m.group(1) for line in block.splitlines()
            if (m := re.match(r"^\s+-\s+(\S+)", line)) and not m.group(1).startswith("-e")]
    return {_name(r): r for r in reqs}


def disagreements(pyproject_text: str, environment_text: str) -> list[str]:
    pip_side = _pyproject_requirements(pyproject_text)
    conda_side = _environment_pip_requirements(environment_text)
    problems = [f"only in pyproject: {n}" for n in sorted(set(pip_side) - set(conda_side))]
    problems += [f"only in environment.yml: {n}" for n in sorted(set(conda_side) - set(pip_side))]
    problems += [f"{n}: pyproject {pip_side[n]!r} vs environment.yml {conda_side[n]!r}"
                 for n in sorted(set(pip_side) & set(conda_side)) if pip_side[n] != conda_side[n]]
    return problems


def test_environment_yml_matches_pyproject():
    assert disagreements((ROOT / "pyproject.toml").read_text(), (ROOT / "environment.yml").read_text()) == []


def test_a_changed_pin_or_missing_package_is_caught():
    pyproject, env = (ROOT / "pyproject.toml").read_text(), (ROOT / "environment.yml").read_text()
    assert disagreements(pyproject, env.replace("torch==2.13.0", "torch==2.14.1"))
    assert disagreements(pyproject, env.replace("      - seaborn==0.13.2\n", ""))


def test_makefile_installs_the_no_deps_packages():
    makefile = (ROOT / "Makefile").read_text()
    for req in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["specdec"]["no-deps"]:
        assert f"--no-deps {req}" in makefile, f"Makefile does not install {req} with --no-deps"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def _lock_versions(text: str) -> dict[str, str]:
    pins = [line.strip() for line in text.splitlines() if "==" in line and not line.startswith("#")]
    return {_name(p): p.split("==", 1)[1] for p in pins}


def lock_disagreements(pyproject_text: str, lock_text: str) -> list[str]:
    """Every requirement of pyproject.toml must be an exact pin at requirements.lock's version."""
    lock = _lock_versions(lock_text)
    problems = []
    for name, req in _pyproject_requirements(pyproject_text).items():
        if "==" not in req:
            problems.append(f"{name}: not pinned ({req!r})")
        elif lock.get(name) != req.split("==", 1)[1]:
            problems.append(f"{name}: pyproject {req!r} vs requirements.lock {lock.get(name)!r}")
    return problems


def test_pyproject_pins_are_the_lock_files_versions():
    pyproject, lock = (ROOT / "pyproject.toml").read_text(), (ROOT / "requirements.lock").read_text()
    assert lock_disagreements(pyproject, lock) == []
    assert lock_disagreements(pyproject.replace('"pandas==', '"pandas>='), lock)
    assert lock_disagreements(pyproject, lock.replace("\npandas==", "\npandas==0.0.1+"))


def test_makefile_installs_the_lock_file_without_resolving():
    assert "--no-deps -r requirements.lock" in (ROOT / "Makefile").read_text()
