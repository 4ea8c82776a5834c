"""Hugging Face causal LMs behind one small wrapper: loading, chat encoding and tree scoring.

`LanguageModel` wraps a ``transformers`` causal LM and its tokenizer. Decoding talks to it through
a `KVSession`: the fixed tokens so far (prompt + emitted), a prefix KV cache, and tree forwards.

Tree attention (SpecInfer Sec. 4.2; Sequoia Sec. 3): a whole draft tree is scored in ONE forward
pass. With C tokens already in the KV cache and n new tokens, the attention mask is a float tensor
``[1, 1, n, C + n]`` that is 0 where a token may attend (the whole cached prefix, the not-yet-cached
fixed tokens before it, its tree ancestors and itself) and -inf elsewhere, and
``position_ids = (position of the root) + depth``. Afterwards `KVSession.commit` keeps only the
accepted path in the cache (crop + gather of the accepted nodes' keys and values).

Loading (`load_hf`): any HF id or local directory, through ``AutoModelForCausalLM`` and
``AutoTokenizer`` without ``trust_remote_code``; safetensors weights only (``use_safetensors``).
The offline default pair lives in `specdec_lib.models.offline`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from ..arguments import ArgumentTypeError
from ..progress import quiet_loading
from .cpu_linear import use_small_batch_linear
from .kv_cache import with_cache
from .names import OFFLINE_NAMES

__all__ = ["LanguageModel", "KVSession", "load_hf", "tree_attention_mask", "resolve_dtype", "resolve_device",
           "check_dtype", "check_device", "check_hf_name", "check_tokenizer_files"]

HUB_TIMEOUT_S = 10.0
"""Seconds the one hub lookup of `load_hf` may take before the model counts as unreachable."""

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


_MODEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
DEVICE_TYPES = ("cpu", "cuda", "mps")
"""Device types a model can be loaded on (``meta`` holds no weights; others are not supported here)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``"bfloat16"`` / ``torch.bfloat16`` / None -> torch dtype or None. ValueError naming ``dtype``
    for a dtype a model cannot compute in here (``torch.float8_e4m3fn``, integer or complex dtypes);
    `arguments.ArgumentTypeError` for neither a dtype nor a name (``16``)."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if dtype not in _MODEL_DTYPES:
            raise ValueError(f"dtype {dtype} is not supported for a model; expected one of "
                             f"{[str(d) for d in _MODEL_DTYPES]} or a name of {sorted(_DTYPES)}")
        return dtype
    if not isinstance(dtype, str):
        raise ArgumentTypeError(f"dtype must be a torch dtype or a name, got {dtype!r} ({type(dtype).__name__}); "
                         f"expected one of {sorted(_DTYPES)}")
    try:
        return _DTYPES[dtype.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}") from None


def check_tokenizer_files(directory: Path) -> None:
    """ValueError unless the model folder ``directory`` holds a tokenizer (one of `TOKENIZER_FILES`);
    without one, transformers' own error is a misleading hint to install sentencepiece."""
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"model folder {str(directory)!r} has no tokenizer files (none of "
                         f"{', '.join(TOKENIZER_FILES)}); save the tokenizer there too "
                         f"(tokenizer.save_pretrained(folder))")


