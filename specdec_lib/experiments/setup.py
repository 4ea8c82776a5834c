"""Profiles and settings, the model pair (real or toy) and the prompts of an experiment."""

from __future__ import annotations

import ast
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..data import load_prompts
from ..models import load_model
from ..models.synthetic import random_markov_pair

PROFILES = ("smoke", "default", "full")
TARGET_MODEL = "smollm2-135m-instruct"
DRAFT_MODEL = "smollm2-135m-draft"
PROFILE_DTYPES = {"default": "bfloat16"}
"""Each profile's default weight dtype (a notebook's own table or its ``dtype`` parameter overrides it).
The default profile runs the offline pair in bfloat16: on this project's CPU (AMX-BF16) a forward over
n tokens costs far less than in float32 once n > 1 (t(64)/t(1) = 3.0 against 5.7,
data/hardware/cpu_*_smollm2-135m-instruct.json): notebooks 02, 05, 06 and 07 ran 1.4-1.7x faster
than in float32 with the same settings, and trees are cheaper to verify. Target and draft share the
dtype, so the autoregressive baseline is the same model as the one speculative decoding reproduces.
A CPU without a native bfloat16 matrix unit (`results.cpu_features`: "none") emulates it, and there float32 is
the faster dtype (t(64) 303 ms against 816 ms, data/hardware/cpu_without_bf16_unit/); the default stays bfloat16
so that every machine computes the same numbers, and the machine record says which unit ran them.
None (full): `load_model`'s device default. `settings` records the choice in a notebook's resolved
parameters (so the saved results name it); `load_pair` applies it for direct callers."""


# ----------------------------------------------------------------------------------------- settings

