"""Claim records and result files: what every notebook saves next to its report.

Two kinds of output leave a notebook:

* **claims** -- a list of records ``(paper, claim, paper_value, ours, verdict)``, one per checked claim of a
  paper, saved as JSON under ``reports/claims/<notebook>.json`` (`save_claims`). ``reports/index.html`` is
  built from these files only (see `specdec_lib.reporting.reproduce.build_index`).
* **results** -- the measured numbers as CSV (tables) or JSON (anything else) under
  ``data/results/<notebook>/``, each with a ``.meta.json`` holding the parameters, the git revision, the
  library versions and the machine that produced them (`save_results`).

When a notebook runs under the runner (`specdec_lib.reporting.reproduce.run_notebook`) both go to a staging folder
first (environment variables ``SPECDEC_CLAIMS_DIR`` and ``SPECDEC_RESULTS_DIR``), and are moved into place
only when the whole notebook succeeded, so a failing notebook never overwrites the last good output.
Run by hand (Jupyter, plain papermill), they go straight to ``reports/claims`` and ``data/results``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import platform
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

REPO_ROOT = Path(__file__).resolve().parents[2]

VERDICTS = ("reproduced", "partly", "not reproduced", "not applicable offline", "failed")
"""Allowed verdicts, best first. ``failed`` is set by the runner for a notebook that raised."""

PAPERS = {
    "asps": "Hu & Huang: ASpS / Tree Monte Carlo (ICML'24)",
    "traversal": "Weng et al.: Traversal Verification (NeurIPS'25)",
    "erss": "Kobus & Gunduz: Exponential Races (ERSS)",
    "block": "Sun et al.: Block Verification (ICLR'25)",
    "sequoia": "Chen et al.: Sequoia",
    "optimal": "Hu et al.: Towards Optimal Multi-Draft SD (ICLR'25)",
    "hsd": "Zhou et al.: Hierarchical Speculative Decoding (2026)",
    "cross": "Cross-paper (this workbook)",
    "distill": "Offline draft (this workbook)",
}
"""Short keys accepted for ``paper`` in `claim`; any other string is used as given."""

_LIBRARIES = ("torch", "transformers", "numpy", "pandas", "scipy", "papermill", "nbconvert", "seaborn",
              "specdec-workbook")


@dataclass(frozen=True)
class Claim:
    """One checked claim of a paper: the paper's value beside ours and a verdict from `VERDICTS`.

    The fields after ``notes`` come from the claims registry (`specdec_lib.verdicts.registry`, written by
    `save_claims`): the entry's ``id``, ``owner`` ("paper" or "workbook"), ``source`` and ``quote`` in the paper,
    the ``rule`` kind and its ``parameters``, the ``null_test`` that shows the rule fails without the effect,
    where the paper value comes from (``paper_value_source``), ``can_fail`` and, for gain claims with a paper
    number, ``size_ratio`` (ours / paper [low, high]), ``size`` and, outside a factor of 2, ``size_note`` (why);
    ``wall_clock`` for a claim decided on wall-clock times, and ``timed_beside`` the notebooks that shared the CPU
    while it was timed (`contention`).
    Empty for a claim outside the registry."""

    paper: str
    claim: str
    paper_value: str
    ours: str
    verdict: str
    notes: str = ""
    id: str = ""
    owner: str = ""
    source: str = ""
    quote: str = ""
    rule: str = ""
    parameters: dict | None = None
    null_test: str = ""
    paper_value_source: str = ""
    can_fail: bool | None = None
    size_ratio: list | None = None
    size: str = ""
    size_note: str = ""
    wall_clock: bool = False
    timed_beside: list | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        for name in ("paper", "claim"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"claim record needs a non-empty {name!r}")
        if self.owner not in ("", "paper", "workbook"):
            raise ValueError(f"owner must be 'paper' or 'workbook', got {self.owner!r}")


CLAIM_FIELDS = ("paper", "claim", "paper_value", "ours", "verdict", "notes")
"""The fields every claim record has; the others are the registry's (`Claim`)."""


def _record(claim_record: Claim) -> dict[str, Any]:
    """A claim as written to a claims file: its own fields and, for a registered claim (an ``id``), the registry's
    (the size fields only where set)."""
    record = asdict(claim_record)
    if not claim_record.id:
        return {k: record[k] for k in CLAIM_FIELDS}
    return {k: v for k, v in record.items()
            if not (k in ("size_ratio", "size", "size_note", "wall_clock", "timed_beside") and v in ("", None, False))}


