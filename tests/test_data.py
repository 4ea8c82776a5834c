"""The project's prompt set and the named-dataset loader (local JSONL path; no network)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specdec_lib.data import CATEGORIES, load_dataset_prompts, load_prompts, read_jsonl, PROMPTS_FILE


def test_project_prompts_cover_every_category_and_split():
    everything = load_prompts("all")
    assert len(everything) == 312 and len(CATEGORIES) == 13
    assert CATEGORIES == ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
                          "translation", "summarization", "qa", "math_reasoning", "rag")  # Spec-Bench's order
    assert len({p.id for p in everything}) == len(everything)
    assert len({p.text for p in everything}) == len(everything)
    assert all(p.text.strip() and p.split in ("train", "heldout") for p in everything)
    assert all(p.id.startswith(p.category + "-") for p in everything)
    by_cat = Counter(p.category for p in everything)
    assert by_cat == {cat: 24 for cat in CATEGORIES}
    held = load_prompts("heldout")
    train = load_prompts("train")
    assert len(held) == len(train) == 156 and len(held) + len(train) == len(everything)
    assert not {p.id for p in held} & {p.id for p in train}
    for cat in CATEGORIES:  # stratified: half of every category is held out
        assert len(load_prompts("heldout", cat)) == 12 and len(load_prompts("train", cat)) == 12
    assert all(p.category == "coding" for p in load_prompts("train", "coding"))
    langs = " ".join(p.text for p in load_prompts("all", "translation"))
    assert all(lang in langs for lang in ("German", "Romanian", "French", "Spanish"))
    for cat in ("summarization", "extraction", "rag"):  # instruction + passage / documents
        assert all("\n\n" in p.text for p in load_prompts("all", cat)), cat
    assert all("Question:" in p.text and "Document 2:" in p.text for p in load_prompts("all", "rag"))
    assert all(p.text.startswith("You are") for p in load_prompts("all", "roleplay"))
    assert max(len(p.text.split()) for p in everything) <= 120  # short enough for a small chat model
    assert len(read_jsonl(PROMPTS_FILE)) == len(everything)


def test_per_category_keeps_the_first_prompts_of_each_category():
    two = load_prompts("heldout", per_category=2)
    assert len(two) == 2 * len(CATEGORIES)
    assert Counter(p.category for p in two) == {cat: 2 for cat in CATEGORIES}
    assert [p.id for p in two if p.category == "writing"] == [p.id for p in load_prompts("heldout", "writing")[:2]]
    assert load_prompts("all", "math", per_category=0) == []
    assert len(load_prompts("train", per_category=100)) == 156


def test_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        load_prompts("test")
    with pytest.raises(ValueError, match="category"):
        load_prompts("all", "poetry")
    with pytest.raises(ValueError, match="category"):
        load_prompts("all", "code")  # renamed to "coding"
    with pytest.raises(ValueError, match="per_category"):
        load_prompts("all", per_category=-1)
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset_prompts("imagenet")


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_named_datasets_from_local_jsonl(tmp_path):
    cnn = _write(tmp_path / "cnn.jsonl", [{"article": f"Story number {i}. Something happened.", "highlights": "x"}
                                          for i in range(5)])
    got = load_dataset_prompts("cnn_dailymail", n=3, path=cnn)
    assert len(got) == 3 and got[0].category == "summarization"
    assert got[1].text.startswith("Summarize") and got[1].text.endswith("Story number 1. Something happened.")
    wmt = _write(tmp_path / "wmt.jsonl", [{"translation": {"en": "The cat sleeps.", "ro": "Pisica doarme."}}])
    (p,) = load_dataset_prompts("wmt16_ro_en", n=10, path=wmt)
    assert p.text == "Translate the following English text into Romanian: The cat sleeps."
    assert load_dataset_prompts("wmt16", path=wmt)[0].text.endswith("into German: The cat sleeps.")
    c4 = _write(tmp_path / "c4.jsonl", [{"text": "A" * 500, "url": "u"}, {"text": "short"}])
    web = load_dataset_prompts("c4", n=5, path=c4, max_chars=100)
    assert [len(p.text) for p in web] == [100, 5] and web[0].id == "c4-0"
    mt = _write(tmp_path / "mt.jsonl", [{"prompt": ["First turn?", "Second turn?"], "category": "writing"}])
    (q,) = load_dataset_prompts("mt_bench", path=mt)
    assert q.text == "First turn?" and q.category == "writing"
    bad = _write(tmp_path / "bad.jsonl", [{"url": "no text"}])
    with pytest.raises(ValueError, match="text fields"):
        load_dataset_prompts("openwebtext", path=bad)
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="broken.jsonl:1"):
        load_dataset_prompts("c4", path=tmp_path / "broken.jsonl")
