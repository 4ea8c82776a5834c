"""Drafting with the feature draft inside speculative decoding.

Two sessions cooperate, data flowing one way per step:

* the target runs in a `FeatureTargetSession` (a `models.hf.KVSession` that also keeps the target's
  final hidden state of every committed position: ``features[j]`` is the feature after
  ``fixed[: j + 1]``). Its one verification forward already computes these, so handing them over
  costs no extra target forward;
* the draft runs in a `FeatureDraftSession`: a pending fixed token j is fed with the target's true
  feature ``features[j - 1]``; a drafted tree node is fed with the draft's own output at its parent
  (EAGLE's predicted feature). At commit the draft keeps only the root in its cache: the accepted
  nodes were fed with predicted features, so they are fed again, with the target's true ones, in
  front of the next tree (EAGLE does the same).

`FeatureDraftLM` is the `LanguageModel`-like object that `decoding.speculative_generate` takes as
``draft``; ``load_model("smollm2-135m-eagle")`` returns one together with its target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .cpu_linear import use_small_batch_linear
from .hf import KVSession, LanguageModel
from .kv_cache import with_cache
from .offline import load_target
from .feature_net import EAGLE_DIR, EAGLE_NAME, FeatureDraft, load_feature_draft

__all__ = ["FeatureTargetSession", "FeatureDraftSession", "FeatureDraftLM", "load_feature_draft_lm"]


@dataclass
class FeatureTargetSession(KVSession):
    """A target `KVSession` that records the final hidden state (after the last norm) of every
    position it commits: ``features`` (list of [H] tensors, one per cached position)."""

    features: list = field(init=False, default_factory=list)
    _node_hidden: dict = field(init=False, default_factory=dict)

    def _forward(self, ids, pos, mask, n_pending, feed, parents):
        model = self.lm.model
        out = model.model(input_ids=ids[None].to(self.lm.device), position_ids=pos[None].to(self.lm.device),
                          attention_mask=mask, use_cache=True, **with_cache(model.model, self.cache))
        hidden = out.last_hidden_state[0]
        self.features.extend(hidden[:n_pending].detach())
        for k, i in enumerate(feed):
            self._node_hidden[i] = hidden[n_pending + k].detach()
        return model.lm_head(hidden[n_pending:]).float()

    @torch.no_grad()
    def prefill(self) -> None:
        """Feed the fixed tokens before the last one (the prompt, at the first step) so their features
        exist before the first draft; the first tree forward then has nothing pending."""
        pending = self.fixed[self.cached: -1]
        if self.slots:
            raise ValueError("prefill between a tree forward and its commit")
        if pending:
            ids = torch.tensor(pending, dtype=torch.long)
            pos = torch.arange(self.cached, self.cached + len(pending))
            self._forward(ids, pos, None, len(pending), [], [])
            self.cached += len(pending)

    def commit(self, path, extra_token, tokens=None, parents=None):
        kept_before = self.cached
        emitted = super().commit(path, extra_token, tokens, parents)
        kept = self.cached - kept_before  # root and the accepted nodes that were fed
        for i in ([0] + [int(i) for i in path])[:kept]:
            self.features.append(self._node_hidden[i])
        self._node_hidden = {}
        return emitted


@dataclass
class FeatureDraftSession(KVSession):
    """The draft's session; ``source`` is the target's `FeatureTargetSession` of the same generation."""

    source: FeatureTargetSession | None = None
    _node_hidden: dict = field(init=False, default_factory=dict)

    def _true_feature(self, position: int) -> torch.Tensor:
        """The target's feature read at ``position`` (after fixed[: position]); zero at position 0."""
        if position == 0:
            return torch.zeros(self.lm.hidden_size, dtype=self.lm.dtype, device=self.lm.device)
        if self.source is None:
            raise ValueError("the feature draft reads the target's features: give the session a source")
        if position - 1 >= len(self.source.features):
            self.source.prefill()  # the first step: the target has not seen the prompt yet
        if position - 1 >= len(self.source.features):
            raise ValueError(f"the feature draft needs the target's feature at position {position - 1}, but the "
                             f"target session has {len(self.source.features)}: score the tree with the target first")
        return self.source.features[position - 1]

    def _forward(self, ids, pos, mask, n_pending, feed, parents):
        first = self.cached
        feats = [self._true_feature(first + k) for k in range(n_pending)]
        for i in feed:
            if i == 0:
                feats.append(self._true_feature(self.tree_start))
            elif parents[i] in self._node_hidden:
                feats.append(self._node_hidden[parents[i]])
            else:
                raise ValueError(f"tree node {i} is fed together with its parent {parents[i]}; the feature "
                                 f"draft needs the parent's output first (grow the tree level by level)")
        features = torch.stack(feats).to(self.lm.device, self.lm.dtype)
        hidden, _ = self.lm.draft(ids[None].to(self.lm.device), features[None], pos[None].to(self.lm.device),
                                  attention_mask=mask, past_key_values=self.cache, use_cache=True)  # FeatureDraft's own API
        hidden = hidden[0, n_pending:]
        for k, i in enumerate(feed):
            self._node_hidden[i] = hidden[k]
        return self.lm.draft.head(hidden).float()

    def _nodes_to_keep(self, path):
        self._node_hidden = {}
        return [0]  # the accepted nodes were fed with predicted features: fed again as pending tokens


