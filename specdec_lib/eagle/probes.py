"""How much of the target's next-token law its own first k layers carry: the early-exit probe.

A draft that costs a few percent of the target must reproduce a distribution the target computes
with all its layers. The probe reads the target's hidden state after its first k layers through the
target's own final norm and tied head, untrained (the "early exit"), and measures the per-token
acceptance of that read-out against the full target at target-sampled continuation positions:

    acceptance_k = mean over positions of sum_x min(p(x), q_k(x)),   q_k = softmax(head(norm(h_k)) / T)

(the measure of ``draft.json``). Trained drafts sit above their layer count's early exit; the curve
shows where in the stack the target's distribution forms. Command line (writes
``data/results/draft_probes/early_exit.json`` with its parameters)::

    python -m specdec_lib.eagle.probes --per-category 2 --new-tokens 48
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Sequence

import torch

from ..data import load_prompts
from ..models import load_model
from ..models.offline import REPO_ROOT

__all__ = ["early_exit_acceptance", "sampled_continuations", "main"]

OUT_PATH = REPO_ROOT / "data" / "results" / "draft_probes" / "early_exit.json"


@torch.no_grad()
def early_exit_acceptance(model, sequences: Sequence[tuple[torch.Tensor, int]], layers: Sequence[int],
                          temperature: float = 1.0) -> dict:
    """``model``: an HF Llama-style causal LM (``.model.layers``, ``.model.norm``, ``.lm_head``);
    ``sequences``: (tokens [n], prompt_len) pairs; ``layers``: k values in 1..L (L: the full target,
    acceptance 1). Rows from the last prompt token on are scored (they predict the continuation).
    Returns {"acceptance": {k: mean}, "positions": count, "target_entropy": mean nats}."""
    num_layers = len(model.model.layers)
    layers = [int(k) for k in layers]
    if not layers or any(not 1 <= k <= num_layers for k in layers):
        raise ValueError(f"layers must be in 1..{num_layers}, got {layers}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not sequences:
        raise ValueError("sequences must hold at least one (tokens, prompt_len) pair")
    sums = {k: 0.0 for k in layers}
    entropy, positions = 0.0, 0
    for tokens, prompt_len in sequences:
        tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(1, -1)
        if not 1 <= int(prompt_len) < tokens.shape[1]:
            raise ValueError(f"prompt_len must be in 1..{tokens.shape[1] - 1}, got {prompt_len}")
        device = model.get_input_embeddings().weight.device
        hidden = model.model(tokens.to(device), output_hidden_states=True).hidden_states
        rows = slice(int(prompt_len) - 1, tokens.shape[1] - 1)
        logp = torch.log_softmax(model.lm_head(hidden[-1][0, rows]).float() / temperature, -1)
        p = logp.exp()
        entropy += float(-(p * logp).nan_to_num().sum())
        positions += p.shape[0]
        for k in layers:  # hidden[k] is the input of layer k; the last entry is already normed
            h = hidden[-1][0, rows] if k == num_layers else model.model.norm(hidden[k][0, rows])
            q = torch.softmax(model.lm_head(h).float() / temperature, -1)
            sums[k] += float(torch.minimum(p, q).sum())
    return {"acceptance": {k: sums[k] / positions for k in layers}, "positions": positions,
            "target_entropy": entropy / positions}


@torch.no_grad()
def sampled_continuations(lm, per_category: int, new_tokens: int, temperature: float = 1.0,
                          seed: int = 0) -> list[tuple[torch.Tensor, int]]:
    """The target's own continuation of the first ``per_category`` held-out prompts of every category."""
    torch.manual_seed(seed)
    out = []
    for prompt in load_prompts("heldout", per_category=per_category):
        ids = lm.encode(prompt.text)[None].to(lm.device)
        full = lm.model.generate(ids, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=new_tokens)
        out.append((full[0].cpu(), ids.shape[1]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(OUT_PATH))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    lm = load_model("smollm2-135m-instruct", dtype=a.dtype)
    sequences = sampled_continuations(lm, a.per_category, a.new_tokens, a.temperature)
    num_layers = len(lm.model.model.layers)
    result = early_exit_acceptance(lm.model, sequences, list(range(2, num_layers + 1, 2)), a.temperature)
    record = {"parameters": vars(a), "target": lm.name, "prompts": len(sequences),
              "machine": f"{platform.machine()} {platform.system()}", **result}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print(json.dumps({k: round(v, 4) for k, v in result["acceptance"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
