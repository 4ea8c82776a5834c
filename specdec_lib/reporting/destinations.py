"""Where a run may write, and the checks of a run's arguments made before anything runs.

The published tree is ``reports/`` and ``data/results/``: the reports, claims and data of the notebooks' own
settings on the published profile. Inside it, runs write only to the published folders themselves (a run of
the notebooks' own settings, or one given ``publish=True``) or to the run folders kept apart for smaller and
toy runs (`RUN_FOLDERS`: ``smoke/``, ``custom/``, ``smoke/custom/``, all git-ignored). Any other folder inside
the published tree (``reports/claims``, ``data/results/seed_checks`` ...) is refused, as is a folder that is a
file or cannot be written.

`check_run` is the one check every entry point of the runner calls (`reproduce.reproduce`,
`reproduce.run_notebook`, ``specdec reproduce``): the parameter values (`check_run_parameters`), the cell
timeout and the folders (`destinations`). Each raises a ValueError (`arguments.ArgumentTypeError` for a wrong
type) naming the argument.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..arguments import check_count, check_list, check_seed, check_temperature
from .results import REPO_ROOT

PROFILES = ("smoke", "default", "full")
PUBLISHED_REPORTS_DIR = REPO_ROOT / "reports"
PUBLISHED_RESULTS_DIR = REPO_ROOT / "data" / "results"
CUSTOM = "custom"
RUN_FOLDERS = (Path("smoke"), Path(CUSTOM), Path("smoke") / CUSTOM)
"""The subfolders of ``reports/`` and ``data/results/`` where runs that do not publish write (git-ignored)."""

EXECUTION_PARAMETERS = frozenset({"num_threads"})
"""Parameters that change how fast a notebook runs, not what it measures (its torch threads): a run that sets
only these publishes like a plain run of its profile (`destinations`), and its status.json records them."""

MODEL_PARAMETERS = ("target_model", "draft_model", "timing_draft_model", "device", "dtype")
"""Parameters that choose real models; the smoke profile runs its toy pair and takes none of them."""


def design_parameters(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """``parameters`` without the `EXECUTION_PARAMETERS`: those that make a run custom."""
    return {k: v for k, v in dict(parameters or {}).items() if k not in EXECUTION_PARAMETERS}


def check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")


def default_reports_dir(profile: str, custom: bool = False) -> Path:
    """``reports/`` for real runs, ``reports/smoke/`` for the smoke profile; with ``custom`` (a run with
    overridden parameters) their ``custom/`` subfolder."""
    check_profile(profile)
    base = PUBLISHED_REPORTS_DIR / ("smoke" if profile == "smoke" else "")
    return base / CUSTOM if custom else base


def default_results_dir(profile: str, custom: bool = False) -> Path:
    """``data/results/`` for real runs, ``data/results/smoke/`` for the smoke profile; with ``custom``
    their ``custom/`` subfolder."""
    check_profile(profile)
    base = PUBLISHED_RESULTS_DIR / ("smoke" if profile == "smoke" else "")
    return base / CUSTOM if custom else base


# ----------------------------------------------------------------------------------------- folders

def _resolved(path: Path | str) -> Path:
    return Path(path).expanduser().resolve()


def same_dir(a: Path | str, b: Path | str) -> bool:
    return _resolved(a) == _resolved(b)


def inside(path: Path | str, folder: Path | str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (after resolving links and ``..``)."""
    return _resolved(path).is_relative_to(_resolved(folder))


def is_published(folder: Path | str) -> bool:
    """Whether ``folder`` is the published ``reports/`` or ``data/results/`` itself."""
    return same_dir(folder, PUBLISHED_REPORTS_DIR) or same_dir(folder, PUBLISHED_RESULTS_DIR)


def check_run_folder(name: str, folder: Path | str, published: Path) -> None:
    """ValueError naming ``name`` when ``folder`` lies inside the published tree but is neither ``published``
    (the published folder of its kind) nor one of its `RUN_FOLDERS`: writing there would mix a run's output
    into the published files (``reports/claims`` as a reports folder, anything under ``data/results`` as one)."""
    if not any(inside(folder, root) for root in (PUBLISHED_REPORTS_DIR, PUBLISHED_RESULTS_DIR)):
        return
    allowed = [published] + [published / sub for sub in RUN_FOLDERS]
    if not any(same_dir(folder, ok) for ok in allowed):
        raise ValueError(f"{name}: {folder} lies inside the published {PUBLISHED_REPORTS_DIR} / "
                         f"{PUBLISHED_RESULTS_DIR} tree; use {published} itself, one of its run folders "
                         f"({', '.join(str(published / sub) for sub in RUN_FOLDERS)}) or a folder outside it")


