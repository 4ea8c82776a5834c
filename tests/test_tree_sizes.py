"""experiments.tree_sizes: Sequoia's DP tree, k×L sequences and full k-ary trees of each size under one depth
bound, their labels on a measured frame and their tables."""

import pandas as pd
import pytest

from specdec_lib import experiments as E, theory
from specdec_lib.shapes import resolve_shape
from specdec_lib.tree import parent_depths

P_WR, P_IID = [0.6, 0.2, 0.1], [0.6, 0.15, 0.05]
TREES = ["Sequoia DP", "k×L (SpecInfer)", "k-ary", "k-ary, k ≥ 2"]


def test_size_arms_build_four_trees_per_size_under_the_depth_bound():
    sized = E.size_arms(P_WR, P_IID, [4, 8], max_depth=3)
    assert list(sized.arms) == [(t, n) for n in (4, 8) for t in TREES]
    assert {s for _, s in sized.arms.values()} == {"without_replacement", "iid"}
    assert sized.arms[("k×L (SpecInfer)", 4)][1] == "iid"
    for (tree, n), (shape, _) in sized.arms.items():
        parents = resolve_shape(shape)
        assert len(parents) <= n and max(parent_depths(parents)) + 1 <= 3, (tree, n)
    # the DP tree of 4 nodes and depth 3 on (0.6, 0.2, 0.1): 2.16 tokens (the contract's example)
    dp4 = sized.predicted.set_index(["tree", "size"]).loc[("Sequoia DP", 4)]
    assert dp4["predicted"] == pytest.approx(2.16) and dp4["nodes"] == 4
    assert sized.sequoia_trees[4] == theory.sequoia_tree(P_WR, size=4, depth=3)[0]
    assert sized.drafted[("Sequoia DP", 4)].startswith("DP depth ")
    assert sized.drafted[("k-ary", 8)] == sized.arms[("k-ary", 8)][0]
    assert set(sized.branching) == {(t, n) for n in (4, 8) for t in ("k×L (SpecInfer)", "k-ary")}
    # the k×L prediction uses the i.i.d. vector
    kl = sized.predicted.set_index(["tree", "size"]).loc[("k×L (SpecInfer)", 4), "predicted"]
    assert kl == pytest.approx(theory.expected_tokens_positional(resolve_shape(sized.arms[("k×L (SpecInfer)", 4)][0]), P_IID))


@pytest.mark.parametrize("sizes, depth", [([], 3), ([0], 3), ([4], 0)])
def test_bad_sizes_are_refused(sizes, depth):
    with pytest.raises(ValueError):
        E.size_arms(P_WR, P_IID, sizes, depth)


def _frame(sized):
    rows = []
    for label in sized.by_label():
        for prompt in ("a", "b"):
            for step, (tok, rb) in enumerate([(2.0, 2.5), (4.0, 3.5)]):
                rows += [{"arm": label, "prompt_id": prompt, "step": step, "verifier": "token", "expected_tokens": tok},
                         {"arm": label, "prompt_id": prompt, "step": step, "verifier": "token_rb", "expected_tokens": rb}]
    return pd.DataFrame(rows)


def test_labels_and_tables():
    sized = E.size_arms(P_WR, P_IID, [4], max_depth=3)
    assert list(sized.by_label()) == [f"{t} @ 4" for t in TREES]
    raw = _frame(sized)
    frame = sized.label(raw)
    assert "tree" not in raw and list(frame.columns[-3:]) == ["tree", "size", "drafted"]
    assert frame["tree"].iloc[0] == "Sequoia DP" and (frame["size"] == 4).all()
    assert frame["drafted"].iloc[0] == sized.drafted[("Sequoia DP", 4)]
    table = E.estimator_table(frame)
    assert table.loc[("k-ary", 4), "token"] == 3.0 and table.loc[("k-ary", 4), "token_rb"] == 3.0
    assert table.loc[("k-ary", 4), "token SD over contexts"] == pytest.approx(pd.Series([2.0, 4.0, 2.0, 4.0]).std())
    summary = E.size_summary(frame.query("verifier == 'token_rb'"), sized).set_index("tree")
    assert summary.loc["Sequoia DP", "mean"] == pytest.approx(3.0)
    assert summary.loc["Sequoia DP", "error %"] == pytest.approx(100 * (2.16 / 3.0 - 1))
    assert summary.loc["Sequoia DP", "prompts"] == 2
