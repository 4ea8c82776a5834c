"""Fixtures shared by the test modules."""

import pytest
import torch

from specdec_lib.models import load_model


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The test machine is shared: one intra-op thread avoids oversubscription (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def target():
    """The offline target, loaded once per test session."""
    return load_model("smollm2-135m-instruct")
