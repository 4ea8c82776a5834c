"""specdec_lib: models, drafters, verifiers, theory and measurement for lossless speculative decoding."""

from .progress import quiet_known_warnings as _quiet_known_warnings, quiet_tqdm_import as _quiet_tqdm_import

__version__ = "0.1.0"

# In a Jupyter kernel without ipywidgets, the first import of tqdm.auto (ours or transformers') warns on stderr;
# import it once here, quietly (text bars are the fallback). Does nothing outside a kernel.
_quiet_tqdm_import()
# Narrow filters for known-harmless deprecation messages (specdec_lib.progress.KNOWN_HARMLESS).
_quiet_known_warnings()
