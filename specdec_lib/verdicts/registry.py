"""The claims registry: every claim a notebook reports, with who makes it, where, the rule that decides it
and the test that shows the rule can fail.

One TOML file per notebook (``claims/<notebook>.toml``): a ``[defaults]`` table and one ``[[claim]]`` table
per claim. A notebook's claim row is matched to its entry by notebook and text prefix (``{field}`` parts of
a prefix match anything, as in `catalogue.NOTEBOOK_RULES`); every row must match exactly one entry.
`annotate` writes an entry's fields into claim records; `size_of` sets a gain beside the paper's gain.
`entry_for` raises KeyError for a claim without an entry.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

CLAIMS_DIR = Path(__file__).with_name("claims")
OWNERS = ("paper", "workbook")
VALUE_SOURCES = ("paper", "workbook derivation", "none")
KINDS = ("superiority", "noninferiority", "equivalence", "exact", "trend", "every", "threshold", "not_applicable")
CHECKS = ("gain", "every_gain", "every_model_gap", "allof_model_gap", "allof_speedup", "speedup", "trend",
          "vector_statistic", "identity", "exact", "threshold", "threshold_partly", "interval", "ordering",
          "dominance", "holm_below", "range", "growth", "concavity", "step_overhead", "speedup_and_overhead",
          "allof_model_bound", "allof_vector_level", "not_applicable")
"""How each rule is applied (the synthetic data of tests/test_claim_rules_fail.py is built per check)."""
NULL_TEST = "tests/test_claim_rules_fail.py::test_rule_fails_without_effect[{id}]"
RECORD_FIELDS = ("id", "owner", "source", "quote", "rule", "parameters", "null_test", "paper_value_source",
                 "can_fail", "size_ratio", "size", "size_note", "wall_clock")
"""The registry fields a claim record carries (`annotate`)."""
PENDING_KEEP = ("rule", "parameters", "can_fail", "null_test", "wall_clock")
"""The fields a record decided under a since-replaced rule keeps from its run (`Entry.rule_pending`)."""
_ID = re.compile(r"^\d\d\.[a-z0-9_]+$")


@dataclass(frozen=True)
class Entry:
    """One registered claim (module docstring). ``check`` names how the rule is applied (`CHECKS`),
    ``options`` its non-numeric settings (direction, cell rule); ``null_test`` is derived from the id;
    ``retired`` says why a claim the notebook no longer writes is still listed (a committed report holds it);
    ``size_note`` says why our gain is more than a factor of 2 from the paper's (pair, draft kind, setting);
    ``wall_clock`` marks a claim decided on wall-clock times (labelled when timed beside another notebook);
    ``repeats`` is the text (a prefix) of the claim of the same notebook that this one repeats with a second
    drafter on the same prompts and seeds (the index sets the two verdicts side by side)."""

    id: str
    notebook: str
    claim: str
    owner: str
    source: str
    quantity: str
    rule: str
    check: str
    parameters: Mapping[str, float] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    quote: str = ""
    paper_setting: str = ""
    our_setting: str = ""
    differences: tuple[str, ...] = ()
    paper_value_source: str = "paper"
    paper_number: float | None = None
    size_note: str = ""
    wall_clock: bool = False
    rule_revision: str = ""
    history: tuple[Mapping[str, str], ...] = ()
    can_fail: bool = True
    defect: str = ""
    proposed_rule: Mapping[str, Any] = field(default_factory=dict)
    retired: str = ""
    repeats: str = ""

    @property
    def rule_pending(self) -> bool:
        """Whether the latest rule change has not been run yet: the published record was decided under the
        old rule and keeps that rule's fields (`annotate`)."""
        return bool(self.history) and str(self.history[-1]["verdict_new"]).startswith("not yet run")

    @property
    def null_test(self) -> str:
        return NULL_TEST.format(id=self.id)

    def matches(self, notebook: str, claim_text: str) -> bool:
        return notebook == self.notebook and claim_pattern(self.claim).match(claim_text) is not None