def parse_param(value: Any) -> Any:
    """A parameter given on the command line as text (``"[4, 8]"``, ``"0.6,1.0"``, ``"3"``) -> Python value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("none", "null", ""):
        return None
    try:
        value = ast.literal_eval(text)
        return list(value) if isinstance(value, tuple) else value
    except (ValueError, SyntaxError):
        pass
    if "," in text:
        return [parse_param(part) for part in text.split(",") if part.strip()]
    return text


def settings(profile: str, defaults: Mapping[str, Mapping[str, Any]], **given: Any) -> dict[str, Any]:
    """Resolve a notebook's parameters: the profile's defaults, overridden by every non-None given value.

    ``defaults`` maps a profile name to its default values (the notebook's own table); the given values
    are the notebook's parameters (None = "the profile's choice"). ``dtype`` falls back to
    `PROFILE_DTYPES`. Text values are parsed with `parse_param` and must have the form of the profile's
    default (`check_like_default`). Unknown profiles raise ValueError (unknown parameter names are refused
    before a run, by `report_notebooks.check_parameters`).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    if profile not in defaults:
        raise ValueError(f"this notebook has no defaults for profile {profile!r}")
    out = {"dtype": PROFILE_DTYPES.get(profile), **defaults[profile]}
    for name, value in given.items():
        value = parse_param(value)
        if value is not None:
            if defaults[profile].get(name) is not None:
                check_like_default(name, value, defaults[profile][name])
            out[name] = value
    out["profile"] = profile
    os.environ.setdefault("SPECDEC_PROFILE", profile)  # results.py: smoke output stays apart
    return out


POSITIVE_COUNTS = frozenset({"num_prompts", "tree_prompts", "gap_prompts", "category_prompts", "category_tokens",
                             "max_new_tokens", "copies", "tree_contexts", "sequence_contexts", "sequence_copies",
                             "max_index", "rows_tokens", "timing_tokens", "sizes", "mc_samples"})
"""Parameters whose integers (themselves, their list items or dict values) count something and must be >= 1;
every other integer must be >= 0 (0 may mean "skip", as for ``timing_prompts``)."""


def check_like_default(name: str, value: Any, default: Any) -> None:
    """ValueError naming ``name`` when a given value does not have the form of the profile's default.

    A notebook's parameters arrive as text (papermill, ``reproduce -p``) and are used minutes or hours into
    the run; checking them here turns a late TypeError into an immediate, clear error. The rule: an integer
    default takes an integer (not a bool, not 2.5; >= 1 for `POSITIVE_COUNTS`, else >= 0), a float default a
    number >= 0, text takes text, a list a list whose items have the form of the default's first item, a dict
    a dict whose values have the form of the default's values under the same keys (other keys are left to
    the notebook).
    """
    def fail(expected: str) -> None:
        raise ValueError(f"parameter {name}: expected {expected}, got {value!r} ({type(value).__name__})")

    if isinstance(default, bool):
        if not isinstance(value, bool):
            fail("true or false")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            fail("an integer like the default " + repr(default))
        least = 1 if name.split("[")[0] in POSITIVE_COUNTS else 0  # sizes['chain'] counts as sizes
        if value < least:
            fail(f"an integer >= {least}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0:
            fail("a number >= 0 like the default " + repr(default))
    elif isinstance(default, str):
        if not isinstance(value, str):
            fail("text like the default " + repr(default))
    elif isinstance(default, list):
        if not isinstance(value, list):
            fail(f"a list like the default {default!r} (e.g. -p {name} '{default!r}')")
        if default and default[0] is not None:
            for item in value:
                check_like_default(name, item, default[0])
    elif isinstance(default, dict):
        if not isinstance(value, dict):
            fail(f"a dict like the default {default!r}")
        for key, item in value.items():
            if default.get(key) is not None:
                check_like_default(f"{name}[{key!r}]", item, default[key])


def settings_table(cfg: Mapping[str, Any]):
    """The resolved settings as a two-column DataFrame (for display)."""
    return pd.DataFrame({"parameter": list(cfg), "value": [str(v) for v in cfg.values()]})


# ----------------------------------------------------------------------------------------- model pair

@dataclass
class Pair:
    """The (target, draft) pair of an experiment: ``kind`` is "toy" (ToyLM) or "hf" (LanguageModel)."""
    target: Any
    draft: Any
    kind: str
    name: str
    load_s: float = 0.0
    context_free: bool = False  # toy models whose rows do not depend on the context (trees can be cached)

    @property
    def vocab_size(self) -> int:
        return int(self.target.vocab_size)

    @property
    def eos_token_id(self) -> int | None:
        return self.target.eos_token_id


def toy_pair(vocab_size: int = 8, mismatch: float = 0.5, seed: int = 0, concentration: float = 0.5) -> Pair:
    """A random bigram (target, draft) toy pair without EOS (`synthetic.random_markov_pair`)."""
    target, draft = random_markov_pair(vocab_size, mismatch, seed, eos=False, concentration=concentration)
    return Pair(target, draft, "toy", f"toy bigram V={vocab_size} mismatch={mismatch} seed={seed}")


def load_pair(profile: str, target_model: str | None = None, draft_model: str | None = None,
              device: str | None = None, dtype: str | None = None, toy_vocab: int = 8,
              toy_mismatch: float = 0.5, seed: int = 0) -> Pair:
    """The pair of a profile: smoke -> `toy_pair`; default/full -> `load_model` of both names
    (default: the offline target and the project's distilled draft ``smollm2-135m-draft``) in ``dtype``
    (None: the profile's `PROFILE_DTYPES` entry, else `load_model`'s device default)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    if profile == "smoke":
        return toy_pair(toy_vocab, toy_mismatch, seed)

    t0 = time.perf_counter()
    dtype = dtype or PROFILE_DTYPES.get(profile)
    target = load_model(target_model or TARGET_MODEL, device=device, dtype=dtype)
    draft = load_model(draft_model or DRAFT_MODEL, device=device, dtype=dtype, target=target)
    if int(target.vocab_size) != int(draft.vocab_size):
        raise ValueError(f"target {target.name} and draft {draft.name} have different vocabularies "
                         f"({target.vocab_size} vs {draft.vocab_size})")
    return Pair(target, draft, "hf", f"{target.name} / {draft.name}", time.perf_counter() - t0)


def with_draft(pair: Pair, draft_model: str | None, device: str | None = None, dtype: str | None = None) -> Pair:
    """The same target with another draft: ``draft_model`` loaded by `load_model` for ``pair``'s target
    (on ``device`` in ``dtype``; None: the target's own). ``None`` or the pair's own draft name returns ``pair``
    itself. The notebooks use it to time end to end with a cheap draft (wall clock) while their
    tokens-per-step sections run on the draft in the papers' acceptance regime. A toy pair has no other
    drafts: a name raises ValueError, as does a draft with another vocabulary."""
    if draft_model is None or draft_model == getattr(pair.draft, "name", None):
        return pair
    if not isinstance(draft_model, str) or not draft_model:
        raise ValueError(f"draft_model must be a model name or None, got {draft_model!r}")
    if pair.kind != "hf":
        raise ValueError(f"draft_model={draft_model!r}: a {pair.kind} pair has no other drafts (use a real pair)")
    t0 = time.perf_counter()
    draft = load_model(draft_model, device=device or getattr(pair.target, "device", None),
                       dtype=dtype or getattr(pair.target, "dtype", None), target=pair.target)
    if int(draft.vocab_size) != pair.vocab_size:
        raise ValueError(f"draft_model={draft_model!r} has vocabulary {draft.vocab_size}, the target {pair.vocab_size}")
    return Pair(pair.target, draft, "hf", f"{pair.target.name} / {draft.name}", time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------- prompts

@dataclass(frozen=True)
class PromptIds:
    """An encoded prompt: id, category, token ids (LongTensor [n]) and the source text ('' for toys)."""
    id: str
    category: str
    ids: torch.Tensor
    text: str = ""


def prompts_for(pair: Pair, num_prompts: int, categories: Sequence[str] | None = None, split: str = "heldout",
                seed: int = 0, toy_length: int = 3) -> list[PromptIds]:
    """``num_prompts`` prompts per category.

    toy pair: random token tuples of length ``toy_length``, categories named as given (default one
    category "toy"); hf pair: `specdec_lib.data.load_prompts(split, category)` encoded with the target's
    chat template, the first ``num_prompts`` of each category (all categories when None); a category with
    fewer prompts than ``num_prompts`` is a ValueError naming it.
    """
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    if pair.kind == "toy":
        rng = np.random.default_rng(seed)
        cats = list(categories) if categories else ["toy"]
        return [PromptIds(f"{c}-{i}", c, torch.as_tensor(rng.integers(0, pair.vocab_size, toy_length),
                                                          dtype=torch.long))
                for c in cats for i in range(num_prompts)]

    if categories is None:
        cats = sorted({p.category for p in load_prompts(split)})
    else:
        cats = list(categories)
    out = []
    for c in cats:
        available = load_prompts(split, category=c)
        if not available:
            raise ValueError(f"no prompts of category {c!r} in split {split!r}")
        if len(available) < num_prompts:  # never fewer prompts than asked, silently
            raise ValueError(f"num_prompts={num_prompts}: category {c!r} of split {split!r} has only "
                             f"{len(available)} prompts")
        out.extend(PromptIds(p.id, p.category, pair.target.encode(p.text), p.text) for p in available[:num_prompts])
    return out


def spread_prompts(prompts: Sequence[PromptIds], count: int, name: str = "count") -> list[PromptIds]:
    """``count`` of ``prompts`` taken at an even stride (every k-th, k = len // count), so that a list ordered
    by category gives each category its share; ``name`` is the caller's argument named in the errors."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {count!r}")
    if count > len(prompts):
        raise ValueError(f"{name} ({count}) exceeds the {len(prompts)} prompts to choose from")
    return list(prompts[:: len(prompts) // count][:count])


def prompt_categories(split: str = "heldout") -> list[str]:
    """The categories of the project's prompt set."""
    return sorted({p.category for p in load_prompts(split)})