class FeatureDraftLM:
    """The feature draft behind the attributes decoding needs from a `LanguageModel` (``name``,
    ``vocab_size``, ``device``, ``dtype``, ``max_context``, ``tokenizer``, ``model.config``), whose
    sessions read their features from the target session they are given."""

    def __init__(self, draft: FeatureDraft, target: LanguageModel, name: str, record_dir=None):
        self.draft = draft.eval()
        self.target = target
        self.record_dir = record_dir  # its draft.json: Sequoia's measured acceptance vector (sequoia:N shapes)
        self.model = draft.student  # config, embeddings and head, for KVSession and check_pair
        self.tokenizer = target.tokenizer
        self.name = name
        self.vocab_size = int(draft.student.get_output_embeddings().weight.shape[0])
        self.device = draft.student.get_input_embeddings().weight.device
        self.max_context = target.max_context
        self.hidden_size = draft.hidden_size
        on_cpu_fp32 = self.device.type == "cpu" and self.dtype == torch.float32
        self.small_batch_linears = use_small_batch_linear(draft) if on_cpu_fp32 else 0

    def __repr__(self) -> str:
        n = sum(p.numel() for n_, p in self.draft.named_parameters() if "embed" not in n_)
        return (f"FeatureDraftLM({self.name!r}, {n / 1e6:.1f}M params besides the shared embeddings, "
                f"vocab {self.vocab_size}, {self.dtype}, {self.device})")

    @property
    def dtype(self) -> torch.dtype:
        return self.draft.student.get_input_embeddings().weight.dtype

    @property
    def eos_token_id(self):
        return getattr(self.tokenizer, "eos_token_id", None)

    @torch.no_grad()
    def logits(self, ids) -> torch.Tensor:
        """Depth-1 draft logits [n, V] (float32) after each prefix of ``ids``: the target's features of
        ``ids`` (one causal target forward) are read at every position, as at the root of a tree."""
        ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
        hidden = self.target.model.model(input_ids=ids.to(self.target.device)).last_hidden_state
        feats = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1)
        pos = torch.arange(ids.shape[1])[None].to(self.device)
        out, _ = self.draft(ids.to(self.device), feats.to(self.device, self.dtype), pos)
        return self.draft.head(out[0]).float()

    def paired_sessions(self, target: LanguageModel, prompt_ids) -> tuple[FeatureTargetSession, FeatureDraftSession]:
        """The target's `FeatureTargetSession` and this draft's session reading from it."""
        source = FeatureTargetSession(target, prompt_ids)
        return source, self.session(prompt_ids, source=source)

    def session(self, prompt_ids, source: FeatureTargetSession | None = None) -> FeatureDraftSession:
        if source is None:
            raise ValueError("the feature draft reads the target's features: pass source= (the target's "
                             "FeatureTargetSession of the same generation)")
        return FeatureDraftSession(self, prompt_ids, source=source)


def load_feature_draft_lm(target: LanguageModel | None = None, device=None, dtype=None,
                          directory=None) -> FeatureDraftLM:
    """The committed feature draft (``data/models/smollm2-135m-eagle``) as a `FeatureDraftLM`, built
    on ``target`` (default: the offline target in ``dtype`` on ``device``)."""
    if target is None:
        target = load_target(device=device, dtype=dtype)
    directory = EAGLE_DIR if directory is None else directory
    return FeatureDraftLM(load_feature_draft(target, directory), target, EAGLE_NAME, record_dir=directory)
