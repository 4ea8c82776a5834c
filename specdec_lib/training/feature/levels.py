"""The training-time-test levels of the feature draft (as in EAGLE-3) and the acceptance by depth
measured with them.

A packed batch of sequences (tokens x, target features f) is drafted at every position at once, to
depth ``D``: level 1 is the chain itself (node i reads (x_i, f_{i-1}), the target's true feature); a
level-m node (i, m), m >= 2, is the m-th token of a chain drafted from root r = i - m + 1: it reads
(x_i, h^{(m-1)}_{i-1}), the draft's own output one level up at the previous position, and attends to
the true prefix up to r and to the nodes (r + 1, 2) ... (i, m) of its own chain (`level_mask`).

This is what the draft sees at depth m of a drafted chain whose first m - 1 tokens are the target's
sampled tokens, so q at level m measures depth-m acceptance (`acceptance_by_depth`) and a loss summed
over levels trains for it (`online.online_loss`). Level m is one forward over the chain plus levels
2..m (`levels_forward`; all earlier levels recomputed: D(D+1)/2 chain-lengths of work).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ...models.feature_net import FeatureDraft
from ..evaluation import overlap
from .data import FeatureSample

__all__ = ["Packed", "pack", "level_mask", "level_mask_of", "levels_forward", "draft_levels",
           "acceptance_by_depth", "mean_acceptance"]


class Packed:
    """Sequences laid end to end: ``ids`` [N], ``seq`` [N] (sequence number), ``pos`` [N] (position in
    its sequence), ``chain_features`` [N, H] (f_{i-1}; zero at a sequence start), ``row`` [N] (index of
    the target row predicting x_{i+1}, -1 at a sequence's last token), ``continuation`` [N] (bool:
    that row belongs to the sampled continuation)."""

    def __init__(self, samples: Sequence[FeatureSample]):
        ids, seq, pos, feats, row, cont = [], [], [], [], [], []
        row_at = 0
        for s_no, s in enumerate(samples):
            n = len(s.tokens)
            ids.append(s.tokens)
            seq.append(torch.full((n,), s_no))
            pos.append(torch.arange(n))
            f = s.features.float()
            feats.append(torch.cat([torch.zeros(1, f.shape[1]), f[: n - 1]]))
            r = torch.arange(row_at, row_at + n)
            r[-1] = -1
            row.append(r)
            row_at += n - 1
            cont.append(torch.arange(n) >= s.prompt_len - 1)
        self.ids, self.seq, self.pos = torch.cat(ids), torch.cat(seq), torch.cat(pos)
        self.chain_features, self.row, self.continuation = torch.cat(feats), torch.cat(row), torch.cat(cont)
        self.samples = list(samples)

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def pack(samples: Sequence[FeatureSample]) -> Packed:
    return Packed(samples)


def level_mask(packed: Packed, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The bool mask [levels * N, levels * N] of a forward over the chain and levels 2..``levels``
    (module docstring) and ``valid`` [levels * N]: the node's root lies in its own sequence."""
    return level_mask_of(packed.seq, packed.pos, levels)


