"""experiments.hsd_exact_table: HSD's two readings beside the target's and Block's exact laws."""

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
