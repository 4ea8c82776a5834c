"""experiments.hsd_exact_table: HSD's two readings beside the target's and Block's exact laws; block_token_gap_table:
Block against token verification at temperature 0 and 1."""

import pytest

from specdec_lib import experiments as E
from specdec_lib.models.synthetic import ContextIndependentLM

PAIR = (ContextIndependentLM([0.5, 0.3, 0.2]), ContextIndependentLM([0.2, 0.3, 0.5]))


def test_the_papers_hsd_is_blocks_law_and_the_released_code_is_not_lossless():
    table = E.hsd_exact_table({"p": PAIR}, gammas=(2,)).set_index("verifier")
    assert table.loc["hsd", "max |output law − target|"] < 1e-12
    assert table.loc["hsd", "max |law − Block's law|"] < 1e-12
    assert table.loc["hsd", "tokens per step"] == pytest.approx(2.25, abs=1e-12)
    assert table.loc["hsd_released", "max |output law − target|"] > 1e-2
    assert table.loc["hsd_released", "tokens per step"] == pytest.approx(2.31, abs=1e-12)


@pytest.mark.parametrize("toys, gammas", [({}, (1,)), ({"p": PAIR}, ()), ({"p": PAIR}, (0,)), ({"p": PAIR}, (1.5,))])
def test_bad_tables_are_refused(toys, gammas):
    with pytest.raises(ValueError):
        E.hsd_exact_table(toys, gammas)


def test_block_keeps_token_verifications_tokens_at_temperature_0_and_more_at_1():
    # the context-free pair at gamma = 2, T = 1: token 1.7 + 0.49 = 2.19 (two independent accepts), block 2.25
    table = E.block_token_gap_table({"p": PAIR}, temperatures=(0.0, 1.0), gammas=(2,)).set_index("temperature")
    assert table.loc[0.0, "block − token"] == 0.0 and table.loc[0.0, "tokens per step (token)"] == 1.0
    assert table.loc[1.0, "tokens per step (token)"] == pytest.approx(2.19, abs=1e-12)
    assert table.loc[1.0, "block − token"] == pytest.approx(0.06, abs=1e-12)


@pytest.mark.parametrize("toys, temperatures, gammas", [({}, (0.0,), (1,)), ({"p": PAIR}, (), (1,)),
                                                         ({"p": PAIR}, (0.0,), (0,)), ({"p": PAIR}, (-1.0,), (1,))])
def test_bad_gap_tables_are_refused(toys, temperatures, gammas):
    with pytest.raises(ValueError):
        E.block_token_gap_table(toys, temperatures, gammas)
