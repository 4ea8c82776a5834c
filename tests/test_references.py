"""Every repository path that the code, tests, docs and notebooks cite must exist.

Scanned: ``specdec_lib/**/*.py``, ``tests/**/*.py``, ``docs/**/*.md``, ``README.md``, ``Makefile`` and the
cell sources of ``notebooks/*.ipynb`` (outputs are not scanned). A reference is a repository-relative
path of one of these forms:

* ``specdec_lib/....py`` or a folder ``specdec_lib/.../``, ``tests/....py``, ``docs/....md``,
  ``notebooks/....ipynb``, ``data/...`` (file or folder);
* ``specs/<paper>.md``: the digests now live in ``docs/methods/<paper>.md``, so these always count as
  missing until rewritten;
* ``ARCHITECTURE.md``: only ``docs/ARCHITECTURE.md`` exists, so a bare one is missing; one written as a
  relative link (``./`` or ``../``) is resolved from the citing file's folder and must stay inside the
  repository (``../ARCHITECTURE.md`` in ``docs/methods/`` is fine, ``../shared/ARCHITECTURE.md`` is not);
* ``tests/<file>.py::<name>``: the file must exist and define ``<name>`` (a function or class).

Not references (kept out on purpose): URLs and anything else preceded by ``/`` or a word character
(``https://.../tests/x.py``, ``~/.cache/.../data/x``, ``<run_dir>/data/progress.json``), globs and
templates (``*``, ``<...>``, ``{...}``, ``...`` in the path), and the folders that runs create
(`GENERATED`).

``missing_references()`` returns the list; the test fails with one line per missing reference.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Output folders written by runs (smoke runs, ``-p`` runs); cited as destinations, not committed.
GENERATED = {"data/results/custom", "data/results/smoke"}

_LEAD = r"(?<![\w./~<>{}*-])"          # not inside a longer path, URL or template
_TAIL = r"(?![\w*<>{}])"
_PATH = re.compile(
    _LEAD + r"("
    r"(?:specdec_lib|tests|docs|notebooks|data|specs)/[\w./*<>{}-]*[\w/*<>{}]"
    r")" + _TAIL)
_ARCH = re.compile(r"(?<![\w-])((?:\.\./)*(?:[\w.-]+/)*ARCHITECTURE\.md)")
_TESTNAME = re.compile(_LEAD + r"(tests/[\w/]+\.py)::(\w+)")
_SUFFIX = {"specdec_lib": (".py", "/"), "tests": (".py", "/"), "docs": (".md", "/"),
           "notebooks": (".ipynb", "/"), "specs": (".md",), "data": None}


@dataclass(frozen=True)
class Reference:
    source: str      # the citing file, repository-relative
    line: int        # 1-based line in that file (for notebooks: the line of the .ipynb file)
    target: str      # the cited path (with ``::name`` for test names)
    why: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.target} ({self.why})"


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for pattern in ("specdec_lib/**/*.py", "tests/**/*.py", "docs/**/*.md", "notebooks/*.ipynb"):
        files.extend(p for p in ROOT.glob(pattern) if ".ipynb_checkpoints" not in p.parts)
    files.extend(ROOT / name for name in ("README.md", "Makefile") if (ROOT / name).exists())
    this = Path(__file__).resolve()      # this module's examples are made up on purpose
    return sorted(p for p in set(files) if p.resolve() != this)


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) pairs to scan; for a notebook, only its cells' source lines, numbered by
    where they sit in the .ipynb file."""
    text = path.read_text(encoding="utf-8")
    raw = text.splitlines()
    if path.suffix != ".ipynb":
        return list(enumerate(raw, 1))
    out: list[tuple[int, str]] = []
    cursor = 0
    for cell in json.loads(text).get("cells", []):
        source = cell.get("source", [])
        for piece in (source if isinstance(source, list) else source.splitlines(True)):
            for part in piece.splitlines() or [""]:
                needle = json.dumps(part, ensure_ascii=False)[1:-1]
                line = next((i for i in range(cursor, len(raw)) if needle in raw[i]), None)
                if line is None:
                    line = next((i for i in range(len(raw)) if needle in raw[i]), cursor)
                else:
                    cursor = line
                out.append((line + 1, part))
    return out


