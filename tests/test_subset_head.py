"""The sub-vocabulary draft head: the same logits on its tokens, -inf elsewhere; its frequency ranking;
loading it with the draft; and exact losslessness of the verifiers with a draft whose support is a
fixed subset of the vocabulary (what a SubsetHead draft is)."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from specdec_lib.exact import enumerate_drafts, max_abs_diff, target_law
from specdec_lib.models.subset_head import SubsetHead, frequent_tokens, use_subset_head
from specdec_lib.models.synthetic import MarkovLM, random_markov_pair
from specdec_lib.tree import DraftTree, binary, chain_parents
from specdec_lib.verifiers import get_verifier


@pytest.mark.parametrize("shape", [(1,), (1, 1), (4,), (2, 3)])
def test_subset_head_matches_full_head_on_its_tokens(shape):
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(50, 8))
    ids = torch.tensor([7, 0, 49, 13, 22])
    head = SubsetHead(weight, ids)
    x = torch.randn(*shape, 8)
    with torch.no_grad():
        out, full = head(x), x @ weight.T
    assert out.shape == (*shape, 50)
    torch.testing.assert_close(out[..., ids], full[..., ids], rtol=1e-5, atol=1e-5)
    outside = torch.ones(50, dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(out[..., outside]).all()
    probs = torch.softmax(out, -1)
    torch.testing.assert_close(probs[..., ids], torch.softmax(full[..., ids], -1))
    with torch.no_grad():            # the cached rows follow in-place weight updates
        weight.mul_(3.0)
        torch.testing.assert_close(head(x)[..., ids], (x @ weight.T)[..., ids], rtol=1e-5, atol=1e-5)


def test_subset_head_rejects_bad_ids():
    weight = torch.nn.Parameter(torch.randn(10, 4))
    for ids in ([], [3, 10], [-1], [2, 2]):
        with pytest.raises(ValueError, match="vocab_ids"):
            SubsetHead(weight, torch.tensor(ids, dtype=torch.long))


def test_frequent_tokens_ranks_by_count_then_id():
    assert frequent_tokens([[5, 3, 3, 9], [9, 3, 1]], 3) == [3, 9, 1]
    assert frequent_tokens([[2, 2]], 5) == [2]
    with pytest.raises(ValueError):
        frequent_tokens([[1]], 0)


def test_use_subset_head_on_a_tiny_llama_keeps_vocab_width():
    from transformers import LlamaConfig, LlamaForCausalLM

    from specdec_lib.models import LanguageModel

    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 300, (1, 5))
    with torch.no_grad():
        full = model(ids).logits
    keep = torch.arange(0, 300, 3)
    use_subset_head(model, keep)
    lm = LanguageModel(model, None, "tiny-subset")
    assert lm.vocab_size == 300
    with torch.no_grad():
        sub = lm.model(ids).logits
    torch.testing.assert_close(sub[..., keep], full[..., keep], rtol=1e-5, atol=1e-5)
    assert torch.isneginf(sub[..., 1]).all()


def _restricted(draft: MarkovLM, keep: list[int]) -> MarkovLM:
    """The draft's rows restricted to ``keep`` and renormalised: softmax over a SubsetHead's tokens."""
    mask = torch.zeros(draft.vocab_size, dtype=torch.float64)
    mask[keep] = 1.0

    def cut(row):
        row = row * mask
        return row / row.sum()

    return MarkovLM(cut(draft.initial), torch.stack([cut(r) for r in draft.transition]))


def _step_law_error(verifier, parents, sampling, relabel=None):
    """Max |law - target law| of one step's first tokens (continued by the target) with a draft that never
    proposes tokens 3 and 4 although the target gives them mass. ``relabel(tree)`` replaces the tree the
    verifier sees (controls)."""
    target, full_draft = random_markov_pair(5, 0.6, seed=3, eos=False)
    draft = _restricted(full_draft, [0, 1, 2])
    assert float(target.initial[3:].sum()) > 0.05 and float(target.transition[:, 3:].sum(1).min()) > 0.01
    v = get_verifier(verifier)
    depth = max(len(list(_ancestors(parents, i))) for i in range(len(parents))) + 1
    emitted = defaultdict(float)
    for prob, tree in enumerate_drafts(target, draft, (0,), list(parents), sampling):
        law = v.law(relabel(tree, full_draft) if relabel else tree, None)
        toks = tree.tokens.tolist()
        nodes, ys = torch.nonzero(law > 0, as_tuple=True)
        for i, y, p in zip(nodes.tolist(), ys.tolist(), law[nodes, ys].tolist()):
            emitted[tuple(toks[j] for j in tree.path_to(i)) + (y,)] += prob * p
    out = defaultdict(float)
    for seq, p in emitted.items():
        for cont, pc in target_law(target, (0,) + seq, depth - len(seq)).items():
            out[seq + cont] += p * pc
    return max_abs_diff(dict(out), target_law(target, (0,), depth))


def _with_unrestricted_rows(tree, full_draft):
    """Control: the tree verified with the full draft's rows, not the restricted rows it was drawn from
    (a subset head whose q is not the one used for drafting)."""
    rows = torch.stack([full_draft.transition[t] for t in tree.tokens.tolist()]).to(tree.draft_probs.dtype)
    return DraftTree(tree.tokens, tree.parents, rows, tree.target_probs, tree.sampling)


CASES = [("token", tuple(chain_parents(3)), "iid"), ("block", tuple(chain_parents(3)), "iid"),
         ("traversal", tuple(binary(2)), "iid"), ("token", tuple(binary(2)), "without_replacement"),
         ("spectr", tuple(binary(2)), "iid")]


@pytest.mark.parametrize("verifier,parents,sampling", CASES)
def test_draft_on_a_subset_is_still_lossless(verifier, parents, sampling):
    assert _step_law_error(verifier, parents, sampling) < 1e-9


@pytest.mark.parametrize("verifier,parents,sampling", CASES[:3])
def test_control_verifying_with_the_wrong_rows_is_not_lossless(verifier, parents, sampling):
    assert _step_law_error(verifier, parents, sampling, relabel=_with_unrestricted_rows) > 1e-3


def _ancestors(parents, i):
    while i > 0:
        yield i
        i = parents[i]