def _text(value: Any) -> str:
    """Render a value for the claims table: floats to 4 significant digits, sequences joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "yes" if value else "no"
    if isinstance(value, float) or type(value).__name__.startswith("float"):
        value = float(value)
        return "nan" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    return str(value)


def claim(paper: str, claim: str, paper_value: Any, ours: Any, verdict: str | bool, notes: str = "",
          partly: bool = False) -> Claim:
    """Build a claim record.

    ``paper`` may be a key of `PAPERS`. ``verdict`` is one of `VERDICTS`, or a bool: True gives
    ``reproduced``; False gives ``partly`` when ``partly`` is True, else ``not reproduced``.
    Values are rendered to short strings (floats to 4 significant digits).
    """
    if not isinstance(verdict, str):  # bool, numpy bool
        verdict = "reproduced" if bool(verdict) else ("partly" if partly else "not reproduced")
    return Claim(PAPERS.get(paper, paper), claim, _text(paper_value), _text(ours), verdict, notes)


def not_applicable(paper: str, claim_text: str, paper_value: Any, reason: str) -> Claim:
    """A claim that cannot be checked offline (paper's hardware, models or data); ``reason`` says why."""
    return claim(paper, claim_text, paper_value, "-", "not applicable offline", notes=reason)


def verdict_from_ci(low: float, high: float, threshold: float = 0.0, direction: str = ">") -> str:
    """Verdict for "quantity > threshold" (or "<") given a confidence interval [low, high].

    ``reproduced`` when the whole interval is on the claimed side, ``partly`` when only the point range
    straddles the threshold (the interval contains it), ``not reproduced`` when the whole interval is on
    the wrong side.
    """
    if direction not in (">", "<"):
        raise ValueError("direction must be '>' or '<'")
    if low > high:
        raise ValueError(f"empty interval [{low}, {high}]")
    if direction == "<":
        low, high, threshold = -high, -low, -threshold
    if low > threshold:
        return "reproduced"
    if high <= threshold:
        return "not reproduced"
    return "partly"


# ----------------------------------------------------------------------------------------- locations

def _smoke() -> bool:
    return os.environ.get("SPECDEC_PROFILE") == "smoke"


def claims_dir() -> Path:
    """Where `save_claims` writes: ``$SPECDEC_CLAIMS_DIR`` (set by the runner), else ``reports/claims``
    (``reports/smoke/claims`` when ``$SPECDEC_PROFILE`` is smoke, so quick runs never replace real claims)."""
    default = REPO_ROOT / "reports" / ("smoke" if _smoke() else "") / "claims"
    return Path(os.environ.get("SPECDEC_CLAIMS_DIR") or default)


def results_dir() -> Path:
    """Root of `save_results`: ``$SPECDEC_RESULTS_DIR`` (set by the runner), else ``data/results``
    (``data/results/smoke`` when ``$SPECDEC_PROFILE`` is smoke)."""
    default = REPO_ROOT / "data" / "results" / ("smoke" if _smoke() else "")
    return Path(os.environ.get("SPECDEC_RESULTS_DIR") or default)


def atomic_write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; reports are shared files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# ----------------------------------------------------------------------------------------- provenance

OUTPUT_PATHS = ("reports", "data/results")
"""What the notebooks write (relative to the repository): changes there are results, not code, so they do not make
a revision dirty. Otherwise every notebook after the first of one `make reproduce` would record ``-dirty``: the
first one's published report is an uncommitted change when the next one starts."""


def git_revision(root: Path | str = REPO_ROOT) -> str:
    """``git describe``-like revision of the working tree (``<sha>`` plus ``-dirty`` when a tracked file outside
    `OUTPUT_PATHS` differs from it), or ``unknown``."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        outside_outputs = ["--", "."] + [f":(exclude){path}" for path in OUTPUT_PATHS]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", *outside_outputs], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def library_versions(names: Iterable[str] = _LIBRARIES) -> dict[str, str]:
    """Installed versions of the libraries that shape the numbers (missing ones are left out)."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


BF16_MATRIX_FLAGS = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"))
"""/proc/cpuinfo flags of CPU units that multiply bfloat16 matrices natively, best first (`cpu_features`)."""


@functools.lru_cache(maxsize=1)
def _proc_cpuinfo() -> str:
    """/proc/cpuinfo, read once per process ("" where it cannot be read)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_features(cpuinfo: str | None = None) -> dict[str, str]:
    """The CPU model and its best native bfloat16 matrix unit ("AMX-BF16", "AVX512-BF16" or "none"), read from
    ``cpuinfo`` (default: /proc/cpuinfo; empty where it cannot be read). The default profile runs its models in
    bfloat16: without such a unit torch emulates it and a forward over 64 tokens costs about 5x more (t(64) 816 ms
    on a Xeon without one against 150 ms with AMX-BF16, data/hardware/), so wall-clock results of two machines
    that differ here are not comparable."""
    if cpuinfo is None:
        cpuinfo = _proc_cpuinfo()
    model, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    if not model and not flags:
        return {}
    unit = next((name for flag, name in BF16_MATRIX_FLAGS if flag in flags), "none")
    return {"cpu_model": model or "unknown", "bf16_matrix": unit}


def machine(device: Any = None) -> dict[str, Any]:
    """The machine: host, OS, CPU (model and bfloat16 matrix unit, `cpu_features`), core count, Python, torch
    threads and the GPU: ``device``'s where it is a CUDA device, else the first one torch sees, if any. Every
    record of a machine (result metadata, bench files, draft training records, the reports' machine line,
    `reports.machine_description`) is this dict."""
    info: dict[str, Any] = {"hostname": platform.node(), "platform": platform.platform(),
                            "system": platform.system(), "architecture": platform.machine(),
                            "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                            "python": platform.python_version(), **cpu_features()}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if device is not None and torch.device(device).type == "cuda":
            info["cuda_device"] = torch.cuda.get_device_name(torch.device(device))
        elif device is None and torch.cuda.is_available():
            info["cuda_device"] = torch.cuda.get_device_name(0)
    except ImportError:  # torch is a dependency; the record works without it
        pass
    return info


def provenance(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything needed to tell how a result was produced."""
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "params": _jsonable(dict(params or {})),
        "git_revision": git_revision(),
        "versions": library_versions(),
        "machine": machine(),
    }


