"""Data-seed checks: a notebook run again under another data seed (other target-sampled contexts, other drafts),
its claims recorded in ``data/results/seed_checks/`` so that the index sets them beside the published verdicts
(`report_index.data_seed_rows`). A verdict that changes with the data seed is a defect to fix, like one that
changes with the bootstrap seed.

The run itself is an ordinary custom run, e.g.::

    python -m specdec_lib reproduce -n 02_traversal -p seeds '[1]' --reports-dir /tmp/seed1
    python -m specdec_lib seed-check -n 02_traversal --run-dir /tmp/seed1 --purpose "..."

`record_seed_check` copies the run's status and the claims it was run for (``keep``: the claims whose design the
run kept, when it was reduced or timed beside other work) into one JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from .index import SEED_CHECKS, data_seeds, load_status
from .reproduce import PUBLISHED_REPORTS_DIR
from .results import atomic_write_text, load_claims

SEED_CHECKS_DIR = (PUBLISHED_REPORTS_DIR / SEED_CHECKS).resolve()
"""Where `record_seed_check` writes: ``report_index.SEED_CHECKS`` seen from the published ``reports/``."""


def _kept(claims: list[dict[str, Any]], keep: Sequence[str] | None, notebook: str) -> list[dict[str, Any]]:
    """The claims whose text contains one of ``keep`` (all when ``keep`` is None); each ``keep`` must match."""
    if keep is None:
        return claims
    unmatched = [k for k in keep if not any(k in c["claim"] for c in claims)]
    if unmatched:
        raise ValueError(f"keep: {unmatched} match no claim of {notebook}; its claims: {[c['claim'] for c in claims]}")
    return [c for c in claims if any(k in c["claim"] for k in keep)]


def record_seed_check(run_dir: Path | str, notebook: str, purpose: str, keep: Sequence[str] | None = None,
                      out_dir: Path | str = SEED_CHECKS_DIR) -> Path:
    """Write ``<out_dir>/<notebook>_seed<seeds>.json`` (``purpose``, the run's ``status`` and its claims, or the
    ones containing a text of ``keep``) from the reports folder ``run_dir`` of a finished run with ``-p seeds``
    (or ``-p seed``). ValueErrors: no run of ``notebook`` there or no claims of it, a run that did not finish
    ("ok"), no seeds, an empty ``purpose``, a ``keep`` text that matches no claim. Returns the path written."""
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
    path = Path(out_dir) / f"{notebook}_seed{'-'.join(map(str, seeds))}.json"
    record = {"purpose": purpose.strip(), "status": status, "claims": claims}
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False))
    return path


__all__ = ["SEED_CHECKS_DIR", "record_seed_check"]
