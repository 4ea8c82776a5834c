"""How much of the target's next-token law its own first k layers carry: the early-exit probe.

A draft that costs a few percent of the target must reproduce a distribution the target computes
with all its layers. The probe reads the target's hidden state after its first k layers through the
target's own final norm and tied head, untrained (the "early exit"), and measures the per-token
acceptance of that read-out against the full target at target-sampled continuation positions:

    acceptance_k = mean over positions of sum_x min(p(x), q_k(x)),   q_k = softmax(head(norm(h_k)) / T)

(the measure of ``draft.json``). Trained drafts sit above their layer count's early exit; the curve
shows where in the stack the target's distribution forms.

The layer-skip probe (`layer_skip_acceptance`) asks the same of training-free self-speculation by skipping
layers (Draft & Verify, Zhang et al. 2023; LayerSkip): the target with a block of its layers left out, read
through its own norm and head. Keeping the first k layers is the early exit at k (the test's control).

The head-vocabulary probe (`head_vocabulary_acceptance`) asks what the committed feature draft loses by
scoring only its head vocabulary (`models.subset_head`: q = 0 outside it): its acceptance by depth with
that head and with the target's full tied head (the same weights), and the target's mass outside the
head vocabulary at the same positions. The committed draft has the full head, so this probe
takes the directory of a draft with a head vocabulary (``--drafts``).

The prompt-set probe (`prompt_set_acceptance`) asks whether the acceptance a draft reaches on what it is trained
on carries over to the held-out prompts its record measures: the same drafts, by depth, on the target's
continuations of the held-out prompts, of the training split, and of the self-made instructions `online` samples
beside it (`training.prompts.seed_instructions`). Command lines (each writes ``data/results/draft_probes/<probe>.json``
with its parameters)::

    python scripts/feature_draft_probes.py --per-category 2 --new-tokens 48
    python scripts/feature_draft_probes.py --probe head_vocabulary --per-category 2 --new-tokens 96
    python scripts/feature_draft_probes.py --probe layer_skip --per-category 2 --new-tokens 48
    python scripts/feature_draft_probes.py --probe prompt_sets --per-category 2 --new-tokens 96 --drafts DIR,DIR
"""

from __future__ import annotations

import argparse
import json
import platform
import random
from pathlib import Path
from typing import Sequence

import torch

from specdec_lib.data import load_prompts
from specdec_lib.decoding import _check_int
from specdec_lib.training.prompts import seed_instructions
from specdec_lib.models import load_model
from specdec_lib.models.offline import REPO_ROOT

__all__ = ["early_exit_acceptance", "layer_skip_acceptance", "skip_patterns", "sampled_continuations",
           "head_vocabulary_acceptance", "prompt_sets", "prompt_set_acceptance", "main"]

OUT_DIR = REPO_ROOT / "data" / "results" / "draft_probes"
PROBES = ("early_exit", "head_vocabulary", "layer_skip", "prompt_sets")


def _scored(model, sequences: Sequence[tuple[torch.Tensor, int]], temperature: float) -> list[tuple[torch.Tensor, slice]]:
    """Each (tokens [n], prompt_len) of ``sequences`` as (tokens [1, n] on the model's device, the rows that predict
    the continuation: from the last prompt token on); ValueError for a temperature <= 0, no sequences or a
    prompt_len outside 1..n-1."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not sequences:
        raise ValueError("sequences must hold at least one (tokens, prompt_len) pair")
    device = model.get_input_embeddings().weight.device
    out = []
    for tokens, prompt_len in sequences:
        tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(1, -1)
        if not 1 <= int(prompt_len) < tokens.shape[1]:
            raise ValueError(f"prompt_len must be in 1..{tokens.shape[1] - 1}, got {prompt_len}")
        out.append((tokens.to(device), slice(int(prompt_len) - 1, tokens.shape[1] - 1)))
    return out


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
    sums = {k: 0.0 for k in layers}
    entropy, positions = 0.0, 0
    for tokens, rows in _scored(model, sequences, temperature):
        hidden = model.model(tokens, output_hidden_states=True).hidden_states
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


def skip_patterns(num_layers: int) -> dict[str, list[int]]:
    """Named sets of kept layers: a contiguous block of 3, 6 or 12 layers left out at several depths (never the
    last two, where the early exit shows the law forms), and every other layer left out between the first two and
    the last two."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 6:
        raise ValueError(f"num_layers must be an int >= 6, got {num_layers!r}")
    out = {}
    for width in (3, 6, 12):
        for start in range(2, num_layers - 2 - width + 1, max(width, 4)):
            out[f"skip {start}..{start + width - 1}"] = [i for i in range(num_layers) if not start <= i < start + width]
    out[f"skip every other in 2..{num_layers - 3}"] = [i for i in range(num_layers) if not (2 <= i < num_layers - 2 and i % 2)]
    return out