def _jsonable(obj: Any) -> Any:
    """Best-effort conversion to JSON-serialisable values (tensors, numpy scalars, paths, dataclasses)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if hasattr(obj, "tolist"):
        return _jsonable(obj.tolist())
    if hasattr(obj, "__dataclass_fields__"):
        return _jsonable(asdict(obj))
    return str(obj)


# ----------------------------------------------------------------------------------------- saving

def save_claims(notebook: str, claims: Iterable[Claim | Mapping[str, Any]], directory: Path | str | None = None,
                strict: bool | None = None) -> None:
    """Save a notebook's claim records as ``<directory>/<notebook>.json`` (atomically). Returns nothing: it is
    a notebook's last line, where a returned path would be printed into the report (the runner's staging
    folder).

    The claims of a notebook with a registry file get their registry fields (`verdicts.registry.annotate`).
    ``strict`` (default: the claims go to `claims_dir` outside the smoke profile, as a notebook's do): a claim
    of such a notebook without a registry entry raises KeyError. Smoke runs use toy sizes the registry does not
    list, so they are annotated where an entry matches."""
    records = []
    for c in claims:
        record = c if isinstance(c, Claim) else Claim(**dict(c))
        records.append(asdict(record))
    if not records:
        raise ValueError(f"notebook {notebook!r} produced no claim records")
    from ..verdicts import registry  # the verdicts package imports this module

    if strict is None:
        strict = directory is None and not _smoke()
    if notebook in registry.notebooks():
        records = registry.annotate(records, notebook, strict=strict)
    records = [_record(Claim(**r)) for r in records]
    payload = {"notebook": notebook, "claims": records, "provenance": provenance()}
    path = Path(directory) if directory is not None else claims_dir()
    atomic_write_text(path / f"{notebook}.json", json.dumps(payload, indent=1))


def load_claims(path: Path | str) -> list[dict[str, Any]]:
    """Read a claims file written by `save_claims` (validates every record)."""
    return claims_of(json.loads(Path(path).read_text(encoding="utf-8")))


def claims_of(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The validated claim records of a payload with a ``claims`` list (a claims file, a data-seed check)."""
    return [_record(Claim(**r)) for r in payload["claims"]]


def save_results(name: str, frame_or_dict: Any, params: Mapping[str, Any] | None = None,
                 directory: Path | str | None = None) -> Path:
    """Save a result table or record with its provenance; returns the data file's path.

    ``name`` is ``"<notebook>/<result>"`` (e.g. ``"04_block/block_efficiency"``) or just ``"<notebook>"``
    (file ``results``). A pandas DataFrame goes to ``<result>.csv``; anything else (dict, list) to
    ``<result>.json``. ``<result>.meta.json`` beside it holds `provenance` (parameters, git revision,
    library versions, machine).
    """
    parts = [p for p in str(name).replace("\\", "/").split("/") if p]
    if not parts or any(p in (".", "..") for p in parts) or len(parts) > 2:
        raise ValueError(f"result name {name!r} must be '<notebook>' or '<notebook>/<result>'")
    notebook, result = (parts[0], parts[1]) if len(parts) == 2 else (parts[0], "results")
    folder = (Path(directory) if directory is not None else results_dir()) / notebook
    if hasattr(frame_or_dict, "to_csv"):
        path = atomic_write_text(folder / f"{result}.csv", frame_or_dict.to_csv(index=False))
    else:
        path = atomic_write_text(folder / f"{result}.json", json.dumps(_jsonable(frame_or_dict), indent=1))
    meta = provenance(params)
    meta["data_file"] = path.name
    atomic_write_text(folder / f"{result}.meta.json", json.dumps(meta, indent=1))
    return path


__all__ = ["VERDICTS", "PAPERS", "Claim", "CLAIM_FIELDS", "claim", "not_applicable", "verdict_from_ci", "claims_dir",
           "results_dir", "atomic_write_text", "git_revision", "library_versions", "machine", "provenance",
           "save_claims", "load_claims", "save_results"]
