"""Tree shapes as parents lists: the shape strings of `tree.parse_shape` ("chain:8", "binary:4", ...) and
Sequoia's DP trees ("sequoia:N", "sequoia:NxD") built from a positional acceptance vector, given or
measured for a draft and stored in its record ``draft.json``.

Decoding takes a resolved shape from here, so it reads neither the theory nor a draft's record itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from .models.offline import DRAFT_DIR, DRAFT_JSON_FILE
from .theory import sequoia_tree
from .arguments import ArgumentTypeError, check_probabilities
from .tree import is_level_order, level_order, parse_shape, shape_size, validate_parents

__all__ = ["measured_acceptance_vector", "resolve_shape", "shape_nodes", "is_sequoia", "check_acceptance_vector"]


def measured_acceptance_vector(temperature: float | None = None,
                               directory: str | Path | None = None) -> list[float]:
    """Sequoia's positional acceptance vector measured for a distilled draft, read from its record
    ``draft.json`` in ``directory`` (default: the offline draft, ``data/models/smollm2-135m-draft``).

    The distillation (`distill`) stores it as ``evaluation.sequoia_positional_acceptance``, measured at
    ``evaluation.temperature`` (one temperature: it is returned whatever ``temperature`` is asked for).
    Records may instead hold ``acceptance_vectors`` (temperature string -> list; the nearest temperature
    to ``temperature`` is used, the highest when None) or ``acceptance_vector`` (a list). ValueError
    naming the file when there is no record or it holds no vector."""
    path = Path(DRAFT_DIR if directory is None else directory) / DRAFT_JSON_FILE
    if not path.is_file():
        raise ValueError(f"no measured acceptance vector: {path} does not exist; pass acceptance_vector=")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"no measured acceptance vector: cannot read {path}: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError(f"no measured acceptance vector: {path} does not hold a JSON object")

    def vector_of(value, where: str) -> list[float] | None:
        if value is None:
            return None
        if not isinstance(value, list) or not value or \
                not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            raise ValueError(f"{path}: {where} must be a non-empty list of numbers, got {value!r:.80}")
        return [float(x) for x in value]

    evaluation = record.get("evaluation")
    if isinstance(evaluation, dict):
        vector = vector_of(evaluation.get("sequoia_positional_acceptance"),
                           "evaluation.sequoia_positional_acceptance")
        if vector is not None:
            return vector
    vectors = record.get("acceptance_vectors")
    if isinstance(vectors, dict) and vectors:
        if temperature is None:
            key = max(vectors, key=float)
        else:
            key = min(vectors, key=lambda k: abs(float(k) - float(temperature)))
        return vector_of(vectors[key], f"acceptance_vectors[{key!r}]")
    vector = vector_of(record.get("acceptance_vector"), "acceptance_vector")
    if vector is not None:
        return vector
    raise ValueError(f"{path} holds no measured acceptance vector (evaluation.sequoia_positional_acceptance); "
                     f"pass acceptance_vector=, or measure one with theory.positional_acceptance")


def is_sequoia(shape) -> bool:
    """Whether ``shape`` is a Sequoia spec ("sequoia:N" / "sequoia:NxD"), the one kind that reads an
    acceptance vector."""
    return isinstance(shape, str) and shape.strip().lower().startswith("sequoia:")


def check_acceptance_vector(shape, acceptance_vector) -> list[float] | None:
    """None, or ``acceptance_vector`` as floats in [0, 1] (`arguments.check_probabilities`) for a Sequoia
    ``shape``, the one kind that reads it: with any other shape it would be ignored, so it is a ValueError."""
    if acceptance_vector is None:
        return None
    if not is_sequoia(shape):
        raise ValueError(f"acceptance_vector is only read by Sequoia shapes ('sequoia:N', 'sequoia:NxD'); "
                         f"shape {shape!r:.60} ignores it: drop acceptance_vector or use a Sequoia shape")
    return check_probabilities("acceptance_vector", acceptance_vector)


def _sequoia_spec(shape: str) -> tuple[int, int | None]:
    spec = shape.strip().lower()[len("sequoia:"):]
    try:
        size, depth = (int(x) for x in spec.split("x")) if "x" in spec else (int(spec), None)
    except ValueError:
        raise ValueError(f"bad Sequoia shape {shape!r}; expected 'sequoia:N' or 'sequoia:NxD'") from None
    if size < 1 or (depth is not None and depth < 1):
        raise ValueError(f"bad Sequoia shape {shape!r}: size and depth must be >= 1")
    return size, depth


def shape_nodes(shape) -> int:
    """Number of nodes (root included) of a shape as `resolve_shape` takes it, computed without building
    it: ``len(parents)`` for a parents list, N for "sequoia:N(xD)", `tree.shape_size` for a spec."""
    if isinstance(shape, (list, tuple)):
        return len(shape)
    if is_sequoia(shape):
        return _sequoia_spec(shape)[0]
    if isinstance(shape, str):
        return shape_size(shape)
    raise ArgumentTypeError(f"shape must be a spec string ('chain:8') or a parents list, got {shape!r:.60}")


def resolve_shape(shape, acceptance_vector: Sequence[float] | None = None,
                  temperature: float | None = None, record_dir: str | Path | None = None) -> list[int]:
    """A tree shape as a parents list (root included).

    ``shape``: a parents list of integers (relabelled to level order if needed), a `tree.parse_shape`
    spec ("chain:8", "kary:2x3", "specinfer:4x5", "binary:4", "batch:3x4", "parents:-1,0,0"), or
    "sequoia:N" / "sequoia:NxD" (Sequoia's DP tree of size N, depth unbounded or at most D, root
    included, from ``acceptance_vector`` or the one measured for the draft whose record is in
    ``record_dir``, see `measured_acceptance_vector`). ``acceptance_vector`` goes with Sequoia shapes only
    (`check_acceptance_vector`).
    """
    acceptance_vector = check_acceptance_vector(shape, acceptance_vector)
    if isinstance(shape, (list, tuple)):
        try:
            parents = validate_parents(shape)
        except ValueError as exc:  # a wrong entry type stays a TypeError
            raise type(exc)(f"shape {list(shape)!r:.80} is not a parents list: {exc}") from None
    elif is_sequoia(shape):
        size, depth = _sequoia_spec(shape)
        vector = acceptance_vector if acceptance_vector is not None \
            else measured_acceptance_vector(temperature, record_dir)
        parents, _ = sequoia_tree(vector, size=size, depth=depth)
        parents = [int(p) for p in parents]
    elif isinstance(shape, str):
        parents = [int(p) for p in parse_shape(shape)]
    else:
        raise ValueError(f"unknown tree shape {shape!r}")
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents[1:], 1)):
        raise ValueError(f"shape {shape!r} is not a parents list with parents[0] == -1 and parents[i] < i")
    # drafting grows one level per draft forward, so nodes are relabelled breadth first
    return parents if is_level_order(parents) else level_order(parents)
