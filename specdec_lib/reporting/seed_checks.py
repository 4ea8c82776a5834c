"""Data-seed checks: a notebook run again under another data seed (other target-sampled contexts, other drafts),
its claims recorded in ``data/results/seed_checks/`` so that the index sets them beside the published verdicts
(`report_index.data_seed_rows`). A verdict that changes with the data seed is a defect to fix, like one that
changes with the bootstrap seed.

The run itself is an ordinary custom run, e.g.::

    python -m specdec_lib reproduce -n 02_traversal -p seeds '[1]' --reports-dir /tmp/seed1
    python -m specdec_lib seed-check -n 02_traversal --run-dir /tmp/seed1 --purpose "..."

`record_seed_check` copies the run's status and the claims it was run for (``keep``: the claims whose design the
run kept, when it was reduced or timed beside other work) into one JSON file, once `seed_run_differences` finds
the run comparable with the published report: the same profile, the same models and the same code (the
published run's revision, or one whose code is identical: only published outputs differ between them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import destinations
from .destinations import PUBLISHED_REPORTS_DIR
from .index import SEED_CHECKS, data_seeds, load_status
from .results import OUTPUT_PATHS, REPO_ROOT, atomic_write_text, load_claims

SEED_CHECKS_DIR = (PUBLISHED_REPORTS_DIR / SEED_CHECKS).resolve()
"""Where `record_seed_check` writes: ``report_index.SEED_CHECKS`` seen from the published ``reports/``."""


PAIR_PARAMETERS = ("target_model", "draft_model", "timing_draft_model", "dtype")
"""The parameters that choose a run's models (unset: the profile's own pair)."""

NOT_CODE = (*OUTPUT_PATHS, "docs", "tests", ".ci", "*.md", "CITATION.cff", "LICENSE")
"""Paths (git pathspecs) whose changes cannot change a notebook's numbers: published outputs, documentation and
the tests. Two revisions that differ only there run the same code."""


def code_difference(run_revision: str, published_revision: str, root: Path | str = REPO_ROOT) -> str:
    """Why code at ``run_revision`` may differ from code at ``published_revision`` ("" when it is the same code:
    the same commit, or commits that differ only in `NOT_CODE`, such as the published outputs). A revision
    with uncommitted changes (``-dirty``) or none recorded cannot be compared."""
    for who, rev in (("the run's", run_revision), ("the published run's", published_revision)):
        if not rev or rev == "unknown":
            return f"{who} code revision is not recorded"
        if rev.endswith("-dirty"):
            return f"{who} code revision {rev} had uncommitted changes"
    if run_revision == published_revision:
        return ""
    code = ["--", "."] + [f":(exclude){path}" for path in NOT_CODE]
    try:
        diff = subprocess.run(["git", "diff", "--name-only", published_revision, run_revision, *code],
                              cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"code revision {run_revision[:10]} against {published_revision[:10]}: git could not compare ({exc})"
    if diff.returncode != 0:
        return f"code revision {run_revision[:10]} against {published_revision[:10]}: git could not compare them"
    changed = diff.stdout.split()
    if not changed:
        return ""
    return (f"code revision {run_revision[:10]}, not the published {published_revision[:10]} ({len(changed)} file(s) "
            f"differ, e.g. {', '.join(changed[:3])})")


def seed_run_differences(run: Mapping[str, Any], published: Mapping[str, Any], root: Path | str = REPO_ROOT
                         ) -> list[str]:
    """What makes the run record ``run`` (a status.json entry) not comparable with the published run record
    ``published`` of the same notebook: another profile, other models (`PAIR_PARAMETERS`), other code
    (`code_difference`). Empty when the run can stand beside the published verdicts."""
    out = []
    if run.get("profile") != published.get("profile"):
        out.append(f"profile {run.get('profile')!r}, not the published {published.get('profile')!r}")
    run_params, pub_params = run.get("parameters", {}), published.get("parameters", {})
    for name in PAIR_PARAMETERS:
        if run_params.get(name) != pub_params.get(name):
            out.append(f"{name} {run_params.get(name)!r}, not the published {pub_params.get(name)!r}")
    code = code_difference(str(run.get("git_revision", "")), str(published.get("git_revision", "")), root)
    if code:
        out.append(code)
    return out


def check_out_dir(name: str, out_dir: Path | str) -> None:
    """ValueError naming ``name`` unless ``out_dir`` can take seed-check files: the published seed-checks
    folder (`SEED_CHECKS_DIR`) or a folder outside the published tree, writable (`destinations.check_own_folder`)."""
    destinations.check_own_folder(name, out_dir, destinations.PUBLISHED_REPORTS_DIR / SEED_CHECKS)


def _check_comparable(run: Mapping[str, Any], notebook: str, published_dir: Path) -> None:
    published = load_status(published_dir).get(notebook)
    if published is None or published.get("status") != "ok":
        raise ValueError(f"run_dir: there is no published run of {notebook} in {published_dir} to compare with")
    differences = seed_run_differences(run, published)
    if differences:
        raise ValueError(f"run_dir: the run of {notebook} is not comparable with its published report: "
                         + "; ".join(differences) + f" (published: {published_dir / 'status.json'})")


def _kept(claims: list[dict[str, Any]], keep: Sequence[str] | None, notebook: str) -> list[dict[str, Any]]:
    """The claims whose text contains one of ``keep`` (all when ``keep`` is None); each ``keep`` must match."""
    if keep is None:
        return claims
    unmatched = [k for k in keep if not any(k in c["claim"] for c in claims)]
    if unmatched:
        raise ValueError(f"keep: {unmatched} match no claim of {notebook}; its claims: {[c['claim'] for c in claims]}")
    return [c for c in claims if any(k in c["claim"] for k in keep)]


def record_seed_check(run_dir: Path | str, notebook: str, purpose: str, keep: Sequence[str] | None = None,
                      out_dir: Path | str = SEED_CHECKS_DIR, published_dir: Path | str | None = None) -> Path:
    """Write ``<out_dir>/<notebook>_seed<seeds>.json`` (``purpose``, the run's ``status`` and its claims, or the
    ones containing a text of ``keep``) from the reports folder ``run_dir`` of a finished run with ``-p seeds``
    (or ``-p seed``). ValueErrors, before anything is written: no run of ``notebook`` there or no claims of it,
    a run that did not finish ("ok"), no seeds, an empty ``purpose``, a ``keep`` text that matches no claim,
    a run not comparable with the published run of ``notebook`` in ``published_dir`` (default: the
    published ``reports/``), naming every difference (`seed_run_differences`), and an ``out_dir`` inside the
    published tree other than its seed-checks folder, or one that is a file or read-only (`check_out_dir`).
    Returns the path written."""
    check_out_dir("out_dir", out_dir)
    if not isinstance(purpose, str) or not purpose.strip():
        raise ValueError("purpose must say what the check keeps of the notebook's design (a non-empty text)")
    run_dir = Path(run_dir)
    status = load_status(run_dir).get(notebook)
    if status is None:
        raise ValueError(f"run_dir: {run_dir} holds no run of {notebook} (no entry in its status.json)")
    if status.get("status") != "ok":
        raise ValueError(f"run_dir: the run of {notebook} in {run_dir} ended {status.get('status')!r}, not 'ok'")
    seeds = data_seeds(status.get("parameters", {}))
    if seeds is None:
        raise ValueError(f"the run of {notebook} was not given data seeds (-p seeds '[1]', or -p seed 1 where the "
                         f"notebook has one seed): its parameters are {status.get('parameters', {})}")
    claims_path = run_dir / "claims" / f"{notebook}.json"
    if not claims_path.is_file():
        raise ValueError(f"run_dir: {run_dir} has no claims of {notebook} ({claims_path} is missing)")
    claims = _kept(load_claims(claims_path), keep, notebook)
    _check_comparable(status, notebook, Path(published_dir or destinations.PUBLISHED_REPORTS_DIR))
    path = Path(out_dir) / f"{notebook}_seed{'-'.join(map(str, seeds))}.json"
    record = {"purpose": purpose.strip(), "status": status, "claims": claims}
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False))
    return path


__all__ = ["SEED_CHECKS_DIR", "PAIR_PARAMETERS", "record_seed_check", "check_out_dir", "seed_run_differences", "code_difference"]
