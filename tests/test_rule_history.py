"""The index's rule changes (reporting.rule_history) and the size column of the claims tables
(reporting.html.size_cell, the registry's size_note)."""

import pytest

from specdec_lib.reporting.html import claims_summary_html, size_cell
from specdec_lib.reporting.index import build_index
from specdec_lib.reporting.rule_history import rule_change_rows, rule_changes_section
from specdec_lib.verdicts import registry


def _entry(**extra):
    base = {"id": "01.x", "claim": "A claim", "owner": "paper", "source": "s", "quantity": "q", "rule": "superiority",
            "check": "gain", "rule_revision": "abc1234"}
    return registry._entry({**base, **extra}, {}, "01_asps", registry.CLAIMS_DIR / "01_asps.toml")


def test_every_history_item_is_a_row_and_the_latest_shows_the_published_verdict():
    history = ({"old_rule": "r0", "new_rule": "r1", "reason": "why 1", "verdict_old": "partly", "verdict_new": "reproduced"},
               {"old_rule": "r1", "new_rule": "r2", "reason": "why 2", "verdict_old": "reproduced",
                "verdict_new": "not reproduced", "defect": "it could not fail"})
    e = _entry(history=history)
    rows = rule_change_rows([e], [{"id": "01.x", "verdict": "not reproduced"}])
    assert [r["new_rule"] for r in rows] == ["r1", "r2"]
    assert rows[0]["verdict_now"] == "" and rows[1]["verdict_now"] == "not reproduced"
    assert rows[1]["revision"] == "abc1234" and rows[1]["defect"] == "it could not fail"
    html = "\n".join(rule_changes_section([e], []))
    assert "2 rule change(s)" in html and "it could not fail" in html and "0 rule(s) still marked" in html


def test_a_rule_still_unable_to_fail_is_listed():
    e = _entry(can_fail=False, defect="d", proposed_rule={"text": "t", "parameters": {}})
    assert "1 rule(s) still marked as unable to fail: 01.x" in "\n".join(rule_changes_section([e], []))


def test_the_registry_rule_changes_reach_the_index(tmp_path):
    (tmp_path / "claims").mkdir()
    build_index(tmp_path, notebook_dir=None)
    text = (tmp_path / "index.html").read_text(encoding="utf-8")
    n = sum(len(e.history) for e in registry.load_registry())
    assert f"{n} rule change(s)" in text


def test_size_cell_shows_ratio_ci_label_and_the_reason_outside_a_factor_of_two():
    assert size_cell({"ours": "x"}) == "–"
    cell = size_cell({"size_ratio": [3.1, 2.0, 4.5], "size": "larger", "size_note": "a draft at 0.70 <acceptance>"})
    assert cell.startswith("3.10 [2.00, 4.50] larger") and "&lt;acceptance&gt;" in cell
    assert size_cell({"size_ratio": [1.2, None, None], "size": "comparable"}) == "1.20 comparable"


def test_size_note_is_recorded_only_outside_a_factor_of_two():
    e = _entry(paper_number=0.05, size_note="the draft's acceptance is twice the paper's")
    assert registry.record_fields(e, {"ours": "+6.00% [+4.00, +8.00]"})["size"] == "comparable"
    assert "size_note" not in registry.record_fields(e, {"ours": "+6.00% [+4.00, +8.00]"})
    far = registry.record_fields(e, {"ours": "+16.00% [+12.00, +20.00]"})
    assert far["size"] == "larger" and far["size_note"] == "the draft's acceptance is twice the paper's"
    bare = registry.record_fields(_entry(paper_number=0.05), {"ours": "+16.00% [+12.00, +20.00]"})
    assert bare["size_note"] == "no reason recorded for a size outside a factor of 2"


def test_the_report_table_has_the_size_column():
    claims = [{"paper": "p", "claim": "c", "paper_value": "+5%", "ours": "+16.00% [+12.00, +20.00]",
               "verdict": "reproduced", "size_ratio": [3.2, 2.4, 4.0], "size": "larger", "size_note": "why"}]
    text = claims_summary_html("01", claims)
    assert "<th>ours / paper</th>" in text and "3.20 [2.40, 4.00] larger" in text