def level_mask_of(seq: torch.Tensor, pos: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`level_mask` for positions given by their sequence numbers ``seq`` [N] and positions ``pos`` [N]
    (one sequence of length L: ``seq`` zeros, ``pos`` arange(L))."""
    n = int(seq.shape[0])
    idx = torch.arange(n).repeat(levels)
    level = torch.arange(1, levels + 1).repeat_interleave(n)
    seq = seq.repeat(levels)
    root = idx - level + 1
    seq_start = (idx - pos.repeat(levels))
    valid = root >= seq_start
    same_seq = seq[:, None] == seq[None, :]
    chain_key = (level[None, :] == 1) & (idx[None, :] <= root[:, None])
    own_chain = (level[None, :] >= 2) & (root[None, :] == root[:, None]) & (level[None, :] <= level[:, None])
    allowed = same_seq & (chain_key | own_chain)
    allowed |= torch.eye(levels * n, dtype=torch.bool)
    return allowed, valid


def _float_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def levels_forward(draft: FeatureDraft, ids: torch.Tensor, chain_features: torch.Tensor, pos: torch.Tensor,
                   allowed: torch.Tensor, levels: int) -> list[torch.Tensor]:
    """Hidden states [B, n, H] of every level 1..``levels`` for rows of ``ids`` [B, n] with chain
    features [B, n, H] (f_{i-1}) and positions [B, n], all rows sharing the mask ``allowed`` (of
    `level_mask_of`, [levels * n, levels * n])."""
    n = int(ids.shape[1])
    device = draft.student.get_input_embeddings().weight.device
    dtype = draft.student.get_input_embeddings().weight.dtype
    outs: list[torch.Tensor] = []
    chain_f = chain_features.to(device, dtype)
    for m in range(1, levels + 1):
        feats = [chain_f]
        for prev in outs:  # level k+1 reads level k's output at the previous position
            feats.append(torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], dim=1))
        width = m * n
        mask = _float_mask(allowed[:width, :width], dtype).to(device).expand(ids.shape[0], 1, width, width)
        hidden, _ = draft(ids.repeat(1, m).to(device), torch.cat(feats, dim=1), pos.repeat(1, m).to(device),
                          attention_mask=mask)
        outs.append(hidden[:, (m - 1) * n: m * n])
    return outs


def draft_levels(draft: FeatureDraft, packed: Packed, levels: int) -> list[torch.Tensor]:
    """Hidden states [N, H] of every level 1..``levels`` (level m row i = node (i, m))."""
    allowed, _ = level_mask(packed, levels)
    outs = levels_forward(draft, packed.ids[None], packed.chain_features[None], packed.pos[None], allowed, levels)
    return [h[0] for h in outs]


@torch.no_grad()
def acceptance_by_depth(draft: FeatureDraft, target_model, samples: Sequence[FeatureSample], depth: int = 8,
                        temperatures: Sequence[float] = (1.0,), batch: int = 4) -> dict:
    """Per-sequence sums of sum_x min(p(x), q(x)) over continuation positions, per depth 1..``depth``
    and temperature: ``sums`` [S, depth, len(temperatures)] and ``counts`` [S, depth] (p: the
    target's full distribution, from a teacher-forced target forward that also supplies the true
    features; q: the draft at level m, whose first m - 1 drafted tokens are the sampled ones).
    ``depth1_rows``: the (p, q) rows at depth 1 and T = temperatures[0] of the first sequences (for
    the positional acceptance vectors of the theory)."""
    sums = torch.zeros(len(samples), depth, len(temperatures), dtype=torch.float64)
    counts = torch.zeros(len(samples), depth, dtype=torch.long)
    rows_p, rows_q = [], []
    dev = target_model.get_input_embeddings().weight.device
    for at in range(0, len(samples), batch):
        chunk, logits_all = [], []
        for s in samples[at: at + batch]:
            hidden = target_model.model(input_ids=s.tokens[None].to(dev)).last_hidden_state[0]
            chunk.append(FeatureSample(s.tokens, s.prompt_len, hidden[:-1].float().cpu(), s.topk_idx, s.topk_logp))
            logits_all.append(target_model.lm_head(hidden[:-1]).float().cpu())
        packed = pack(chunk)
        target_logits = torch.cat(logits_all)
        outs = draft_levels(draft, packed, depth)
        _, valid = level_mask(packed, depth)
        n = len(packed)
        use = (packed.row >= 0) & packed.continuation
        for m, hidden in enumerate(outs, start=1):
            sel = use & valid[(m - 1) * n: m * n]
            rows = packed.row[sel]
            seq = packed.seq[sel] + at
            q_logits = draft.head(hidden[sel]).float().cpu()
            counts[:, m - 1].index_add_(0, seq, torch.ones_like(seq))
            for k, t in enumerate(temperatures):
                p = torch.softmax(target_logits[rows] / t, -1)
                q = torch.softmax(q_logits / t, -1)
                acc = overlap(p, q).double()
                sums[:, m - 1, k].index_add_(0, seq, acc)
                if m == 1 and k == 0 and len(rows_p) < 8:
                    rows_p.append(p[::8])
                    rows_q.append(q[::8])
    return {"depth": list(range(1, depth + 1)), "temperatures": [float(t) for t in temperatures],
            "sums": sums, "counts": counts, "depth1_rows": (torch.cat(rows_p), torch.cat(rows_q))}


def mean_acceptance(result: dict, select: Sequence[int] | None = None) -> dict[str, list[float]]:
    """Temperature -> mean acceptance per depth over the sequences ``select`` (default all) of an
    `acceptance_by_depth` result (a position-weighted mean)."""
    sums, counts = result["sums"], result["counts"]
    if select is not None:
        idx = torch.as_tensor(list(select), dtype=torch.long)
        sums, counts = sums[idx], counts[idx]
    total = counts.sum(0).clamp(min=1).double()
    return {str(t): (sums[:, :, k].sum(0) / total).tolist() for k, t in enumerate(result["temperatures"])}