@functools.lru_cache(maxsize=None)
def claim_pattern(prefix: str) -> re.Pattern:
    """The regular expression of a claim text ``prefix`` whose f-string fields ({...}) match anything; match
    it at the start of a notebook's claim text."""
    return re.compile("".join("(?:.*?)" if part.startswith("{") else re.escape(part)
                              for part in re.split(r"(\{[^}]*\})", prefix)))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _entry(raw: Mapping[str, Any], defaults: Mapping[str, Any], notebook: str, path: Path) -> Entry:
    data = {**defaults, **raw, "notebook": notebook}
    where = f"{path.name}: claim {data.get('id', data.get('claim', '?'))!r}"
    known = set(Entry.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
    for name in ("id", "claim", "owner", "source", "quantity", "rule", "check"):
        if not isinstance(data.get(name), str) or not data[name].strip():
            raise ValueError(f"{where}: {name!r} must be a non-empty string")
    if not _ID.match(data["id"]) or not data["id"].startswith(notebook[:2] + "."):
        raise ValueError(f"{where}: id must look like '{notebook[:2]}.short_name'")
    checks = {"owner": OWNERS, "rule": KINDS, "check": CHECKS, "paper_value_source": VALUE_SOURCES}
    for name, allowed in checks.items():
        if data.get(name, "paper") not in allowed:
            raise ValueError(f"{where}: {name} {data.get(name)!r} is not one of {allowed}")
    params = data.get("parameters", {})
    if not isinstance(params, Mapping) or not all(_number(v) for v in params.values()):
        raise ValueError(f"{where}: parameters must map names to finite numbers, got {params!r}")
    if data.get("paper_number") is not None and not _number(data["paper_number"]):
        raise ValueError(f"{where}: paper_number must be a number")
    if not isinstance(data.get("repeats", ""), str):
        raise ValueError(f"{where}: repeats must be the text of the claim this one repeats")
    if data["owner"] == "workbook" and data.get("quote"):
        raise ValueError(f"{where}: a workbook claim has no paper quote")
    if not data.get("can_fail", True) and not (data.get("defect") and data.get("proposed_rule")):
        raise ValueError(f"{where}: a rule that cannot fail needs a defect and a proposed_rule")
    for h in data.get("history", ()):
        missing = {"old_rule", "new_rule", "reason", "verdict_old", "verdict_new"} - set(h)
        if missing:
            raise ValueError(f"{where}: history item lacks {sorted(missing)}")
    data["differences"] = tuple(data.get("differences", ()))
    data["history"] = tuple(data.get("history", ()))
    return Entry(**data)


@functools.lru_cache(maxsize=None)
def load_registry(directory: Path | str = CLAIMS_DIR) -> tuple[Entry, ...]:
    """Every entry of every ``<notebook>.toml`` in ``directory`` (validated; ids unique)."""
    directory = Path(directory)
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        raise ValueError(f"directory {directory} holds no registry files")
    entries: list[Entry] = []
    for path in paths:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        defaults = data.get("defaults", {})
        entries += [_entry(raw, defaults, path.stem, path) for raw in data.get("claim", [])]
    ids = [e.id for e in entries]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate registry ids: {duplicates}")
    return tuple(entries)


def notebooks(entries: Iterable[Entry] | None = None) -> set[str]:
    """The notebooks that have a registry file."""
    return {e.notebook for e in (entries if entries is not None else load_registry())}


def entry_for(notebook: str, claim_text: str, entries: Iterable[Entry] | None = None) -> Entry:
    """The one entry of ``notebook``'s claim ``claim_text``: KeyError when none matches, ValueError when
    several do."""
    if not isinstance(notebook, str) or not isinstance(claim_text, str):
        raise TypeError("notebook and claim_text must be strings")
    found = [e for e in (entries if entries is not None else load_registry()) if e.matches(notebook, claim_text)]
    if not found:
        raise KeyError(f"claim {claim_text!r} of {notebook} has no registry entry (specdec_lib/verdicts/claims/)")
    if len(found) > 1:
        raise ValueError(f"claim {claim_text!r} of {notebook} matches several entries: {[e.id for e in found]}")
    return found[0]


def rule_parameters(claim_id: str, entries: Iterable[Entry] | None = None) -> dict[str, float]:
    """The registered parameters (margins, minimum effect, alpha) of claim ``claim_id``: what a notebook passes
    to the claim's check, so that no notebook sets a margin of its own. KeyError for an unknown id."""
    found = [e for e in (entries if entries is not None else load_registry()) if e.id == claim_id]
    if not found:
        raise KeyError(f"no registry entry has id {claim_id!r} (specdec_lib/verdicts/claims/)")
    return dict(found[0].parameters)


_GAIN = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)%\s*(?:\[\s*([+-]?\d+(?:\.\d+)?)\s*,\s*([+-]?\d+(?:\.\d+)?)\s*\])?")


