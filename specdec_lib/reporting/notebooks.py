"""The workbook's notebooks as the report runner sees them: which there are, how a requested name
resolves, and the parameters each declares in its cell tagged ``parameters`` (checked before a run)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Iterable, Mapping

from .results import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"


def list_notebooks(notebook_dir: Path | str = NOTEBOOK_DIR) -> list[str]:
    """Names (without ``.ipynb``) of the workbook's notebooks, in run order; ValueError naming
    ``notebook_dir`` when it is not a directory."""
    folder = Path(notebook_dir)
    if not folder.is_dir():
        raise ValueError(f"notebook_dir {str(folder)!r} is not a directory")
    return sorted(p.stem for p in folder.glob("*.ipynb") if not p.name.startswith("."))


def resolve_notebooks(names: Iterable[str] | None, notebook_dir: Path | str = NOTEBOOK_DIR) -> list[str]:
    """Match requested names (``04_block``, ``04``, ``block`` or ``04_block.ipynb``) against the notebooks.
    ValueError for an unknown name, a missing ``notebook_dir`` or one without notebooks."""
    known = list_notebooks(notebook_dir)
    if not known:
        raise ValueError(f"notebook_dir {str(notebook_dir)!r} holds no notebooks (*.ipynb)")
    if not names:
        return known
    out = []
    for name in names:
        stem = Path(name).stem
        hits = [k for k in known if k == stem] or [k for k in known if k.split("_", 1)[0] == stem
                                                   or k.split("_", 1)[-1] == stem]
        if len(hits) != 1:
            raise ValueError(f"unknown notebook {name!r}; known: {', '.join(known)}")
        out.extend(h for h in hits if h not in out)
    return out


class _NotALiteral:
    def __repr__(self) -> str:
        return "<not a literal>"


NOT_A_LITERAL = _NotALiteral()


def notebook_parameters(name: str, notebook_dir: Path | str = NOTEBOOK_DIR) -> dict[str, Any]:
    """The names assigned in notebook ``name``'s cell tagged ``parameters`` with their default values
    (`NOT_A_LITERAL` for a default that is an expression). ValueError when there is no such cell."""
    # lazy: notebook tooling is only needed when reports are built
    import nbformat

    path = Path(notebook_dir) / f"{name}.ipynb"
    if not path.is_file():
        raise ValueError(f"no notebook {path}")
    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if not cells:
        raise ValueError(f"notebook {name} has no cell tagged 'parameters': it takes no parameters")
    out: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    out[target.id] = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError):
                    out[target.id] = NOT_A_LITERAL
    return out


def check_parameters(notebooks: Iterable[str], parameters: Mapping[str, Any] | None,
                     notebook_dir: Path | str = NOTEBOOK_DIR) -> dict[str, dict[str, Any]]:
    """Per notebook, the ``parameters`` it declares (in its ``parameters`` cell).

    ValueError, before anything runs, for ``profile`` (it is chosen with ``profile=`` / ``--profile``,
    which also picks the models and the reports folder) and for a name that none of ``notebooks``
    declares (the message lists the names they do declare)."""
    parameters = dict(parameters or {})
    names = list(notebooks)
    if "profile" in parameters:
        raise ValueError("parameters: 'profile' is not a notebook parameter to override; choose the profile "
                         "with profile= (the --profile option), which also picks the reports folder")
    declared = {n: notebook_parameters(n, notebook_dir) if parameters else {} for n in names}
    known = sorted(set().union(*declared.values()) - {"profile"}) if declared else []
    unknown = sorted(k for k in parameters if not any(k in d for d in declared.values()))
    if unknown:
        raise ValueError(f"parameters: unknown name(s) {', '.join(map(repr, unknown))} for notebook(s) "
                         f"{', '.join(names)}; known: {', '.join(known) or 'none'}")
    return {n: {k: v for k, v in parameters.items() if k in declared[n]} for n in names}
