"""The feature-conditioned draft ``smollm2-135m-eagle`` (EAGLE family; Li et al. 2024, Sec. 4).

At position j the draft reads the token x_j and a feature f_{j-1}: the target's final hidden state
after its last norm at the previous position (the vector the tied LM head multiplies), or, deeper in
a drafted tree where the target has not run yet, the draft's own output at the parent node. Its
input embedding is

    e_j = E[x_j] + W · RMSNorm(f_{j-1})          (W zero-initialised; f = 0 at a sequence start)

(the norm's gain starts at the embeddings' RMS, so the injection cannot swamp the token embedding)

followed by the decoder layers and final norm of the project's independent 2-layer draft (which it
starts from, so at initialisation it *is* that draft) and the target's tied head (optionally the
8192-token sub-vocabulary head, lossless: `models.subset_head`). Its output h_j (post-norm) gives
q_{j+1} = softmax(head(h_j)) and is the feature handed to the children of node j.

Files (``data/models/smollm2-135m-eagle/``): ``feature_draft.safetensors`` (decoder layers, final
norm, ``feature_norm.weight``, ``inject.weight``), ``head_vocab.safetensors`` and ``draft.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .kv_cache import cache_of, with_cache
from .offline import DRAFT_DIR, DRAFT_LAYERS_FILE, EAGLE_NAME, REPO_ROOT, build_student, student_state_dict
from .subset_head import use_subset_head

__all__ = ["EAGLE_NAME", "EAGLE_DIR", "FeatureDraft", "build_feature_draft", "grow_feature_draft",
           "export_feature_draft", "load_feature_draft", "num_layers_of"]

EAGLE_DIR = REPO_ROOT / "data" / "models" / EAGLE_NAME
WEIGHTS_FILE = "feature_draft.safetensors"
RECORD_FILE = "draft.json"
HEAD_VOCAB_FILE = "head_vocab.safetensors"


class FeatureDraft(nn.Module):
    """``student``: a ``LlamaForCausalLM`` sharing the target's embeddings and tied head (see
    `models.offline.build_student`); ``feature_norm`` / ``inject``: the feature input."""

    def __init__(self, student):
        super().__init__()
        hidden = int(student.config.hidden_size)
        # lazy: transformers takes seconds to import; only model loading needs it
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        self.student = student
        weight = student.get_input_embeddings().weight
        self.feature_norm = LlamaRMSNorm(hidden, eps=student.config.rms_norm_eps).to(weight.device, weight.dtype)
        self.inject = nn.Linear(hidden, hidden, bias=False).to(weight.device, weight.dtype)
        nn.init.zeros_(self.inject.weight)
        with torch.no_grad():  # the normalised feature starts at the embeddings' scale (RMS per entry)
            self.feature_norm.weight.fill_(float(weight.float().pow(2).mean().sqrt()))

    @property
    def config(self):
        return self.student.config

    @property
    def hidden_size(self) -> int:
        return int(self.student.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None, past_key_values=None, use_cache: bool = False):
        """``input_ids`` [B, n], ``features`` [B, n, H] (the feature read at each position),
        ``position_ids`` [B, n]; ``attention_mask`` a float mask [B, 1, n, C + n] or None (causal).
        Returns (hidden [B, n, H] after the final norm, the KV cache)."""
        embeds = self.student.get_input_embeddings()(input_ids)
        feats = features.to(embeds.dtype)
        embeds = embeds + self.inject(self.feature_norm(feats))
        out = self.student.model(inputs_embeds=embeds, position_ids=position_ids, attention_mask=attention_mask,
                                 use_cache=use_cache, **with_cache(self.student.model, past_key_values))
        return out.last_hidden_state, cache_of(out)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the full vocabulary (-inf outside a sub-vocabulary head)."""
        return self.student.lm_head(hidden)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The tensors stored in ``feature_draft.safetensors``."""
        state = {f"student.{k}": v for k, v in student_state_dict(self.student).items()}
        state["feature_norm.weight"] = self.feature_norm.weight.detach().contiguous()
        state["inject.weight"] = self.inject.weight.detach().contiguous()
        return state


def num_layers_of(state: dict) -> int:
    """The number of decoder layers in a stored feature draft's state (``feature_draft.safetensors``)."""
    return 1 + max(int(k.split(".")[3]) for k in state if k.startswith("student.model.layers."))