def _is_template(path: str) -> bool:
    return any(ch in path for ch in "*<>{}") or "..." in path


def _exists(path: str) -> bool:
    target = ROOT / path.rstrip("/")
    return target.exists()


def _defines(test_file: str, name: str) -> bool:
    text = (ROOT / test_file).read_text(encoding="utf-8")
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", text, re.M) is not None


def _check_line(source: str, number: int, text: str) -> list[Reference]:
    found: list[Reference] = []
    for match in _PATH.finditer(text):
        path = match.group(1)
        if _is_template(path):
            continue
        path = path.rstrip(".")
        top = path.split("/", 1)[0]
        suffixes = _SUFFIX[top]
        if suffixes is not None and not path.endswith(suffixes):
            continue                     # e.g. "notebooks/00-06", "docs/." in prose
        if top == "data" and path.rstrip("/") in GENERATED:
            continue
        if top == "specs":
            found.append(Reference(source, number, path, "specs/ is outside the repository; "
                                   "the digest is docs/methods/" + path.split("/", 1)[1]))
        elif not _exists(path):
            found.append(Reference(source, number, path, "no such path"))
    for match in _ARCH.finditer(text):
        path = match.group(1)
        if path == "docs/ARCHITECTURE.md":
            continue
        if path.startswith(("./", "../")):   # a relative link: resolve it from the citing file's folder
            target = (ROOT / source).parent.joinpath(path).resolve()
            if ROOT not in target.parents:
                found.append(Reference(source, number, path, "outside the repository"))
            elif not target.exists():
                found.append(Reference(source, number, path, "no such path"))
        elif not _exists(path):
            found.append(Reference(source, number, path, "only docs/ARCHITECTURE.md exists"))
    for match in _TESTNAME.finditer(text):
        test_file, name = match.groups()
        if _exists(test_file) and not _defines(test_file, name):
            found.append(Reference(source, number, f"{test_file}::{name}",
                                   f"{test_file} defines no {name}"))
    return found


def missing_references() -> list[Reference]:
    """Every reference in the scanned files to a repository path (or test name) that does not exist."""
    missing: list[Reference] = []
    for path in _scanned_files():
        source = path.relative_to(ROOT).as_posix()
        for number, text in _lines(path):
            missing.extend(_check_line(source, number, text))
    return missing


def test_every_cited_path_exists():
    missing = missing_references()
    assert not missing, f"{len(missing)} references to missing paths:\n" + "\n".join(map(str, missing))


def test_checker_flags_and_ignores_the_right_things():
    """The rules on made-up lines: missing files, specs/, bare ARCHITECTURE.md, unknown test names
    are flagged; URLs, globs, templates, cache paths and docs/ARCHITECTURE.md are not."""
    spec = "specs/" + "asps.md"  # assembled, so that no checker of this file reads it as a real citation
    flagged = [r.target for r in _check_line("x", 1,
               f"see {spec} §2.4, tests/no_such_test_file.py, ARCHITECTURE.md, "
               "../shared/ARCHITECTURE.md and tests/test_references.py::test_no_such_name")]
    assert flagged == [spec, "tests/no_such_test_file.py", "ARCHITECTURE.md",
                       "../shared/ARCHITECTURE.md", "tests/test_references.py::test_no_such_name"]
    clean = ("https://github.com/o/r/blob/main/tests/missing.py ~/.cache/x/data/missing.json "
             "<run_dir>/data/progress.json data/shard_*.safetensors data/models/<name> specs/*.md "
             "docs/ARCHITECTURE.md, tests/test_references.py::missing_references, "
             "data/results/custom/, "
             "notebooks/00-06 and specdec_lib/tree.py.")
    assert _check_line("x", 1, clean) == []
    assert _check_line("docs/methods/x.md", 1, "[layout](../ARCHITECTURE.md)") == []
