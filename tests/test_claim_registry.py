"""The claims registry (specdec_lib.verdicts.registry): every reported claim has exactly one entry with its
fields, ids are unique, parameters are numbers, every null test exists, quotes are verbatim, sizes are
computed by a pure function, records carry the fields and the index counts only the papers' claims."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_lib.reporting import index, results
from specdec_lib.verdicts import catalogue, registry

ROOT = Path(__file__).resolve().parents[1]
PAPERS_DIR = Path("/work/shared/papers")
PAPER_FILES = {"Hu & Huang": "asps_tree_monte_carlo.txt", "Weng et al.": "traversal_verification.txt",
               "Kobus & Gunduz": "erss_exponential_races.txt", "Sun et al.": "block_verification.txt",
               "Chen et al.": "sequoia.txt"}
# quoted from the abstract of arXiv 2601.05724 (v1 and v2), which is not in the shared papers' folder
HSD_ABSTRACT_QUOTES = ("04.hsd_alg2_lossless", "04.hsd_vs_token", "04.hsd_vs_block", "04.hsd_released_vs_block",
                       "06.hsd_above_block", "06.hsd_released_above_block")
ENTRIES = registry.load_registry()
BY_ID = {e.id: e for e in ENTRIES}


def _rows():
    for path in sorted((ROOT / "reports" / "claims").glob("*.json")):
        payload = json.loads(path.read_text(encoding="utf-8"))
        for row in payload["claims"]:
            yield payload["notebook"], row


def test_every_reported_claim_matches_exactly_one_entry_and_carries_its_fields():
    rows = list(_rows())
    assert len(rows) >= 107
    matched = set()
    for notebook, row in rows:
        found = [e for e in ENTRIES if e.matches(notebook, row["claim"])]
        assert len(found) == 1, (notebook, row["claim"], [e.id for e in found])
        entry = found[0]
        matched.add(entry.id)
        expected = registry.record_fields(entry, row)
        for name in ("id", "owner", "source", "quote", "rule", "parameters", "null_test", "paper_value_source"):
            assert name in row, (entry.id, name)
        if entry.rule_pending:   # decided under the old rule: the rule's own fields are the run's
            expected = {k: v for k, v in expected.items() if k not in registry.PENDING_KEEP}
        assert {k: row.get(k) for k in expected} == expected, entry.id   # annotation up to date
        if entry.paper_number is not None and entry.rule == "superiority" and registry.size_of(row["ours"], 1.0):
            assert row["size"] in ("smaller", "comparable", "larger") and len(row["size_ratio"]) == 3, entry.id
    # an entry no committed report shows is a profile's alternative (not applicable), a claim the notebook's code
    # writes that has not been run yet, or retired (the notebook no longer writes it)
    for e in ENTRIES:
        written = e.claim.split("{")[0] in _notebook_source(e.notebook)
        if e.retired:
            assert not written, e.id
        else:
            assert e.id in matched or e.rule == "not_applicable" or written, e.id


def _notebook_source(name: str) -> str:
    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_ids_unique_parameters_numbers_and_owner_fields():
    ids = [e.id for e in ENTRIES]
    assert len(ids) == len(set(ids))
    for e in ENTRIES:
        assert re.fullmatch(r"\d\d\.[a-z0-9_]+", e.id) and e.id[:2] == e.notebook[:2]
        assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in e.parameters.values()), e.id
        assert e.owner in ("paper", "workbook") and e.source and e.quantity and e.rule_revision, e.id
        if e.owner == "workbook":
            assert e.source == "this workbook" and not e.quote, e.id
        else:
            assert e.source != "this workbook", e.id
        if e.rule not in ("not_applicable",):
            assert e.check != "not_applicable", e.id
        for h in e.history:
            assert all(h[k] for k in ("old_rule", "new_rule", "reason", "verdict_old", "verdict_new")), e.id


def test_registry_rule_agrees_with_the_catalogue():
    for notebook, row in _rows():
        entry = registry.entry_for(notebook, row["claim"])
        try:
            kind = catalogue.rule_for(row["claim"], notebook)
        except KeyError:   # not-applicable claims and texts that start with a notebook field
            continue
        assert kind == entry.rule, (entry.id, kind, entry.rule)
        assert catalogue.registry_entry(row["claim"], notebook) is entry


def test_every_null_test_exists():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/test_claim_rules_fail.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = set(out.stdout.split())
    for e in ENTRIES:
        assert e.null_test in collected, e.null_test


def test_the_defects_named_by_the_review_are_marked():
    named = {"02.throughput_below_acceptance", "03.c4_specinfer_above_sequence", "04.gain_every_category",
             "04.wallclock_gain", "01.ptt", "01.atn_saturates", "05.figure3_vs_specinfer_topk", "05.figure3_vs_spectr"}
    marked = {e.id for e in ENTRIES if not e.can_fail}
    fixed = {e.id for e in ENTRIES if e.can_fail and e.history and e.history[-1].get("defect")}
    assert named <= marked | fixed, named - marked - fixed   # each still marked, or its rule replaced with the reason
    for i in named & fixed:
        assert BY_ID[i].rule_revision and BY_ID[i].history[-1]["verdict_new"], i
    c6 = BY_ID["03.c6_converge"]   # its data-chosen start (k = 4) replaced by every drafted k >= 2
    assert "k = 4" in c6.history[0]["new_rule"] and c6.history[-1].get("defect") and "k >= 2" in c6.history[-1]["new_rule"]


def test_workbook_derivations_and_workbook_claims_are_labelled():
    for i in ("04.figure3_ccdf", "04.toy_expected_tau", "01.fixture_b", "01.table1_coupling"):
        assert BY_ID[i].paper_value_source == "workbook derivation", i
    for i in ("05.ft_close", "05.predicted_speedups"):
        assert BY_ID[i].owner == "workbook", i


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_quotes_are_verbatim_from_the_papers():
    if not PAPERS_DIR.is_dir():
        pytest.skip("the papers' text is not on this machine")
    texts = {k: _norm((PAPERS_DIR / f).read_text(encoding="utf-8", errors="replace")) for k, f in PAPER_FILES.items()}
    for e in ENTRIES:
        if not e.quote:
            continue
        paper = next((k for k in PAPER_FILES if e.source.startswith(k)), None)
        if paper is None:   # HSD's text is not among the shared papers: its abstract quotes are checked by hand
            assert e.source.startswith("Zhou et al. (arXiv 2601.05724)") and e.id in HSD_ABSTRACT_QUOTES, e.id
            continue
        assert _norm(e.quote) in texts[paper], e.id


def test_size_of():
    s = registry.size_of("+6.95% [+4.33, +9.98]", 0.0336)
    assert s["size"] == "larger" and s["size_ratio"] == [pytest.approx(2.0685, abs=1e-4), pytest.approx(1.2887, abs=1e-4),
                                                          pytest.approx(2.9702, abs=1e-4)]
    assert registry.size_of("+16.22% [+12.36, +20.61]", 0.083)["size"] == "comparable"
    assert registry.size_of("+1.0% [+0.2, +1.8]", 0.07)["size"] == "smaller"
    assert registry.size_of("-2.35% [-2.73, -1.98]", 0.05)["size"] == "smaller"
    assert registry.size_of("+3%", 0.03) == {"size_ratio": [1.0, None, None], "size": "comparable"}
    assert registry.size_of("max |difference| 1e-15", 0.05) is None
    with pytest.raises(ValueError, match="paper_number"):
        registry.size_of("+1%", 0.0)
    with pytest.raises(TypeError, match="ours"):
        registry.size_of(0.01, 0.05)


def test_entry_for_and_annotate():
    with pytest.raises(KeyError, match="no registry entry"):
        registry.entry_for("04_block", "a claim nobody makes")
    with pytest.raises(TypeError):
        registry.entry_for("04_block", None)
    rec = results.claim("block", "BE(block) > BE(token), γ = 8, T = 1.0", "+8.30%", "+16.22% [+12.36, +20.61]", True)
    out = registry.annotate([rec.__dict__], "04_block")[0]
    assert out["id"] == "04.block_gain_gamma8" and out["size"] == "comparable" and out["verdict"] == "reproduced"
    assert out["claim"] == rec.claim and out["ours"] == rec.ours
    assert registry.annotate([{"claim": "unknown"}], "04_block", strict=False) == [{"claim": "unknown"}]


def test_save_claims_writes_the_registry_fields_and_refuses_unregistered_claims(tmp_path):
    good = results.claim("block", "Gain grows with γ (T = 1.0)", "+3.4% → +8.3%", "+9.28% [+6.38, +12.41]", True)
    results.save_claims("04_block", [good], directory=tmp_path, strict=True)
    (record,) = results.load_claims(tmp_path / "04_block.json")
    assert record["id"] == "04.gain_grows_gamma" and record["rule"] == "trend" and record["owner"] == "paper"
    assert record["null_test"].endswith("[04.gain_grows_gamma]") and record["parameters"] == {"min_effect": 0.005}
    bad = results.claim("block", "a claim nobody registered", "x", "y", True)
    with pytest.raises(KeyError, match="no registry entry"):
        results.save_claims("04_block", [good, bad], directory=tmp_path, strict=True)
    results.save_claims("04_block", [bad], directory=tmp_path)          # an explicit folder: not strict
    assert set(results.load_claims(tmp_path / "04_block.json")[0]) == set(results.CLAIM_FIELDS)
    results.save_claims("01_unregistered", [bad], directory=tmp_path, strict=True)   # no registry file
    with pytest.raises(ValueError, match="owner"):
        results.Claim("p", "c", "", "", "reproduced", owner="someone")


def test_index_counts_only_the_papers_claims():
    rows = [{"paper": "A", "claim": "a1", "ours": "1", "verdict": "reproduced", "notebook": "01", "owner": "paper"},
            {"paper": "A", "claim": "w1", "ours": "2", "verdict": "not reproduced", "notebook": "01", "owner": "workbook"},
            {"paper": "B", "claim": "b1", "ours": "3", "verdict": "partly", "notebook": "02"}]
    html = "\n".join(index._paper_counts_section(rows))
    counts = html[:html.index("</table>")]
    assert "not reproduced</th>" in counts and "<td>1</td></tr>" in counts
    all_row = next(line for line in counts.splitlines() if "all papers" in line)
    assert all_row.endswith("<td>2</td></tr>")   # the workbook's claim is not counted
    assert "id='workbook-claims'" in html and "w1" in html[html.index("workbook-claims"):]
