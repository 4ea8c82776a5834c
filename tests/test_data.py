"""The project's prompt set and the named-dataset loader (local JSONL path; no network)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specdec_lib.data import CATEGORIES, load_dataset_prompts, load_prompts, read_jsonl, PROMPTS_FILE


def test_project_prompts_cover_every_category_and_split():
    everything = load_prompts("all")
    assert len(everything) >= 80
    assert len({p.id for p in everything}) == len(everything)
    assert all(p.text.strip() and p.split in ("train", "heldout") for p in everything)
    by_cat = Counter(p.category for p in everything)
    assert set(by_cat) == set(CATEGORIES)
    held = load_prompts("heldout")
    train = load_prompts("train")
    assert len(held) + len(train) == len(everything)
    assert 0.2 <= len(held) / len(everything) <= 0.3
    for cat in CATEGORIES:  # stratified: about a quarter of every category is held out
        h = len(load_prompts("heldout", cat))
        assert h >= 1 and abs(h - by_cat[cat] / 4) <= 1
    assert all(p.category == "code" for p in load_prompts("train", "code"))
    langs = " ".join(p.text for p in load_prompts("all", "translation"))
    assert all(lang in langs for lang in ("German", "Romanian", "French"))
    assert all("\n\n" in p.text for p in load_prompts("all", "summarization"))  # instruction + passage
    assert len(read_jsonl(PROMPTS_FILE)) == len(everything)


def test_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        load_prompts("test")
    with pytest.raises(ValueError, match="category"):
        load_prompts("all", "poetry")
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