@torch.no_grad()
def layer_skip_acceptance(model, sequences: Sequence[tuple[torch.Tensor, int]], kept: dict[str, Sequence[int]],
                          temperature: float = 1.0) -> dict:
    """``model``, ``sequences`` as in `early_exit_acceptance`; ``kept``: name -> the indices of the layers kept (in
    order; the others are left out of the forward, the norm and head are the target's). Returns {"acceptance":
    {name: mean sum_x min(p, q)}, "layers": {name: number kept}, "positions": count}. The model's layers are
    restored afterwards."""
    layers = model.model.layers
    num_layers = len(layers)
    for name, keep in kept.items():
        keep = list(keep)
        if not keep or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers for i in keep) \
                or keep != sorted(set(keep)):
            raise ValueError(f"kept[{name!r}] must be increasing layer indices in 0..{num_layers - 1}, got {keep}")
    batches = [(tokens, rows, torch.softmax(model(tokens, use_cache=False).logits[0, rows].float() / temperature, -1))
               for tokens, rows in _scored(model, sequences, temperature)]
    sums = {name: 0.0 for name in kept}
    try:
        for name, keep in kept.items():
            model.model.layers = torch.nn.ModuleList([layers[i] for i in keep])
            for tokens, rows, p in batches:
                q = torch.softmax(model(tokens, use_cache=False).logits[0, rows].float() / temperature, -1)
                sums[name] += float(torch.minimum(p, q).sum())
    finally:
        model.model.layers = layers
    positions = sum(p.shape[0] for _, _, p in batches)
    return {"acceptance": {name: total / positions for name, total in sums.items()},
            "layers": {name: len(keep) for name, keep in kept.items()}, "positions": positions}


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


@torch.no_grad()
def head_vocabulary_acceptance(target_model, samples, directory: Path | str | None = None, depth: int = 2) -> dict:
    """The feature draft of ``directory`` (default: the committed one) with its sub-vocabulary head and with the
    target's full tied head: mean acceptance sum_x min(p, q) at T = 1 by depth 1..``depth``
    (`online.depth_acceptance`) over the continuation positions of ``samples`` (`FeatureSample` s, e.g.
    `online.heldout_rollouts`), and the target's mean probability mass outside the head vocabulary there.
    Returns {"head_size", "vocab_size", "acceptance": {"subset": [...], "full": [...]}, "target_mass_outside",
    "positions"}."""
    from specdec_lib.models.feature_net import EAGLE_DIR, load_feature_draft
    from specdec_lib.training.feature.online import depth_acceptance

    directory = Path(directory) if directory is not None else EAGLE_DIR
    depth = _check_int("depth", depth, minimum=1)
    if not samples:
        raise ValueError("samples must hold at least one sequence")
    subset = load_feature_draft(target_model, directory, subset_head=True)
    vocab_ids = getattr(subset.student.get_output_embeddings(), "vocab_ids", None)
    if vocab_ids is None:
        raise ValueError(f"the draft in {directory} has no head vocabulary file: nothing to compare")
    full = load_feature_draft(target_model, directory, subset_head=False)
    outside, positions = 0.0, 0
    device = target_model.get_input_embeddings().weight.device
    for s in samples:
        rows = slice(int(s.prompt_len) - 1, len(s.tokens) - 1)
        hidden = target_model.model(input_ids=s.tokens[None].to(device)).last_hidden_state[0, rows]
        p = torch.softmax(target_model.lm_head(hidden).float(), -1)
        outside += float((1.0 - p[:, vocab_ids.to(p.device)].sum(-1)).sum())
        positions += p.shape[0]
    return {"head_size": int(vocab_ids.numel()), "vocab_size": int(target_model.get_output_embeddings().weight.shape[0]),
            "acceptance": {"subset": depth_acceptance(subset, target_model, samples, depth),
                           "full": depth_acceptance(full, target_model, samples, depth)},
            "target_mass_outside": outside / max(positions, 1), "positions": positions}


