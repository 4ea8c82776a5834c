"""The feature-draft protocol is lossless: exact laws on a toy pair whose draft reads the target's state.

`FeatureToyDraft` rows depend on where a tree is rooted (true target feature before the root, own
predicted features below it), as in `specdec_lib.models.feature`. Every verifier must give the
target's law over several steps; a control that verifies with rows other than those the children
were drawn from (the rows of a re-rooted draft: "true features everywhere") must fail.
"""

from collections import defaultdict

import pytest
import torch

from specdec_lib.exact import enumerate_drafts, max_abs_diff, multistep_output_law, target_law
from specdec_lib.models.synthetic import FeatureToyDraft, random_markov_pair
from specdec_lib.tree import DraftTree
from specdec_lib.verifiers import get_verifier

PREFIX = (0, 1)


def pair(seed=0, vocab=4):
    target, _ = random_markov_pair(vocab, 0.5, seed)
    return target, FeatureToyDraft(target, seed=seed + 1)


def test_rows_depend_on_the_root():
    target, draft = pair()
    ctx = PREFIX + (2,)
    as_root = draft.probs(ctx)
    as_child = draft.rooted(PREFIX).probs(ctx)
    assert float((as_root - as_child).abs().max()) > 1e-3
    assert abs(float(as_child.sum()) - 1.0) < 1e-12


@pytest.mark.parametrize("verifier, sampling, parents", [
    ("token", "iid", [-1, 0, 1]),
    ("block", "iid", [-1, 0, 1, 2]),
    ("traversal", "without_replacement", [-1, 0, 0, 1]),
    ("token", "without_replacement", [-1, 0, 0, 1, 2]),
])
def test_multistep_law_is_the_target_law(verifier, sampling, parents):
    target, draft = pair()
    law = multistep_output_law(verifier, target, draft, PREFIX, parents, sampling, horizon=4)
    assert max_abs_diff(law, target_law(target, PREFIX, 4)) < 1e-12


def _step_law_with_rerooted_rows(verifier, target, draft, parents, sampling, horizon):
    """One step whose children were drawn from the rooted draft but whose verifier reads the rows of
    the draft re-rooted at every node (the bug of verifying with true-feature rows)."""
    v = get_verifier(verifier)
    out = defaultdict(float)
    for pd, tree in enumerate_drafts(target, draft, PREFIX, parents, sampling):
        toks = tree.tokens.tolist()
        contexts = [PREFIX]
        for i in range(1, len(parents)):
            contexts.append(contexts[parents[i]] + (toks[i],))
        wrong = DraftTree(tree.tokens, tree.parents, torch.stack([draft.probs(c) for c in contexts]),
                          tree.target_probs, tree.sampling)
        law = v.law(wrong, None)
        nodes, ys = torch.nonzero(law > 0, as_tuple=True)
        for i, y, p in zip(nodes.tolist(), ys.tolist(), law[nodes, ys].tolist()):
            emitted = tuple(toks[j] for j in wrong.path_to(i)) + (y,)
            for cont, pc in target_law(target, PREFIX + emitted, horizon - len(emitted)).items():
                out[emitted + cont] += pd * p * pc
    return dict(out)


def test_control_rows_from_another_root_break_losslessness():
    target, draft = pair()
    parents = [-1, 0, 1]
    law = _step_law_with_rerooted_rows("token", target, draft, parents, "iid", 3)
    assert max_abs_diff(law, target_law(target, PREFIX, 3)) > 1e-3