def resolve_device(device) -> torch.device:
    """``device`` as a ``torch.device`` (None: CUDA when available, else CPU). ValueError naming
    ``device`` when it is no device name, or names a CUDA / MPS device this machine does not have
    (instead of torch's AssertionError deep inside ``.to(device)``)."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"device {device!r} is not a torch device (e.g. 'cpu', 'cuda', 'cuda:1'): {exc}") from None
    if dev.type == "meta":
        raise ValueError(f"device {str(device)!r}: a meta device holds no weights, so a model there cannot "
                         f"generate; use one of {DEVICE_TYPES}")
    if dev.type not in DEVICE_TYPES:
        raise ValueError(f"device {str(device)!r}: device type {dev.type!r} is not supported; use one of {DEVICE_TYPES}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine (torch {torch.__version__}); "
                             f"use device='cpu' or device=None")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"device {device!r}: MPS is not available on this machine; use device='cpu'")
    return dev


def check_dtype(name: str, value):
    """`resolve_dtype` of ``value`` with the error naming the argument ``name`` (e.g. ``--dtype``)."""
    try:
        return resolve_dtype(value)
    except ValueError as exc:  # ArgumentTypeError included: the type of the error is kept
        raise type(exc)(f"{name}: {exc}") from None


def check_device(name: str, value):
    """`resolve_device` of ``value`` (None: None, the loader's default) with the error naming ``name``."""
    if value is None:
        return None
    try:
        return resolve_device(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


class LanguageModel:
    """A causal LM and its tokenizer.

    Attributes: ``model`` (the HF module, in eval mode), ``tokenizer``, ``name``, ``vocab_size``
    (rows of the output head = width of every distribution), ``device`` (where inputs go),
    ``max_context`` (maximum positions), ``small_batch_linears`` (how many linear layers use
    `cpu_linear.SmallBatchLinear`: all of them for a float32 model on a CPU, else 0).
    """

    def __init__(self, model, tokenizer, name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        head = model.get_output_embeddings()
        self.vocab_size = int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)
        self.device = model.get_input_embeddings().weight.device
        ctx = getattr(model.config, "max_position_embeddings", None)
        self.max_context = int(ctx) if ctx else 2048
        on_cpu_fp32 = self.device.type == "cpu" and self.dtype == torch.float32
        self.small_batch_linears = use_small_batch_linear(model) if on_cpu_fp32 else 0

    def __repr__(self) -> str:
        n = sum(p.numel() for p in self.model.parameters())
        return (f"LanguageModel({self.name!r}, {n / 1e6:.1f}M params, vocab {self.vocab_size}, "
                f"{self.dtype}, {self.device}, small-batch linears: {self.small_batch_linears})")

    @property
    def dtype(self) -> torch.dtype:
        return self.model.get_input_embeddings().weight.dtype

    @property
    def eos_token_id(self) -> int | None:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            eos = getattr(self.model.config, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if eos else None
        return None if eos is None else int(eos)

    def encode(self, text: str, chat: bool = True) -> torch.Tensor:
        """Token ids (LongTensor [n], on CPU) of ``text``; with ``chat`` and a tokenizer that has a chat
        template, ``text`` is the user turn and the assistant's turn is opened (instruct models)."""
        if not isinstance(text, str) or not text:
            raise ValueError("encode needs a non-empty string")
        if chat and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
        else:
            ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
        return ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def session(self, prompt_ids) -> "KVSession":
        """A fresh KV session whose fixed tokens are ``prompt_ids`` (nothing cached yet)."""
        return KVSession(self, prompt_ids)

    @torch.no_grad()
    def logits(self, ids) -> torch.Tensor:
        """Plain causal forward without cache: logits [n, V] (float32) after each prefix of ``ids``."""
        ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1).to(self.device)
        out = self.model(input_ids=ids, use_cache=False)
        return out.logits[0].float()


def tree_attention_mask(num_prefix: int, ancestors_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float mask ``[1, 1, n, num_prefix + n]`` of a tree forward: 0 where a token may attend, the
    most negative finite value of ``dtype`` elsewhere (-inf would give NaN rows in some kernels; every row
    here attends at least to itself, so the two are equivalent after softmax). ``ancestors_mask`` is a
    bool ``[n, m]`` saying which of the m tree-side cache entries + new tokens each new token may see,
    with m = num_cached_tree + n laid out in cache order."""
    n = ancestors_mask.shape[0]
    allowed = torch.cat([torch.ones(n, num_prefix, dtype=torch.bool, device=ancestors_mask.device),
                         ancestors_mask], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


@dataclass
class KVSession:
    """Fixed tokens, a prefix KV cache and tree forwards for one generation.

    Invariants: ``fixed`` = prompt + every emitted token; the cache holds the keys/values of
    ``fixed[:cached]`` and, between a tree forward and `commit`, of the tree nodes fed so far
    (``slots[i]`` = cache position of tree node i). The root of a tree (node 0) is ``fixed[-1]``;
    ``fixed[cached:-1]`` are fixed tokens not cached yet ("pending": they are fed, causally, in front
    of the next tree forward).
    """

    lm: LanguageModel
    prompt_ids: Sequence[int]
    fixed: list[int] = field(init=False)
    cached: int = field(init=False, default=0)
    cache: object = field(init=False, default=None)
    tree_tokens: list[int] = field(init=False, default_factory=list)
    tree_parents: list[int] = field(init=False, default_factory=list)
    slots: dict[int, int] = field(init=False, default_factory=dict)
    tree_start: int = field(init=False, default=0)

    def __post_init__(self):
        ids = torch.as_tensor(self.prompt_ids, dtype=torch.long).reshape(-1).tolist()
        if not ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(ids) >= self.lm.max_context:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit the context of {self.lm.name} "
                             f"({self.lm.max_context} positions, one needed for the next token)")
        bad = [t for t in ids if not 0 <= t < self.lm.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} out of range [0, {self.lm.vocab_size})")
        self.fixed = ids
        # lazy: transformers takes seconds to import; only model loading needs it
        from transformers import DynamicCache
        self.cache = DynamicCache(config=self.lm.model.config)

    # ----- tree forward ----------------------------------------------------------------------
    @property
    def length(self) -> int:
        return len(self.fixed)

    def _cache_len(self) -> int:
        return int(self.cache.get_seq_length())

    @torch.no_grad()
    def tree_logits(self, tokens, parents, nodes=None) -> torch.Tensor:
        """Logits ``[len(nodes), V]`` (float32) of the next token after path root..node for each node.

        ``tokens`` / ``parents``: the tree so far (node 0 = root = ``fixed[-1]``, ``parents[0] == -1``).
        ``nodes``: the nodes to score (default: all). Nodes and their not-yet-fed ancestors are fed in
        one forward with the tree attention mask; nodes fed earlier for the same tree are reused from
        the cache (so a drafter can grow a tree level by level with one forward per level).
        """
        tokens = [int(t) for t in (tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens)]
        parents = [int(p) for p in (parents.tolist() if isinstance(parents, torch.Tensor) else parents)]
        if len(tokens) != len(parents) or not tokens or parents[0] != -1:
            raise ValueError("tree tokens and parents must have the same length with parents[0] == -1")
        if tokens[0] != self.fixed[-1]:
            raise ValueError(f"the tree root token {tokens[0]} is not the last fixed token {self.fixed[-1]}")
        if not self.slots:  # a new tree
            self.tree_start = len(self.fixed) - 1
        else:
            m = min(len(tokens), len(self.tree_tokens))
            if tokens[:m] != self.tree_tokens[:m] or parents[:m] != self.tree_parents[:m]:
                raise ValueError("this tree does not extend the tree scored before; commit the previous step")
        if len(tokens) >= len(self.tree_tokens):
            self.tree_tokens, self.tree_parents = tokens, parents
        nodes = list(range(len(tokens))) if nodes is None else [int(i) for i in nodes]
        if not nodes or not all(0 <= i < len(tokens) for i in nodes):
            raise ValueError(f"nodes {nodes} must be a non-empty list of tree node indices < {len(tokens)}")
        depth = [0] * len(tokens)
        for i in range(1, len(tokens)):
            if not 0 <= parents[i] < i:
                raise ValueError(f"tree node {i}: parent {parents[i]} must be in [0, {i})")
            depth[i] = depth[parents[i]] + 1
        # nodes to feed now: requested ones and their unfed ancestors, parents before children
        feed = set()
        for i in nodes:
            while i >= 0 and i not in self.slots:
                feed.add(i)
                i = parents[i]
        feed = sorted(feed)
        pending = self.fixed[self.cached: self.tree_start]
        base = self._cache_len()
        n_new = len(pending) + len(feed)
        root_pos = self.tree_start
        if root_pos + max(depth[i] for i in nodes) + 1 > self.lm.max_context:
            raise ValueError(f"sequence would exceed the context of {self.lm.name} ({self.lm.max_context})")
        if n_new:
            ids = torch.tensor(pending + [tokens[i] for i in feed], dtype=torch.long)
            pos = torch.tensor(list(range(self.cached, self.cached + len(pending)))
                               + [root_pos + depth[i] for i in feed], dtype=torch.long)
            new_slot = {i: base + len(pending) + k for k, i in enumerate(feed)}
            mask = self._mask(parents, feed, new_slot, len(pending), base)
            logits_new = self._forward(ids, pos, mask, len(pending), feed, parents)
            self.cached += len(pending)
            self.slots.update(new_slot)
            row_of = {i: k for k, i in enumerate(feed)}
        else:
            logits_new, row_of = None, {}
        missing = [i for i in nodes if i not in row_of]
        if missing:
            raise ValueError(f"tree nodes {missing} were already scored; their logits are not kept")
        idx = torch.tensor([row_of[i] for i in nodes], dtype=torch.long, device=logits_new.device)
        return logits_new.index_select(0, idx)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask, n_pending: int, feed: list[int],
                 parents: list[int]) -> torch.Tensor:
        """One forward of ``n_pending`` pending fixed tokens and the tree nodes ``feed`` through the
        cache; returns the float32 logits of the fed nodes (a subclass may feed more than token ids:
        `models.feature`)."""
        out = self.lm.model(input_ids=ids[None].to(self.lm.device), position_ids=pos[None].to(self.lm.device),
                            attention_mask=mask, use_cache=True, **with_cache(self.lm.model, self.cache))
        return out.logits[0, n_pending:].float()

    def _mask(self, parents, feed, new_slot, n_pending, base):
        """Float tree mask over [cache (base entries), pending, fed nodes], or None when the new
        tokens are a plain causal continuation (then the model's own causal mask is exact)."""
        slot = {**self.slots, **new_slot}
        n_tree_cached = base - self.cached  # tree nodes in the cache from earlier calls
        chain_like = n_tree_cached == 0 and all(
            (k == 0 and parents[i] == -1) or (k > 0 and parents[i] == feed[k - 1]) for k, i in enumerate(feed))
        if chain_like:
            return None
        n = n_pending + len(feed)
        m = n_tree_cached + n  # entries after the committed prefix: earlier tree nodes, pending, new
        allowed = torch.zeros(n, m, dtype=torch.bool)
        # pending tokens: causal among themselves; they precede all tree nodes
        first_pending = base - self.cached
        for a in range(n_pending):
            allowed[a, first_pending: first_pending + a + 1] = True
        for k, i in enumerate(feed):
            row = n_pending + k
            allowed[row, first_pending: first_pending + n_pending] = True
            j = i
            while j >= 0:
                allowed[row, slot[j] - self.cached] = True
                j = parents[j]
        return tree_attention_mask(self.cached, allowed.to(self.lm.device), self.lm.dtype)

    # ----- commit ----------------------------------------------------------------------------
    def commit(self, path: Sequence[int], extra_token: int | None, tokens=None, parents=None) -> list[int]:
        """Accept tree nodes ``path`` (root excluded, depth order) and the extra token; returns the
        emitted tokens. The cache keeps the committed prefix plus the root and the accepted nodes that
        were fed (a crop + gather of their keys/values); everything else of the tree is dropped.

        ``tokens`` / ``parents``: the complete tree, needed when the path reaches nodes this session
        never scored (a drafter never runs its last level); it must extend the tree scored so far.
        """
        path = [int(i) for i in path]
        if tokens is not None:
            tokens = [int(t) for t in (tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens)]
            parents = [int(p) for p in (parents.tolist() if isinstance(parents, torch.Tensor) else parents)]
            m = len(self.tree_tokens)
            if len(tokens) < m or tokens[:m] != self.tree_tokens or parents[:m] != self.tree_parents \
                    or len(parents) != len(tokens):
                raise ValueError("the tree given to commit does not extend the tree scored before")
            if tokens and tokens[0] != self.fixed[-1]:
                raise ValueError(f"the tree root token {tokens[0]} is not the last fixed token {self.fixed[-1]}")
            self.tree_tokens, self.tree_parents = tokens, parents
        toks = self.tree_tokens
        if path and not toks:
            raise ValueError("commit of a path without a scored tree")
        prev = 0
        for i in path:
            if not 0 < i < len(toks) or self.tree_parents[i] != prev:
                raise ValueError(f"path {path} is not a root-to-node path of the tree")
            prev = i
        keep = []
        for i in self._nodes_to_keep(path):
            if i in self.slots:
                keep.append(self.slots[i])
            else:
                break
        if self.slots:
            self._keep_cache(self.cached, keep)
            self.cached += len(keep)
        emitted = [toks[i] for i in path] + ([] if extra_token is None else [int(extra_token)])
        self.fixed.extend(emitted)
        self.tree_tokens, self.tree_parents, self.slots = [], [], {}
        return emitted

    def _nodes_to_keep(self, path: list[int]) -> list[int]:
        """The tree nodes whose keys and values stay cached at commit (the root and the accepted path;
        a subclass that fed the path with provisional inputs keeps only the root)."""
        return [0] + path

    def _keep_cache(self, prefix: int, slots: list[int]) -> None:
        total = self._cache_len()
        if slots == list(range(prefix, prefix + len(slots))):
            self.cache.crop(-(total - prefix - len(slots)) if total > prefix + len(slots) else 0)
            return
        index = torch.tensor(list(range(prefix)) + slots, dtype=torch.long)
        for layer in self.cache.layers:
            keys = getattr(layer, "keys", None)
            if keys is None or getattr(layer, "is_sliding", False):
                raise ValueError(f"cannot gather tree entries in cache layer {type(layer).__name__}")
            i = index.to(keys.device)
            layer.keys = layer.keys.index_select(-2, i)
            layer.values = layer.values.index_select(-2, i)

    # ----- one-token steps (autoregressive decoding) -----------------------------------------
    def next_logits(self) -> torch.Tensor:
        """Logits [V] of the token after ``fixed`` (feeds the pending tokens and the root)."""
        return self.tree_logits([self.fixed[-1]], [-1])[0]

    def append(self, token: int) -> None:
        """Fix one more token after `next_logits` (the root's KV is kept)."""
        self.commit([], token)


def _offline_names() -> str:
    return "offline names: " + ", ".join(map(repr, OFFLINE_NAMES))


def _hub_offline() -> bool:
    """True when the hub must not be contacted (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``, read now
    as well as when huggingface_hub was imported)."""
    # lazy: hub access is optional (offline use never touches it)
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(str(f).strip().lower() in ("1", "true", "yes", "on")
                                                 for f in flags if f)


def _check_hub_id(name: str) -> None:
    """ValueError, fast, unless ``name`` is a model the hub can serve now: one metadata request with a
    `HUB_TIMEOUT_S` timeout and no retries (transformers' own download retries for ~25 s when the hub is
    unreachable)."""
    # lazy: hub access is optional (offline use never touches it)
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if _hub_offline():
        raise ValueError(f"could not load model {name!r}: it is not a local directory, not in the Hugging Face "
                         f"cache, and the hub is offline (HF_HUB_OFFLINE); {_offline_names()}")
    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        raise ValueError(f"could not load model {name!r}: it is gated on the Hugging Face hub; accept its terms "
                         f"and log in (hf auth login), or use an offline model ({_offline_names()})") from None
    except RepositoryNotFoundError:
        raise ValueError(f"could not load model {name!r}: no such model on the Hugging Face hub (nor a local "
                         f"directory or cached model); {_offline_names()}") from None
    except Exception as exc:  # noqa: BLE001 - connection refused, DNS, timeout, proxy, HTTP 5xx ...
        raise ValueError(f"could not load model {name!r}: it is not a local directory or cached, and the "
                         f"Hugging Face hub cannot be reached ({type(exc).__name__}: {str(exc)[:200]}); "
                         f"{_offline_names()}") from None


def _hf_source(name_or_path: str | Path) -> tuple[str, bool]:
    """(``name_or_path`` as text, whether it is a local directory), checked without loading anything: a
    directory must hold tokenizer files, anything else must be a valid HF id (ValueError otherwise)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        check_tokenizer_files(path)
        return text, True
    if path.exists():
        raise ValueError(f"could not load model {text!r}: it is a file, not a model directory")
    if isinstance(name_or_path, Path) or text.startswith((".", "/", "~", "\\")) or text.count("/") > 1:
        raise ValueError(f"could not load model {text!r}: no such directory; {_offline_names()}")
    # lazy: hub access is optional (offline use never touches it)
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as exc:
        raise ValueError(f"could not load model {text!r}: neither a directory nor a valid HF id ({exc}); "
                         f"{_offline_names()}") from None
    return text, False


def check_hf_name(name_or_path: str | Path) -> None:
    """ValueError, before anything loads, unless `load_hf` can find ``name_or_path``: a model directory,
    a hub id in the HF cache, or one the hub serves now (`_check_hub_id`, one request with a timeout)."""
    text, local = _hf_source(name_or_path)
    if local:
        return
    # lazy: hub access is optional (offline use never touches it)
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(text, "config.json"), str):
        _check_hub_id(text)


def load_hf(name_or_path: str, device=None, dtype=None, device_map=None, name: str | None = None) -> LanguageModel:
    """Any HF causal LM id or local directory -> `LanguageModel` (safetensors only, no remote code).

    ``device_map`` passes through to accelerate (e.g. "auto"); otherwise the model goes to ``device``
    (default: CUDA when available, else CPU; a device this machine lacks is a ValueError naming
    ``device``). ``dtype`` default: float32 on CPU, bfloat16 on CUDA.

    A hub id is read from the HF cache first (no network); otherwise the hub is asked once, with a
    `HUB_TIMEOUT_S` timeout, so an unknown name or an unreachable hub is a ValueError within seconds
    that lists the offline names. Works offline (``HF_HUB_OFFLINE=1``) for models already in the cache.
    """
    if not isinstance(name_or_path, (str, Path)) or not str(name_or_path):
        raise ValueError(f"name_or_path must be an HF id or a directory, got {name_or_path!r}")
    torch_dtype = resolve_dtype(dtype)
    if device_map is None:
        device = resolve_device(device)
    if torch_dtype is None:
        on_cuda = (device_map is not None and torch.cuda.is_available()) or \
            (device_map is None and device.type == "cuda")
        torch_dtype = torch.bfloat16 if on_cuda else torch.float32
    kwargs = dict(dtype=torch_dtype, use_safetensors=True, trust_remote_code=False)
    if device_map is not None:
        kwargs["device_map"] = device_map
    text, local = _hf_source(name_or_path)
    # lazy: transformers takes seconds to import; only model loading needs it (bad arguments fail before)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with quiet_loading():
            try:  # a local directory, or a hub id already in the HF cache: no network
                model = AutoModelForCausalLM.from_pretrained(text, local_files_only=True, **kwargs)
                tokenizer = AutoTokenizer.from_pretrained(text, local_files_only=True, trust_remote_code=False)
            except OSError:
                if local:
                    raise
                _check_hub_id(text)
                model = AutoModelForCausalLM.from_pretrained(text, **kwargs)
                tokenizer = AutoTokenizer.from_pretrained(text, trust_remote_code=False)
    except OSError as exc:
        raise ValueError(f"could not load model {text!r} (an HF id, a local directory with safetensors "
                         f"weights, or one of the offline names): {exc}; {_offline_names()}") from exc
    if device_map is None:
        model = model.to(device)
    return LanguageModel(model, tokenizer, name or text)
