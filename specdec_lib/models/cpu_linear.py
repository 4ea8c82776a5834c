"""Faster linear layers for the few-token forwards of speculative decoding on a CPU (float32).

Verification scores a handful of tokens per forward (a chain of 2-8, a tree of up to a few dozen), and
drafting scores one. With torch's default ``F.linear`` (``x @ W.T``) on this project's 2-core CPU
(torch 2.13, float32), a forward of the offline target over 2 tokens took 1.65x one over 1 token
(data/hardware/), which made every speculative method slower than autoregressive decoding.
The cause is the GEMM kernel chosen for a few rows against a large transposed weight, not the arithmetic:

* ``(W @ x.T).T`` computes the same product through a different kernel. Measured here with 2 threads
  (weights [1536, 576] / [576, 1536] / [49152, 576], cold caches): 0.43 / 0.71 / 0.28 of the time of
  ``x @ W.T`` for 2 rows, 0.53 / 1.05 / 0.47 for 8 rows, about the same at 1 row and 0.9-1.0 from 64 rows
  on. `SmallBatchLinear` uses it for every input of 2 rows or more.
* For one row through a wide output layer (the LM head, ``out_features >= 8 * in_features``), ``x @ Wt``
  with a contiguous transposed copy ``Wt`` took 4.5 ms against 8.6 ms (1 thread, [49152, 576]). The copy
  is made on first use and remade whenever the weight changes (its version counter or storage).

The results equal ``F.linear``'s up to float rounding (tested to 1e-5 relative); only the summation
order differs. Nothing changes on other devices or dtypes, or while autograd records the weight
(training keeps torch's kernel). `LanguageModel` switches CPU float32 models to it on construction and
records the number of layers in ``LanguageModel.small_batch_linears``; `use_torch_linear` undoes it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["SmallBatchLinear", "small_batch_linear", "derived_copy", "use_small_batch_linear", "use_torch_linear"]

_WIDE_HEAD_RATIO = 8   # out_features >= 8 * in_features: an output head such as a vocabulary projection


def derived_copy(owner: torch.nn.Module, name: str, weight: torch.Tensor, make) -> torch.Tensor:
    """``make(weight)`` (no autograd), cached on ``owner`` under ``name`` and remade whenever ``weight``
    changes (its version counter or storage)."""
    key = (weight._version, weight.data_ptr())
    cached = owner.__dict__.get(name)
    if cached is None or cached[0] != key:
        with torch.no_grad():
            cached = (key, make(weight.detach()))
        owner.__dict__[name] = cached
    return cached[1]


def small_batch_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       weight_t=None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` with the kernels of the module docstring on a CPU in float32 without
    autograd: ``(W @ x.T).T`` for 2+ rows; for one row ``x @ weight_t()`` when ``weight_t`` (a callable
    giving the contiguous transpose) is given, else ``x @ W.T``. Anything else: ``F.linear``."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or (torch.is_grad_enabled() and weight.requires_grad):
        return F.linear(x, weight, bias)
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] > 1:
        y = (weight @ rows.T).T
    else:
        y = rows @ (weight_t() if weight_t is not None else weight.T)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


class SmallBatchLinear(torch.nn.Linear):
    """``torch.nn.Linear`` whose CPU float32 inference forward picks a faster kernel (`small_batch_linear`);
    a wide output head keeps a transposed copy of its weight for one-row inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        wide = w.shape[0] >= _WIDE_HEAD_RATIO * w.shape[1]
        transposed = (lambda: derived_copy(self, "_weight_t", w, lambda v: v.T.contiguous())) if wide else None
        return small_batch_linear(x, w, self.bias, transposed)


def use_small_batch_linear(model: torch.nn.Module) -> int:
    """Switch every ``torch.nn.Linear`` of ``model`` (exactly that class) to `SmallBatchLinear` in place.
    Parameters, hooks and state dict are untouched. Returns the number of layers switched."""
    count = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = SmallBatchLinear
            count += 1
    return count


def use_torch_linear(model: torch.nn.Module) -> int:
    """Undo `use_small_batch_linear`: back to ``torch.nn.Linear`` (drops the transposed copies)."""
    count = 0
    for module in model.modules():
        if type(module) is SmallBatchLinear:
            module.__class__ = torch.nn.Linear
            module.__dict__.pop("_weight_t", None)
            count += 1
    return count
