"""The quantized self-draft: the target's own weights rounded onto a coarser 4-bit grid.

A draft need not be a separate small model. Quantized self-speculation (e.g. QSpec, Zhao et al. 2024;
the idea goes back to drafting with a cheaper copy of the target itself, Zhang et al. 2023, "Draft &
Verify") drafts with the target's architecture and weights at lower precision, so its next-token law
stays close to the target's at every depth. Verification is unchanged and exact: every verifier
accepts with the target's probabilities, so the output law does not depend on q.

Here every linear map of the target's decoder layers, and the output head (untied from the input
embeddings, which stay shared), is replaced by round-to-nearest asymmetric 4-bit quantization in
groups of ``group`` input features:

    w ~ scale * code + low,   code in {0, .., 15},   scale = (max - min) / 15,  low = min   (per group)

The offline target is itself stored 4-bit (its GGUF is Q4_1: groups of 32 with a scale and a minimum),
so a 32-group grid would almost return the target; groups of 64 merge pairs of its blocks and make a
real approximation. Measured acceptance sum_x min(p, q) at T = 1 on 13 held-out prompts x 48
target-sampled tokens (fake-quantised probe, bfloat16): 0.73 with the head in bfloat16, 0.70 with the
head in 4 bits too (the default: the head's one-row product is 4.7x faster in 4 bits on this CPU), 0.97
at 8 bits. The record ``data/models/smollm2-135m-int4/draft.json`` holds the measured numbers
(`specdec_lib.experiments.draft_measure`). That is the papers' regime (per-token acceptance 0.6-0.8), reached by a
real model that drafts on its own, where the distilled 2-layer draft reaches 0.34.

Cost. On a CPU with bfloat16 activations the 4-bit products run through torch's int4 kernel
(``aten._weight_int4pack_mm_for_cpu``), which reads a quarter of the bytes of a bfloat16 weight; on
other devices or dtypes the layer multiplies by its dequantised weight (the same q up to rounding). The
draft is still a full-depth model: its one-token forward costs a sizeable fraction of the target's
(the record's ``forward_time``), so it is the pair for tokens per step in the papers' regime, not a
pair that makes speculative decoding fast on this CPU. A fair wall-clock comparison would also run the
target through the same 4-bit kernels (its Q4_1 weights fit them exactly).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

__all__ = ["QuantizedLinear", "quantize_groups", "dequantize_groups", "quantized_copy", "DEFAULT_GROUP"]

DEFAULT_GROUP = 64
_LEVELS = 15  # 4 bits: codes 0..15
_KERNEL_GROUPS = (32, 64, 128, 256)  # the group sizes torch's CPU int4 kernel takes


def quantize_groups(weight: torch.Tensor, group: int = DEFAULT_GROUP) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round-to-nearest asymmetric 4-bit quantization of ``weight`` [out, in] in groups of ``group`` input
    features. Returns (codes int32 [out, in] in 0..15, scales [out, in / group], lows [out, in / group]),
    scales and lows in float32; ``weight ~ dequantize_groups(codes, scales, lows)``."""
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise ValueError(f"weight must be a 2-D tensor [out, in], got {type(weight).__name__} "
                         f"{tuple(getattr(weight, 'shape', ()))}")
    if isinstance(group, bool) or not isinstance(group, int) or group < 2:
        raise ValueError(f"group must be an integer >= 2, got {group!r}")
    out_f, in_f = weight.shape
    if in_f % group:
        raise ValueError(f"group must divide the input width {in_f}, got {group}")
    g = weight.detach().float().reshape(out_f, in_f // group, group)
    low, high = g.amin(-1), g.amax(-1)
    scale = ((high - low) / _LEVELS).clamp_min(1e-12)
    codes = torch.round((g - low[..., None]) / scale[..., None]).clamp_(0, _LEVELS)
    return codes.to(torch.int32).reshape(out_f, in_f), scale, low


def dequantize_groups(codes: torch.Tensor, scales: torch.Tensor, lows: torch.Tensor) -> torch.Tensor:
    """The float32 weight [out, in] that 4-bit ``codes`` with per-group ``scales`` and ``lows`` stand for."""
    out_f, in_f = codes.shape
    group = in_f // scales.shape[1]
    g = codes.float().reshape(out_f, -1, group)
    return (g * scales[..., None] + lows[..., None]).reshape(out_f, in_f)


def _cpu_int4_kernel() -> bool:
    ops = torch.ops.aten
    return hasattr(ops, "_weight_int4pack_mm_for_cpu") and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")


class QuantizedLinear(torch.nn.Module):
    """A bias-free linear map whose weight is 4-bit group-quantized (`quantize_groups`).

    ``weight`` (a buffer) is the dequantised weight in the source dtype: it defines the map, serves every
    device and dtype, and gives the layer the shape HF expects of an output head. On a CPU with bfloat16
    inputs the forward uses torch's int4 kernel on the packed codes instead (same map up to rounding;
    `tests/test_quantized_draft.py` bounds the difference)."""

    def __init__(self, source: torch.Tensor, group: int = DEFAULT_GROUP):
        super().__init__()
        codes, scales, lows = quantize_groups(source, group)
        self.group = group
        self.in_features, self.out_features = int(source.shape[1]), int(source.shape[0])
        dtype, device = source.dtype, source.device
        self.register_buffer("weight", dequantize_groups(codes, scales, lows).to(dtype).to(device))
        self._packed = None
        if device.type == "cpu" and dtype == torch.bfloat16 and group in _KERNEL_GROUPS and _cpu_int4_kernel():
            # the kernel's convention: w = (code - 8) * scale + zero, scales_and_zeros [in / group, out, 2]
            zeros = lows + 8.0 * scales
            self._scales_and_zeros = torch.stack([scales.T, zeros.T], dim=-1).to(dtype).contiguous()
            self._packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), 1)

    def extra_repr(self) -> str:
        kernel = "int4 CPU kernel" if self._packed is not None else "dequantised weight"
        return f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}, {kernel}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._packed is not None and x.device.type == "cpu" and x.dtype == torch.bfloat16:
            rows = x.reshape(-1, self.in_features).contiguous()
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self._packed, self.group, self._scales_and_zeros)
            return y.reshape(*x.shape[:-1], self.out_features)
        return F.linear(x, self.weight)