def check_own_folder(name: str, folder: Path | str, own: Path | str) -> None:
    """ValueError naming ``name`` unless ``folder`` is ``own`` (the one folder of the published tree a command
    writes into, e.g. ``data/results/seed_checks``) or lies outside the published tree, and is a folder this
    process can write (`check_writable_dir`): ``reports/`` or ``reports/claims`` would take its files for
    reports or claims."""
    if not same_dir(folder, own) and any(inside(folder, root) for root in (PUBLISHED_REPORTS_DIR,
                                                                          PUBLISHED_RESULTS_DIR)):
        raise ValueError(f"{name}: {folder} lies inside the published {PUBLISHED_REPORTS_DIR} / "
                         f"{PUBLISHED_RESULTS_DIR} tree; use {own} or a folder outside it")
    check_writable_dir(name, folder)


def check_writable_dir(name: str, folder: Path | str) -> None:
    """ValueError naming ``name`` unless ``folder`` is a folder this process can write in, or can be created
    (its nearest existing parent is a writable folder): a file, or a read-only folder, is refused up front."""
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name}: {folder} is a file, not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{name}: {folder} cannot be created: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{name}: {folder} is not writable ({existing} is read-only for this user)")


def check_existing_dir(name: str, folder: Path | str) -> None:
    """ValueError naming ``name`` unless ``folder`` is an existing folder (never created silently)."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise ValueError(f"{name}: {folder} {what}")


def check_output_file(name: str, path: Path | str, publish: bool = False) -> Path:
    """``path`` as the file a result is written to, checked before the work that produces it: not a folder
    (nor a name ending in a separator), in a folder that can be written, never inside ``reports/`` (the
    published reports and their index) and inside ``data/results/`` only with ``publish``."""
    text = os.fspath(path)
    out = Path(text).expanduser()
    if text.endswith((os.sep, "/")) or out.is_dir():
        raise ValueError(f"{name}: {text} is a folder; give the path of a file (e.g. {out / 'bench.json'})")
    if inside(out, PUBLISHED_REPORTS_DIR):
        raise ValueError(f"{name}: {text} lies inside the published reports {PUBLISHED_REPORTS_DIR}; "
                         f"nothing but the report runner writes there")
    if inside(out, PUBLISHED_RESULTS_DIR) and not publish:
        raise ValueError(f"{name}: {text} lies inside the published {PUBLISHED_RESULTS_DIR}; write it elsewhere "
                         f"or pass publish=True (--publish) to replace published data")
    check_writable_dir(name, out.parent)
    return out


def destinations(profile: str, parameters: Mapping[str, Any] | None = None,
                 reports_dir: Path | str | None = None, results_dir: Path | str | None = None,
                 publish: bool = False) -> tuple[Path, Path]:
    """(reports folder, results folder) of a run.

    Defaults: `default_reports_dir` / `default_results_dir`, in their ``custom/`` subfolder when
    ``parameters`` override anything but `EXECUTION_PARAMETERS` (unless ``publish``). A run with such
    parameters or on the smoke profile may not write into the published ``reports/`` or ``data/results/``
    (ValueError naming the folder) unless ``publish=True``: a smaller or toy run never replaces the
    published reports and data. Every run is refused a folder inside the published tree other than the
    published folders and their run folders (`check_run_folder`), and a folder it cannot write
    (`check_writable_dir`).
    """
    check_profile(profile)
    parameters = design_parameters(parameters)
    custom = bool(parameters) and not publish
    reports = Path(reports_dir) if reports_dir is not None else default_reports_dir(profile, custom)
    results = Path(results_dir) if results_dir is not None else default_results_dir(profile, custom)
    check_run_folder("reports_dir", reports, PUBLISHED_REPORTS_DIR)
    check_run_folder("results_dir", results, PUBLISHED_RESULTS_DIR)
    if not publish and (parameters or profile == "smoke"):
        why = f"parameters {sorted(parameters)}" if parameters else "the smoke profile"
        for arg, folder, published, default in (
                ("reports_dir", reports, PUBLISHED_REPORTS_DIR, default_reports_dir(profile, True)),
                ("results_dir", results, PUBLISHED_RESULTS_DIR, default_results_dir(profile, True))):
            if same_dir(folder, published):
                raise ValueError(f"{arg}: a run with {why} would replace the published {published}; write "
                                 f"it elsewhere (by default {default}) or pass publish=True (--publish)")
    check_writable_dir("reports_dir", reports)
    check_writable_dir("results_dir", results)
    return reports, results


def failures_dir(profile: str, reports: Path) -> Path:
    """Where a failed run's partial notebook and record go: ``reports`` itself, except for the published
    ``reports/``, which a failure leaves as it was; there it is the profile's ``custom/`` run folder."""
    return default_reports_dir(profile, custom=True) if is_published(reports) else reports


