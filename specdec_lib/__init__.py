"""specdec_lib: models, drafters, verifiers, theory and measurement for lossless speculative decoding."""

__version__ = "0.1.0"