def quantized_copy(model: torch.nn.Module, group: int = DEFAULT_GROUP) -> torch.nn.Module:
    """A copy of the HF causal LM ``model`` (``.model.layers``, ``.model.embed_tokens``, ``.lm_head``) whose
    decoder-layer linear maps and output head are `QuantizedLinear` (group size ``group``); the input
    embeddings stay shared with ``model`` (same tensor), everything else (norms, rotary tables) is copied.
    Linear maps with a bias are refused (ValueError): the Llama family has none."""
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(model, "lm_head"):
        raise ValueError("model must be an HF causal LM with .model.layers and .lm_head (Llama-style)")
    embed = inner.embed_tokens
    memo = {id(embed): embed, id(embed.weight): embed.weight}   # share the embeddings, copy the rest
    if model.lm_head.weight is embed.weight:
        memo[id(model.lm_head)] = torch.nn.Identity()           # replaced below; avoid copying the head
    draft = copy.deepcopy(model, memo)
    for layer in draft.model.layers:
        for name, module in list(layer.named_modules()):
            if isinstance(module, torch.nn.Linear):
                if module.bias is not None:
                    raise ValueError(f"quantized_copy supports bias-free linear maps only; {name} has a bias")
                parent = layer.get_submodule(name.rsplit(".", 1)[0]) if "." in name else layer
                setattr(parent, name.rsplit(".", 1)[-1], QuantizedLinear(module.weight.detach(), group))
    draft.lm_head = QuantizedLinear(model.lm_head.weight.detach(), group)
    draft.config.tie_word_embeddings = False
    return draft.eval()
