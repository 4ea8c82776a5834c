"""specdec_lib: lossless speculative decoding — draft trees, verifiers, decoding, models, theory and exact laws.

    import specdec_lib as sd
    target = sd.load_model("smollm2-135m-instruct")
    draft = sd.load_model("smollm2-135m-int4", target=target)
    out = sd.speculative_generate(target, draft, prompt_ids, shape="binary:3", verifier="traversal")

The public API is the names below. The reproduction harness (experiments, verdicts, reporting) and the
draft training (training) are subpackages imported on their own.
"""

from .progress import quiet_known_warnings as _quiet_known_warnings, quiet_tqdm_import as _quiet_tqdm_import

# In a Jupyter kernel without ipywidgets, the first import of tqdm.auto (ours or transformers') warns on stderr;
# import it once here, quietly (text bars are the fallback). Does nothing outside a kernel.
_quiet_tqdm_import()
# Narrow filters for known-harmless deprecation messages (specdec_lib.progress.KNOWN_HARMLESS).
_quiet_known_warnings()

from . import exact, theory  # noqa: E402  (the exact-law harness and the closed forms, as modules)
from .decoding import autoregressive_generate, speculative_generate  # noqa: E402
from .models import load_model  # noqa: E402
from .tree import DraftTree  # noqa: E402
from .verifiers import NOT_LOSSLESS, VERIFIERS, exact_law, expected_tokens, verify  # noqa: E402

__version__ = "0.1.0"

__all__ = ["load_model", "speculative_generate", "autoregressive_generate", "DraftTree", "verify", "exact_law",
           "expected_tokens", "VERIFIERS", "NOT_LOSSLESS", "exact", "theory", "__version__"]