def prompt_sets(per_category: int, seeds: int = 20000, seed: int = 0) -> dict[str, list[str]]:
    """The prompt sets `prompt_set_acceptance` compares, 13 x ``per_category`` prompts each: the first
    ``per_category`` held-out and training-split prompts of every category, and as many of the ``seeds``
    self-made instructions `online` trains on (`training.prompts.seed_instructions`, drawn with ``seed``)."""
    per_category = _check_int("per_category", per_category, minimum=1)
    heldout = [p.text for p in load_prompts("heldout", per_category=per_category)]
    made = seed_instructions(seeds, seed=seed)
    return {"heldout": heldout, "train": [p.text for p in load_prompts("train", per_category=per_category)],
            "self_made": random.Random(seed).sample(made, min(len(heldout), len(made)))}


@torch.no_grad()
def prompt_set_acceptance(target_model, samples: dict[str, Sequence], directories: dict[str, Path | str],
                          depth: int = 2) -> dict:
    """Each feature draft of ``directories`` (name -> exported directory, `model.load_feature_draft`): mean
    acceptance sum_x min(p, q) at T = 1 by depth 1..``depth`` (`online.depth_acceptance`) over the continuation
    positions of each prompt set's ``samples`` (name -> `FeatureSample` s, `online.continuation_samples`).
    Returns {"acceptance": {set: {draft: [...]}}, "positions": {set: n}}."""
    from specdec_lib.models.feature_net import load_feature_draft
    from specdec_lib.training.feature.online import depth_acceptance

    depth = _check_int("depth", depth, minimum=1)
    if not directories:
        raise ValueError("directories must name at least one feature draft")
    empty = [name for name, s in samples.items() if not s]
    if not samples or empty:
        raise ValueError(f"samples must hold at least one sequence per prompt set; empty: {empty}")
    drafts = {name: load_feature_draft(target_model, d) for name, d in directories.items()}
    return {"acceptance": {set_name: {name: depth_acceptance(draft, target_model, seqs, depth)
                                      for name, draft in drafts.items()} for set_name, seqs in samples.items()},
            "positions": {set_name: sum(len(s.tokens) - int(s.prompt_len) for s in seqs)
                          for set_name, seqs in samples.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", default="early_exit", choices=PROBES)
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0, help="early_exit, layer_skip (head_vocabulary: T = 1)")
    ap.add_argument("--depth", type=int, default=2, help="head_vocabulary, prompt_sets: drafted depths measured")
    ap.add_argument("--drafts", default=None,
                    help="prompt_sets: exported feature-draft directories, comma-separated; head_vocabulary: one "
                         "with a head vocabulary (default: the committed one)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="default: data/results/draft_probes/<probe>.json")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    lm = load_model("smollm2-135m-instruct", dtype=a.dtype)
    if a.probe in ("early_exit", "layer_skip"):
        sequences = sampled_continuations(lm, a.per_category, a.new_tokens, a.temperature)
        num_layers = len(lm.model.model.layers)
        result = (early_exit_acceptance(lm.model, sequences, list(range(2, num_layers + 1, 2)), a.temperature)
                  if a.probe == "early_exit" else
                  layer_skip_acceptance(lm.model, sequences, skip_patterns(num_layers), a.temperature))
        shown = {k: round(v, 4) for k, v in result["acceptance"].items()}
    elif a.probe == "head_vocabulary":
        from specdec_lib.training.feature.online import heldout_rollouts

        sequences = heldout_rollouts(lm, a.per_category, a.new_tokens)
        result = head_vocabulary_acceptance(lm.model, sequences, a.drafts, depth=a.depth)
        shown = {**result["acceptance"], "target_mass_outside": round(result["target_mass_outside"], 4)}
    else:
        from specdec_lib.models.feature_net import EAGLE_DIR
        from specdec_lib.training.feature.online import continuation_samples

        dirs = [Path(d) for d in a.drafts.split(",")] if a.drafts else [EAGLE_DIR]
        samples = {name: continuation_samples(lm, texts, a.new_tokens)
                   for name, texts in prompt_sets(a.per_category).items()}
        result = prompt_set_acceptance(lm.model, samples, {str(d): d for d in dirs}, depth=a.depth)
        sequences = samples["heldout"]
        shown = result["acceptance"]
    record = {"probe": a.probe, "parameters": vars(a), "target": lm.name, "prompts": len(sequences),
              "machine": f"{platform.machine()} {platform.system()}", **result}
    out = Path(a.out) if a.out else OUT_DIR / f"{a.probe}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print(json.dumps(shown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
