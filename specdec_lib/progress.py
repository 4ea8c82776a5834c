"""Progress bars that are widgets in JupyterLab and silent in rendered reports; quiet model loading.

* `tqdm` -- the library's progress bar: ``tqdm.auto`` (an ipywidgets bar in JupyterLab, text in a terminal),
  or a disabled bar when `enabled` says no. Every bar of the library goes through it.
* `enabled` -- False when ``$SPECDEC_PROGRESS`` is ``0`` or ``$TQDM_DISABLE`` is set: the report runner
  (`specdec_lib.reporting.reproduce.run_notebook`) sets both in the notebook kernel's environment, so nothing is drawn on
  the kernel's stderr and the HTML reports carry no progress-bar debris.
* `quiet_loading` -- a context for model loading: transformers' "Loading weights" bars (and the Hub's
  download bars) are switched off for its duration (a one-shot bar over the checkpoint's tensors says
  nothing useful), and ``tqdm.auto`` is imported without its "IProgress not found" warning.

* `quiet_known_warnings` -- narrow filters for known-harmless messages: transformers >= 5.2x renamed the
  ``past_key_values`` argument and output to ``cache`` and warns about the old name. The library's own calls
  use whichever name the installed version takes (`specdec_lib.models.kv_cache`, tested to warn nothing); the
  filters stay for callers inside transformers that may still use the old one. Installed when ``specdec_lib``
  is imported.

Only known-harmless output is silenced here; anything else a notebook writes to stderr under the runner is
moved out of the report into ``logs/<notebook>.stderr.txt`` and counted in the index (`specdec_lib.reporting.reproduce`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from typing import Any, Iterator

ENV_VAR = "SPECDEC_PROGRESS"
"""Set to ``0`` to switch every progress bar of the library off (the report runner does)."""

_OFF = ("0", "false", "no", "off")


def enabled(requested: bool = True) -> bool:
    """Whether a bar asked for (``requested``) is drawn: not when ``$SPECDEC_PROGRESS`` is 0/false/off or
    ``$TQDM_DISABLE`` is set to anything but 0/false/off (tqdm's own switch)."""
    if not requested:
        return False
    if os.environ.get(ENV_VAR, "").strip().lower() in _OFF:
        return False
    tqdm_disable = os.environ.get("TQDM_DISABLE", "").strip().lower()
    return not (tqdm_disable and tqdm_disable not in _OFF)


def _auto_tqdm():
    """``tqdm.auto.tqdm``, imported without the "IProgress not found" warning that tqdm emits (once, at
    import) in a Jupyter kernel without ipywidgets -- it then falls back to text bars, which is fine."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        # lazy: tqdm.auto probes for Jupyter widgets at import
        from tqdm.auto import tqdm as auto
    return auto


def quiet_tqdm_import() -> None:
    """Import ``tqdm.auto`` once without its ipywidgets warning, so later importers (transformers) stay quiet.
    Only does something inside a Jupyter kernel (elsewhere tqdm.auto never warns)."""
    if "ipykernel" in sys.modules:
        _auto_tqdm()


def tqdm(*args: Any, disable: bool = False, **kwargs: Any):
    """A progress bar: ``tqdm.auto.tqdm(*args, **kwargs)``, or a disabled ``tqdm.std.tqdm`` (which still
    iterates and counts) when ``disable`` is True or progress is switched off (`enabled`)."""
    if disable or not enabled():
        # lazy: tqdm.auto probes for Jupyter widgets at import
        from tqdm.std import tqdm as std

        return std(*args, disable=True, **kwargs)
    return _auto_tqdm()(*args, **kwargs)


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Switch transformers' and huggingface_hub's progress bars off while loading a model (restored after)."""
    quiet_tqdm_import()
    try:
        # lazy: transformers takes seconds to import; only model loading needs it
        from transformers.utils import logging as hf_logging
    except ImportError:  # transformers is a dependency; loaders without it have nothing to silence
        yield
        return
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on and enabled():
            hf_logging.enable_progress_bar()


class _DropMessages(logging.Filter):
    """A logging filter that drops records whose message starts with one of ``prefixes``."""

    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)


KNOWN_HARMLESS = {
    # transformers.utils.generic: the `past_key_values` -> `cache` rename (kwarg and output attribute)
    "logging": {"transformers.utils.generic": ("`past_key_values`/`cache_params` are deprecated",)},
    # transformers' deprecate_kwarg on the models' forward: the same rename, as a FutureWarning
    "warnings": [(FutureWarning, r"`past_key_values` is deprecated and will be removed")],
}
"""The messages `quiet_known_warnings` drops: logger name -> message prefixes; (category, message regex)."""

_installed = False


def quiet_known_warnings() -> None:
    """Drop the `KNOWN_HARMLESS` messages (idempotent; other warnings of the same loggers still show)."""
    global _installed
    if _installed:
        return
    for name, prefixes in KNOWN_HARMLESS["logging"].items():
        logging.getLogger(name).addFilter(_DropMessages(tuple(prefixes)))
    for category, message in KNOWN_HARMLESS["warnings"]:
        warnings.filterwarnings("ignore", message=message, category=category)
    _installed = True


__all__ = ["ENV_VAR", "KNOWN_HARMLESS", "enabled", "tqdm", "quiet_loading", "quiet_tqdm_import",
           "quiet_known_warnings"]