def test_a_derived_paper_value_is_labelled_as_the_workbooks():
    from specdec_lib.reporting.html import paper_value_cell

    assert paper_value_cell({"paper_value": "1.8", "paper_value_source": "paper"}) == "1.8"
    assert "workbook derivation" in paper_value_cell({"paper_value": "1.8", "paper_value_source": "workbook derivation"})
    text = claims_summary_html("01", [{"paper": "p", "claim": "c", "paper_value": "61/25", "ours": "2.44",
                                       "verdict": "reproduced", "paper_value_source": "workbook derivation"}])
    assert "61/25 <small" in text


def test_refresh_claims_summary_rewrites_only_the_claims_block(tmp_path):
    from specdec_lib.reporting.html import refresh_claims_summary

    claims = [{"paper": "p", "claim": "c", "paper_value": "+5%", "ours": "+6.00% [+4.00, +8.00]", "verdict": "reproduced"}]
    block = claims_summary_html("01", claims).replace("id='claims-summary' class='specdec-claims-summary'",
                                                     'class="specdec-claims-summary" id="claims-summary"')
    page = tmp_path / "r.html"
    page.write_text(f"<html><body><div class='cell'>{block}\n</div><p>the notebook</p></body></html>", encoding="utf-8")
    refresh_claims_summary(page, "01", [{**claims[0], "size_ratio": [1.2, 0.8, 1.6], "size": "comparable"}])
    text = page.read_text(encoding="utf-8")
    assert "1.20 [0.80, 1.60] comparable" in text and text.count("Claims at a glance") == 1
    assert text.endswith("\n</div><p>the notebook</p></body></html>")
    bare = tmp_path / "bare.html"
    bare.write_text("<html></html>", encoding="utf-8")
    with pytest.raises(ValueError, match="no claims block"):
        refresh_claims_summary(bare, "01", claims)


def test_wall_clock_claims_timed_beside_another_notebook_are_labelled():
    from specdec_lib.reporting.contention import contention_note, label_wall_clock, overlapping_runs, record_overlaps

    status = {"a": {"status": "ok", "started": "2026-12-02T10:00:00+00:00", "duration_s": 600},
              "b": {"status": "ok", "started": "2026-12-02T10:05:00+00:00", "duration_s": 600},
              "c": {"status": "ok", "started": "2026-12-02T11:00:00+00:00", "duration_s": 60.4},
              "d": {"status": "failed", "started": "2026-12-02T10:00:00+00:00", "duration_s": 5},
              "e": {"status": "ok", "started": "2026-12-02T11:01:00+00:00", "duration_s": 60}}
    # c's end falls 0.4 s after e's start (written to the second): back to back, not beside each other
    assert overlapping_runs(status) == {"a": ["b"], "b": ["a"], "c": [], "e": []}
    # a's record keeps b after b is rerun later, alone: the run of a did share the CPU with b
    kept = record_overlaps(status)
    kept["b"] = {"status": "ok", "started": "2026-12-02T12:00:00+00:00", "duration_s": 60}
    assert overlapping_runs(record_overlaps(kept)) == {"a": ["b"], "b": [], "c": [], "e": []}
    claims = [{"claim": "x", "wall_clock": True}, {"claim": "y"}]
    labelled = label_wall_clock(claims, "a", status)
    assert labelled[0]["timed_beside"] == ["b"] and "timed_beside" not in labelled[1]
    assert "b ran on the same CPU" in contention_note(labelled[0])
    assert contention_note(label_wall_clock(claims, "c", status)[0]) == ""
    assert "ran on the same CPU" in claims_summary_html("a", [{**labelled[0], "paper": "p", "paper_value": "-",
                                                               "ours": "1.1x", "verdict": "partly"}])


def test_the_registry_marks_the_wall_clock_claims():
    marked = {e.id for e in registry.load_registry() if e.wall_clock}
    assert {"01.ptt", "02.throughput_below_acceptance", "04.wallclock_gain", "06.tokens_per_second"} <= marked
