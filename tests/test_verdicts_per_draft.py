"""The index's "Verdicts per draft" section (reporting.drafts): a claim repeated with a second drafter beside
the same claim under the main draft, and every registered repeat pointing at a published claim."""

import json
from pathlib import Path

import pytest

from specdec_lib.reporting.drafts import draft_rows, drafts_section
from specdec_lib.verdicts import registry

ROOT = Path(__file__).resolve().parents[1]


def _entry(**extra):
    base = {"id": "01.x_second", "claim": "[second drafter] A claim", "owner": "paper", "source": "s",
            "quantity": "q", "rule": "superiority", "check": "gain", "rule_revision": "abc1234"}
    return registry._entry({**base, **extra}, {}, "01_asps", registry.CLAIMS_DIR / "01_asps.toml")


def _row(claim, verdict, ours, id_="", notebook="01_asps"):
    return {"notebook": notebook, "claim": claim, "verdict": verdict, "ours": ours, "id": id_}


@pytest.mark.parametrize("main, second, agreement", [
    ("reproduced", "reproduced", "same verdict"),
    ("reproduced", "not reproduced", "holds with the main draft only"),
    ("partly", "reproduced", "holds with the second drafter only"),
    ("partly", "not reproduced", "verdicts differ"),
])
def test_the_repeat_stands_beside_the_main_drafts_claim(main, second, agreement):
    rows = [_row("A claim, n = 10 (pooled)", main, "+5.00% [+1, +9]"),
            _row("A claim, n = 10 (pooled)", "reproduced", "+1%", notebook="02_traversal"),
            _row("[second drafter] A claim", second, "+2.00% [+0.5, +4]", "01.x_second")]
    (got,) = draft_rows([_entry(repeats="A claim, n = 10"), _entry(id="01.y")], rows)
    assert got["main"] == f"{main}: +5.00% [+1, +9]" and got["second"] == f"{second}: +2.00% [+0.5, +4]"
    assert got["agreement"] == agreement
    html = "\n".join(drafts_section([_entry(repeats="A claim, n = 10")], rows))
    assert "1 claim(s) run with both drafts" in html
    assert f"{int(agreement.startswith('holds'))} verdict(s) hold with one draft only" in html


def test_a_missing_row_is_shown_as_incomplete():
    (got,) = draft_rows([_entry(repeats="Another claim")], [_row("[second drafter] A claim", "reproduced", "+1%", "01.x_second")])
    assert got["main"] == "not in the reports" and got["agreement"] == "incomplete"


def test_repeats_must_be_text():
    with pytest.raises(ValueError, match="repeats"):
        _entry(repeats=3)


def test_every_registered_repeat_names_a_published_claim_of_its_notebook():
    rows = []
    for path in sorted((ROOT / "reports" / "claims").glob("*.json")):
        payload = json.loads(path.read_text(encoding="utf-8"))
        rows += [{**r, "notebook": payload["notebook"]} for r in payload["claims"]]
    repeats = [e for e in registry.load_registry() if e.repeats]
    assert len(repeats) >= 3
    for got in draft_rows(repeats, rows):
        assert got["agreement"] != "incomplete", got
    assert all(e.claim.startswith("[second drafter]") for e in repeats)
