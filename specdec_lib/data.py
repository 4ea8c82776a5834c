"""Prompt sets: the project's own prompts (data/prompts/prompts.jsonl) and named public datasets.

The project's prompts were written for this workbook: 312 prompts, 24 in each of Spec-Bench's 13 task
categories (``CATEGORIES``: writing, roleplay, reasoning, math, coding, extraction, stem, humanities,
translation (English to German / French / Romanian / Spanish), summarization (an instruction plus a
passage), qa, math_reasoning (word problems) and rag (retrieved documents plus a question)), one JSON
object per line with ``id`` (``<category>-NN``), ``category``, ``split`` and ``text``. The split is
stated in each row's ``split`` field and is stratified by category: 12 prompts of every category are
``heldout`` and 12 are ``train`` (156 / 156). In each category positions 03, 07, 11 (the original
every-fourth rule of the first 12 prompts) and 13-15, 17-19, 21-23 are held out. Drafts are trained /
acceptance vectors measured on ``train`` and speed is measured on ``heldout``.

`load_dataset_prompts` reads the public datasets the papers use (C4, OpenWebText, CNN/DailyMail,
WMT16, MT-Bench) through ``datasets`` (streaming, only the first rows are read) when a network is
there, or the same rows from a local JSONL file (``path=``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["Prompt", "CATEGORIES", "SPLITS", "PROMPTS_FILE", "DATASETS", "load_prompts", "load_dataset_prompts",
           "read_jsonl"]

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMPTS_FILE = REPO_ROOT / "data" / "prompts" / "prompts.jsonl"
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities", "translation",
              "summarization", "qa", "math_reasoning", "rag")  # Spec-Bench's task categories, in its order
SPLITS = ("train", "heldout", "all")


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str
    split: str = "train"


def read_jsonl(path: Path | str) -> list[dict]:
    """Rows of a JSON-lines file (blank lines skipped); ValueError naming the line on bad JSON."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such JSONL file: {path}")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
    return rows


def load_prompts(split: str = "heldout", category: str | None = None, path: Path | str | None = None,
                 per_category: int | None = None) -> list[Prompt]:
    """The project's prompts of ``split`` ("train" | "heldout" | "all"), optionally one ``category``;
    ``per_category`` keeps only the first that many prompts (file order) of each category."""
    if per_category is not None and int(per_category) < 0:
        raise ValueError(f"per_category must be >= 0, got {per_category}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; expected one of {CATEGORIES}")
    prompts = []
    taken: dict[str, int] = {}
    for row in read_jsonl(path or PROMPTS_FILE):
        missing = {"id", "category", "split", "text"} - set(row)
        if missing:
            raise ValueError(f"prompt row {row.get('id', row)!r} lacks {sorted(missing)}")
        p = Prompt(str(row["id"]), str(row["category"]), str(row["text"]), str(row["split"]))
        if (split == "all" or p.split == split) and (category is None or p.category == category):
            if per_category is not None and taken.get(p.category, 0) >= int(per_category):
                continue
            taken[p.category] = taken.get(p.category, 0) + 1
            prompts.append(p)
    return prompts


# ----- named public datasets ---------------------------------------------------------------------------

def _first_text(row: dict, fields: Iterable[str]) -> str:
    for f in fields:
        value = row.get(f)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value and isinstance(value[0], str):
            return value[0]  # MT-Bench: a list of turns; the first turn is the prompt
    raise ValueError(f"row has none of the text fields {list(fields)}: keys {sorted(row)}")


def _plain(fields):
    return lambda row: _first_text(row, fields)


def _summarize(row: dict) -> str:
    return "Summarize the following article in a few sentences.\n\n" + _first_text(row, ("article", "text"))


_LANG = {"de": "German", "ro": "Romanian", "fr": "French", "cs": "Czech", "fi": "Finnish", "ru": "Russian",
         "tr": "Turkish"}


def _translate(target_lang: str) -> Callable[[dict], str]:
    def make(row: dict) -> str:
        pair = row.get("translation", row)
        source = pair.get("en") if isinstance(pair, dict) else None
        if not source:
            raise ValueError(f"WMT row without an English side: keys {sorted(row)}")
        return f"Translate the following English text into {_LANG[target_lang]}: {source}"

    return make


@dataclass(frozen=True)
class DatasetSpec:
    hf_path: str
    config: str | None
    split: str
    make_text: Callable[[dict], str]
    category: str


DATASETS: dict[str, DatasetSpec] = {
    "c4": DatasetSpec("allenai/c4", "en", "validation", _plain(("text",)), "web"),
    "openwebtext": DatasetSpec("Skylion007/openwebtext", None, "train", _plain(("text",)), "web"),
    "cnn_dailymail": DatasetSpec("abisee/cnn_dailymail", "3.0.0", "test", _summarize, "summarization"),
    "wmt16_de_en": DatasetSpec("wmt/wmt16", "de-en", "test", _translate("de"), "translation"),
    "wmt16_ro_en": DatasetSpec("wmt/wmt16", "ro-en", "test", _translate("ro"), "translation"),
    "mt_bench": DatasetSpec("HuggingFaceH4/mt_bench_prompts", None, "train",
                            _plain(("prompt", "turns", "text")), "mt_bench"),
}
_ALIASES = {"wmt16": "wmt16_de_en", "cnn": "cnn_dailymail", "cnn-dailymail": "cnn_dailymail", "owt": "openwebtext",
            "mt-bench": "mt_bench", "mtbench": "mt_bench"}


def load_dataset_prompts(name: str, n: int = 100, path: Path | str | None = None, split: str | None = None,
                         max_chars: int | None = None) -> list[Prompt]:
    """The first ``n`` prompts of a named public dataset (``DATASETS``; also "wmt16" = German, "cnn").

    Rows come from ``path`` (a local JSONL file with the dataset's own fields, e.g. ``article`` for
    CNN/DailyMail, ``translation: {"en": ..., "de": ...}`` for WMT16, ``text`` for C4 / OpenWebText,
    ``prompt`` (list of turns) for MT-Bench) or, without ``path``, from the HF hub through
    ``datasets.load_dataset(..., streaming=True)``. Texts are turned into prompts the same way in both
    cases; ``max_chars`` truncates long web texts / articles (Sequoia uses the first 128 tokens of C4 /
    OpenWebText documents as prompts).
    """
    key = _ALIASES.get(name, name)
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)} (aliases {sorted(_ALIASES)})")
    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    spec = DATASETS[key]
    split = split or spec.split
    if path is not None:
        rows: Iterable[dict] = read_jsonl(path)
    else:
        try:
            # lazy: optional: named public datasets need the network and `datasets`
            import datasets

            rows = datasets.load_dataset(spec.hf_path, spec.config, split=split, streaming=True)
        except Exception as exc:  # no network, dataset moved, ...
            raise ValueError(f"could not open {spec.hf_path} ({spec.config}, {split}) through `datasets`: {exc}; "
                             f"pass path= a local JSONL file with the same fields") from exc
    prompts = []
    for i, row in enumerate(rows):
        if len(prompts) >= int(n):
            break
        text = spec.make_text(row)
        if max_chars is not None:
            text = text[: int(max_chars)]
        category = str(row.get("category", spec.category)) if key == "mt_bench" else spec.category
        prompts.append(Prompt(f"{key}-{i}", category, text, split))
    if not prompts:
        raise ValueError(f"dataset {key!r} gave no rows")
    return prompts
