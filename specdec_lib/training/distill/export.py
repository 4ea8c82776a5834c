"""The contract's offline draft format: ``layers.safetensors`` + ``draft.json`` (`export_draft`,
`load_exported`, `committed_record`), the draft's head vocabulary (`write_head_vocab`), and the trainable
weights rounded to the export dtype while measuring (`_RoundedWeights`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ...models.offline import DRAFT_HEAD_VOCAB_FILE, apply_head_vocab, build_student
from ...models.subset_head import frequent_tokens
from ..evaluation import RECORD_FILE, read_record
from .data import REPO_ROOT, _shards, load_samples
from .loss import trainable_parameters

DEFAULT_EXPORT_DIR = REPO_ROOT / "data" / "models" / "smollm2-135m-draft"
TARGET_NAME = "smollm2-135m-instruct"
LAYERS_FILE = "layers.safetensors"


def _atomic_json(obj, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _student_tensors(student) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous() for k, v in student.state_dict().items()
            if k.startswith("model.layers.") or k == "model.norm.weight"}


def export_draft(student, out_dir: Path | str, record: dict, dtype: str = "bfloat16") -> Path:
    """Write the contract's draft format: ``layers.safetensors`` (``model.layers.{i}.*`` and
    ``model.norm.weight`` in ``dtype``) and ``draft.json`` (``record`` + ``num_hidden_layers``,
    ``base_model``, ``dtype``). Atomic per file. Returns ``out_dir``. A ``head_vocab.safetensors`` already
    in ``out_dir`` is kept and used when the draft is loaded; the record written here describes the
    full head until `remeasure_export` (``--remeasure``) measures the draft as deployed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(getattr(torch, dtype)).cpu().contiguous() for k, v in _student_tensors(student).items()}
    save_file(tensors, str(out / "layers.tmp"), metadata={"format": "pt", "base_model": record.get(
        "base_model", TARGET_NAME)})
    os.replace(out / "layers.tmp", out / LAYERS_FILE)
    os.chmod(out / LAYERS_FILE, 0o644)
    full = {"num_hidden_layers": int(student.config.num_hidden_layers), "base_model": TARGET_NAME,
            "dtype": dtype}
    full.update(record)
    _atomic_json(full, out / RECORD_FILE)
    return out


def load_exported(target_model, out_dir: Path | str, head_vocab: bool = False):
    """Student built from ``target_model`` (HF module or LanguageModel) + ``layers.safetensors`` of
    ``out_dir``; with ``head_vocab``, also its sub-vocabulary head when ``out_dir`` has one (then the
    same as ``load_model("smollm2-135m-draft")`` for the committed draft). Training uses the full head."""
    out = Path(out_dir)
    record = json.loads((out / RECORD_FILE).read_text())
    student = build_student(target_model, int(record["num_hidden_layers"]))
    state = load_file(str(out / LAYERS_FILE))
    expected = set(_student_tensors(student))
    if set(state) != expected:
        raise ValueError(f"{out / LAYERS_FILE} does not match a {record['num_hidden_layers']}-layer student")
    dtype = student.get_input_embeddings().weight.dtype
    student.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    if head_vocab:
        apply_head_vocab(student, out)
    return student.eval()


class _RoundedWeights:
    """Context manager: the trainable weights rounded to the export dtype (and restored afterwards), so
    that measurements describe exactly the exported draft."""

    def __init__(self, student, dtype: str):
        self.params = trainable_parameters(student)
        self.dtype = getattr(torch, dtype)

    def __enter__(self):
        self.saved = {k: p.detach().clone() for k, p in self.params.items()}
        with torch.no_grad():
            for p in self.params.values():
                p.copy_(p.to(self.dtype).to(p.dtype))

    def __exit__(self, *exc):
        with torch.no_grad():
            for k, p in self.params.items():
                p.copy_(self.saved[k])
        return False


def write_head_vocab(export_dir: Path | str, run_dir: Path | str, size: int) -> dict:
    """Write ``head_vocab.safetensors`` to ``export_dir``: the ``size`` most frequent tokens of the run's
    target-generated training text (`subset_head.frequent_tokens`). Returns its description."""
    shards = _shards(Path(run_dir))
    if not shards:
        raise ValueError(f"no training text under {Path(run_dir) / 'data'}: run the distillation first")
    texts = [s.tokens.tolist() for path in shards for s in load_samples(path)]
    ids = frequent_tokens(texts, size)
    save_file({"vocab_ids": torch.tensor(ids, dtype=torch.int64)}, str(Path(export_dir) / DRAFT_HEAD_VOCAB_FILE))
    return {"size": len(ids), "source": f"most frequent tokens of {sum(map(len, texts))} tokens of "
                                        f"target-sampled training text ({len(texts)} sequences)"}


def committed_record(directory: Path | str = DEFAULT_EXPORT_DIR) -> dict | None:
    """The committed draft's ``draft.json`` (None when there is no committed draft; `evaluation.read_record`)."""
    return read_record(directory)
