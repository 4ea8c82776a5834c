"""The KV cache's keyword and output name across transformers versions.

transformers 5.2x renamed the models' ``past_key_values`` argument and output to ``cache``; the old name
still works there but warns, and goes in 5.40. The library hands its caches over with `with_cache` and
reads them back with `cache_of`, so it runs on versions before and after the rename without the warning.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any


@functools.lru_cache(maxsize=None)
def _cache_keyword(forward) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def with_cache(model, cache) -> dict[str, Any]:
    """Keyword arguments handing ``cache`` to ``model``'s forward under the name that forward takes."""
    return {_cache_keyword(type(model).forward): cache}


def cache_of(output) -> Any:
    """The KV cache of a transformers model output, under either name (None when it holds none)."""
    for name in ("cache", "past_key_values"):
        if name in output:
            return output[name]
    return None


__all__ = ["with_cache", "cache_of"]