def size_of(ours: str, paper_number: float) -> dict[str, Any] | None:
    """Our gain beside the paper's: ``ours`` a gain as the notebooks print it (``"+6.95% [+4.33, +9.98]"``),
    ``paper_number`` the paper's gain as a fraction (0.0336). Returns ``{"size_ratio": [ratio, low, high],
    "size": ...}`` with ratio = ours / paper (its CI from our CI; low/high None without one) and size
    "smaller" (ratio < 1/2), "comparable" (within a factor of 2) or "larger" (> 2); None when ``ours`` is not
    a gain."""
    if not isinstance(ours, str):
        raise TypeError(f"ours must be a string, got {type(ours).__name__}")
    if not _number(paper_number) or paper_number == 0:
        raise ValueError(f"paper_number must be a non-zero finite number, got {paper_number!r}")
    m = _GAIN.match(ours)
    if m is None:
        return None
    est = float(m.group(1)) / 100 / paper_number
    ci = sorted(float(m.group(i)) / 100 / paper_number for i in (2, 3)) if m.group(2) else [None, None]
    size = "smaller" if est < 0.5 else "larger" if est > 2 else "comparable"
    return {"size_ratio": [round(est, 4), *(None if c is None else round(c, 4) for c in ci)], "size": size}


def record_fields(entry: Entry, record: Mapping[str, Any]) -> dict[str, Any]:
    """The registry fields of ``entry`` for its claim record ``record`` (`RECORD_FIELDS`; size only for gain
    claims with a paper number)."""
    out = {"id": entry.id, "owner": entry.owner, "source": entry.source, "quote": entry.quote, "rule": entry.rule,
           "parameters": dict(entry.parameters), "null_test": entry.null_test,
           "paper_value_source": entry.paper_value_source, "can_fail": entry.can_fail}
    if entry.wall_clock:
        out["wall_clock"] = True
    if entry.paper_number is not None:
        size = size_of(str(record.get("ours", "")), entry.paper_number)
        if size is not None:
            out.update(size)
            if size["size"] != "comparable":
                out["size_note"] = entry.size_note or "no reason recorded for a size outside a factor of 2"
    return out


def annotate(records: Iterable[Mapping[str, Any]], notebook: str, strict: bool = True,
             entries: Iterable[Entry] | None = None) -> list[dict[str, Any]]:
    """``records`` (claim dicts) with their entry's fields added; text, values and verdicts untouched.
    ``strict``: a record without an entry raises KeyError (else it is returned unchanged)."""
    entries = tuple(entries) if entries is not None else load_registry()
    out = []
    for r in records:
        try:
            entry = entry_for(notebook, r["claim"], entries)
        except KeyError:
            if strict:
                raise
            out.append(dict(r))
            continue
        fields = record_fields(entry, r)
        if entry.rule_pending:   # decided under the old rule: its rule fields stay the record's own
            fields = {k: v for k, v in fields.items() if k not in PENDING_KEEP or k not in r}
        out.append({**r, **fields})
    return out


def annotate_claims_file(path: Path | str) -> Path:
    """Rewrite a claims file (`results.save_claims`) with its records annotated (`annotate`, strict): text,
    values, verdicts and provenance unchanged."""
    import json

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    payload = json.loads(text)
    payload["claims"] = annotate(payload["claims"], payload["notebook"])
    path.write_text(json.dumps(payload, indent=1) + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
    return path


__all__ = ["Entry", "annotate_claims_file", "CLAIMS_DIR", "OWNERS", "KINDS", "CHECKS", "RECORD_FIELDS", "load_registry", "notebooks",
           "entry_for", "rule_parameters", "size_of", "record_fields", "annotate"]