def build_feature_draft(target_lm, init_dir: Path | str | None = None) -> FeatureDraft:
    """A `FeatureDraft` on the target's device and dtype, its layers copied from the independent draft
    in ``init_dir`` (default: ``data/models/smollm2-135m-draft``) and its feature input zero."""
    init_dir = Path(init_dir) if init_dir is not None else DRAFT_DIR
    layers = load_file(str(init_dir / DRAFT_LAYERS_FILE))
    num = 1 + max(int(k.split(".")[2]) for k in layers if k.startswith("model.layers."))
    target = target_lm.model if hasattr(target_lm, "model") and hasattr(target_lm, "tokenizer") else target_lm
    student = build_student(target, num)
    dtype = student.get_input_embeddings().weight.dtype
    student.load_state_dict({k: v.to(dtype) for k, v in layers.items()}, strict=False)
    return FeatureDraft(student)


def grow_feature_draft(draft: FeatureDraft, target_lm, num_layers: int) -> FeatureDraft:
    """A deeper copy of ``draft`` with ``num_layers`` decoder layers that computes exactly what ``draft``
    computes: its own layers first, then copies of the target's last layers (their attention and MLP
    read the residual stream as the target's late layers do) with the output projections ``o_proj`` and
    ``down_proj`` zero, so each added layer adds nothing to the residual until training moves them.
    Its feature input, final norm and head (sub-vocabulary included) are ``draft``'s."""
    have = len(draft.student.model.layers)
    target = target_lm.model if hasattr(target_lm, "tokenizer") else target_lm
    total = len(target.model.layers)
    if not have <= int(num_layers) <= total:
        raise ValueError(f"num_layers must be in [{have}, {total}] (the draft has {have} layers, the target "
                         f"{total}), got {num_layers}")
    num_layers = int(num_layers)
    if num_layers == have:
        return draft
    student = build_student(target, num_layers)
    with torch.no_grad():
        student.model.layers[:have].load_state_dict(draft.student.model.layers.state_dict())
        student.model.norm.load_state_dict(draft.student.model.norm.state_dict())
        for i in range(have, num_layers):
            layer = student.model.layers[i]
            layer.load_state_dict(target.model.layers[total - (num_layers - i)].state_dict())
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    grown = FeatureDraft(student)
    grown.feature_norm.load_state_dict(draft.feature_norm.state_dict())
    grown.inject.load_state_dict(draft.inject.state_dict())
    vocab = getattr(draft.student.lm_head, "vocab_ids", None)
    if vocab is not None:
        use_subset_head(student, vocab)
    return grown.train(draft.training)


def export_feature_draft(draft: FeatureDraft, out_dir: Path | str, record: dict,
                         head_vocab: torch.Tensor | None = None) -> Path:
    """Write the weights (bfloat16), the head vocabulary and ``draft.json`` to ``out_dir``. Without
    ``head_vocab`` the draft uses the full tied head: a head vocabulary file left there by an earlier export is
    removed (`load_feature_draft` would otherwise restrict the head to it)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in draft.trainable_state().items()},
              str(out_dir / WEIGHTS_FILE))
    if head_vocab is not None:
        save_file({"vocab_ids": head_vocab.to(torch.int64).contiguous()}, str(out_dir / HEAD_VOCAB_FILE))
    else:
        (out_dir / HEAD_VOCAB_FILE).unlink(missing_ok=True)
    (out_dir / RECORD_FILE).write_text(json.dumps(record, indent=1))
    return out_dir


def load_feature_draft(target_lm, directory: Path | str = EAGLE_DIR, subset_head: bool = True) -> FeatureDraft:
    """The exported feature draft on the target's device and dtype (with its sub-vocabulary head when
    ``head_vocab.safetensors`` is there and ``subset_head``)."""
    directory = Path(directory)
    path = directory / WEIGHTS_FILE
    if not path.is_file():
        raise ValueError(f"the feature draft is not there: {path} is missing; train it with "
                         f"python -m specdec_lib.training.feature.online --init data/models/smollm2-135m-draft")
    state = load_file(str(path))
    target = target_lm.model if hasattr(target_lm, "tokenizer") else target_lm
    student = build_student(target, num_layers_of(state))
    draft = FeatureDraft(student)
    expected = set(draft.trainable_state())
    if set(state) != expected:
        raise ValueError(f"{path} does not match a {num_layers_of(state)}-layer feature draft: missing "
                         f"{sorted(expected - set(state))[:4]}, unexpected {sorted(set(state) - expected)[:4]}")
    dtype = student.get_input_embeddings().weight.dtype
    draft.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    vocab = directory / HEAD_VOCAB_FILE
    if subset_head and vocab.is_file():
        use_subset_head(student, load_file(str(vocab))["vocab_ids"])
    return draft.eval()