# ----------------------------------------------------------------------------------------- parameter values

def _check_dtype(name: str, value: str) -> str:
    from ..models.hf import check_dtype  # lazy (torch); the one list of dtypes a model can compute in

    check_dtype(name, value)
    return value


def _check_device(name: str, value: str) -> str:
    from ..models.hf import check_device  # lazy (torch)

    check_device(name, value)
    return value


VALUE_CHECKS = {
    "num_threads": check_count,
    "temperature": check_temperature,
    "tree_temperature": check_temperature,
    "temperatures": lambda name, v: check_list(name, v, check_temperature),
    "binary_temperatures": lambda name, v: check_list(name, v, check_temperature),
    "seed": check_seed,
    "seeds": lambda name, v: check_list(name, v, check_seed),
    "categories": lambda name, v: check_list(name, v, lambda _, item: item),
    "dtype": _check_dtype,
    "device": _check_device,
}
"""Notebook parameters checked before a run, by name: each check takes (name, value) and raises a ValueError
naming the parameter. None always passes (the profile's choice); text passes to the notebook, which parses
it, except for ``dtype`` and ``device``."""

_TEXT_CHECKED = frozenset({"dtype", "device"})


def check_run_parameters(profile: str, parameters: Mapping[str, Any] | None) -> None:
    """ValueError (or `arguments.ArgumentTypeError`) naming the parameter, before any notebook runs, for a
    value a notebook could only fail on late or ignore: ``num_threads`` below 1, a non-finite or negative
    temperature, an empty list of temperatures, seeds or categories, an unknown dtype, a device this machine
    lacks, and on the smoke profile any `MODEL_PARAMETERS` (its toy pair would run in their place)."""
    check_profile(profile)
    for name, value in dict(parameters or {}).items():
        if value is None:
            continue
        if profile == "smoke" and name in MODEL_PARAMETERS:
            raise ValueError(f"parameter {name}: the smoke profile runs its toy pair and takes no {name} "
                             f"(got {value!r}); run real models with profile 'default' or 'full' (--profile)")
        check = VALUE_CHECKS.get(name)
        if check is not None and (not isinstance(value, str) or name in _TEXT_CHECKED):
            check(f"parameter {name}", value)


def check_timeout(value: int | None) -> int | None:
    """The per-cell timeout in seconds: None (no limit) or an integer >= 1."""
    return None if value is None else check_count("execution_timeout (--timeout, seconds)", value)


def check_run(profile: str, parameters: Mapping[str, Any] | None = None, reports_dir: Path | str | None = None,
              results_dir: Path | str | None = None, publish: bool = False,
              execution_timeout: int | None = None) -> tuple[Path, Path]:
    """Every check of a run's arguments (`check_run_parameters`, `check_timeout`, `destinations`), made before
    anything runs or is written; returns the run's (reports folder, results folder)."""
    check_run_parameters(profile, parameters)
    check_timeout(execution_timeout)
    return destinations(profile, parameters, reports_dir, results_dir, publish)


__all__ = ["PROFILES", "PUBLISHED_REPORTS_DIR", "PUBLISHED_RESULTS_DIR", "CUSTOM", "RUN_FOLDERS",
           "EXECUTION_PARAMETERS", "MODEL_PARAMETERS", "VALUE_CHECKS", "design_parameters", "check_profile",
           "default_reports_dir", "default_results_dir", "same_dir", "inside", "is_published", "check_run_folder",
           "check_own_folder", "check_writable_dir", "check_existing_dir", "check_output_file", "destinations", "failures_dir",
           "check_run_parameters", "check_timeout", "check_run"]
