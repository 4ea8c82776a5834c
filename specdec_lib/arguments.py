"""Argument checks shared by the public entry points (decoding, exact laws, trees, model loading).

Each check returns the value in its canonical form or raises an error that names the argument:
`ArgumentTypeError` (a TypeError that is also a ValueError, so callers catching either see it) for
a value of the wrong type, ValueError for a value of the right type outside its range. Pure
functions: no imports beyond the standard library, no side effects.
"""

from __future__ import annotations

import math
import numbers
import operator

__all__ = ["ArgumentTypeError", "check_int", "check_real", "check_choice", "check_model", "check_seed",
           "check_list", "check_probabilities", "check_temperature", "check_count", "SEED_LOW", "SEED_HIGH"]

SEED_LOW, SEED_HIGH = -(2 ** 63), 2 ** 64 - 1
"""The seeds ``torch.Generator.manual_seed`` accepts (int64 or uint64)."""


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a TypeError; also a ValueError, as every bad argument is)."""


def _type_name(value) -> str:
    return type(value).__name__


def _is_bool(value) -> bool:
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (either bound optional). Integers, numpy integers and
    0-d integer tensors pass; a bool, a float (8.0 included), a string or None is an
    `ArgumentTypeError` naming ``name``; an integer out of range a ValueError."""
    if _is_bool(value):
        raise ArgumentTypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        out = int(operator.index(value))
    except TypeError:
        raise ArgumentTypeError(f"{name} must be an integer, got {value!r} ({_type_name(value)})") from None
    if low is not None and out < low:
        raise ValueError(f"{name} must be >= {low}, got {out}")
    if high is not None and out > high:
        raise ValueError(f"{name} must be <= {high}, got {out}")
    return out


def check_real(name: str, value, low: float | None = None, high: float | None = None, finite: bool = True,
               low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a float in the interval from ``low`` to ``high`` (closed unless ``low_open`` /
    ``high_open``; either bound optional), finite unless ``finite=False``. Real numbers and 0-d
    numeric tensors pass; None, a string or a bool is an `ArgumentTypeError` naming ``name``; NaN,
    an infinity (with ``finite``) or a value out of range a ValueError."""
    if _is_bool(value):
        raise ArgumentTypeError(f"{name} must be a real number, got the bool {value!r}")
    numeric = isinstance(value, numbers.Real) or (
        getattr(value, "ndim", None) == 0 and hasattr(value, "__float__") and not isinstance(value, (str, bytes)))
    if not numeric:
        raise ArgumentTypeError(f"{name} must be a real number, got {value!r:.60} ({_type_name(value)})")
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{name} must be a real number, got {value!r:.60}: {exc}") from None
    if math.isnan(out) or (finite and math.isinf(out)):
        raise ValueError(f"{name} must be a finite number, got {out}")
    if low is not None and (out < low or (low_open and out == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {out}")
    if high is not None and (out > high or (high_open and out == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {out}")
    return out


def check_choice(name: str, value, choices) -> str:
    """``value`` if it is one of the strings ``choices``; `ArgumentTypeError` naming ``name`` for a
    non-string (a list of names included), ValueError listing the choices for an unknown name."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a name (a string), got {value!r:.60} ({_type_name(value)}); "
                                f"one of {sorted(choices)}")
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {sorted(choices)}")
    return value


def check_seed(name: str, value) -> int:
    """``value`` as an int a ``torch.Generator`` can be seeded with (`SEED_LOW` .. `SEED_HIGH`)."""
    return check_int(name, value, SEED_LOW, SEED_HIGH)


def check_count(name: str, value) -> int:
    """``value`` as an int >= 1: a number of prompts, tokens, threads or seconds."""
    return check_int(name, value, low=1)


def check_temperature(name: str, value) -> float:
    """``value`` as a finite float >= 0 (0: greedy)."""
    return check_real(name, value, low=0.0)


def check_list(name: str, value, check_item) -> list:
    """``value`` as a non-empty list, each item passed through ``check_item(f"{name}[i]", item)``.
    `ArgumentTypeError` naming ``name`` for anything but a list or tuple, ValueError for an empty one."""
    if not isinstance(value, (list, tuple)):
        raise ArgumentTypeError(f"{name} must be a list, got {value!r:.60} ({_type_name(value)})")
    if not value:
        raise ValueError(f"{name} must not be empty: give at least one value, or leave it unset for the default")
    return [check_item(f"{name}[{i}]", item) for i, item in enumerate(value)]


def check_probabilities(name: str, value) -> list[float]:
    """``value`` as a non-empty list of floats in [0, 1] (any sequence, array or tensor of numbers): an
    `ArgumentTypeError` naming ``name`` for text or a non-sequence, a ValueError naming the entry
    (``name[i]``) out of range or not finite, or for an empty sequence."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a sequence of numbers, got {value!r:.60} ({_type_name(value)})")
    out = [check_real(f"{name}[{i}]", x, 0.0, 1.0) for i, x in enumerate(value)]
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


_MODEL_ATTRS = ("vocab_size", "max_context", "name", "device")


def check_model(name: str, obj, role: str = "LanguageModel", attrs: tuple[str, ...] | None = None) -> None:
    """`ArgumentTypeError` naming ``name`` unless ``obj`` is a loaded model: a `models.LanguageModel` or
    an object with its interface (``session`` or ``paired_sessions``, ``vocab_size``, ``max_context``,
    ``name``, ``device``; only ``attrs`` when given). A model name says to call ``load_model`` first."""
    if isinstance(obj, (str, bytes)) or hasattr(obj, "__fspath__"):
        raise ArgumentTypeError(f"{name} must be a loaded {role}, got the name {str(obj)!r}: call "
                                f"specdec_lib.load_model({str(obj)!r}) first and pass the model")
    missing = [a for a in (_MODEL_ATTRS if attrs is None else attrs) if not hasattr(obj, a)]
    if attrs is None and not (hasattr(obj, "session") or hasattr(obj, "paired_sessions")):
        missing.insert(0, "session")
    if missing:
        hint = (" (a toy LM of specdec_lib.models.synthetic belongs to the exact harness, specdec_lib.exact)"
                if hasattr(obj, "probs") else "")
        raise ArgumentTypeError(f"{name} must be a {role} (from specdec_lib.load_model), got a "
                                f"{_type_name(obj)} without {', '.join(missing)}{hint}; call load_model first")
