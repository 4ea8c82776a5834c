"""`memory.release_freed_memory`: glibc's malloc_trim, harmless to live tensors, a bool everywhere."""

import torch

from specdec_lib.experiments.memory import release_freed_memory


def test_release_keeps_live_tensors_and_answers_a_bool():
    keep = torch.arange(10_000, dtype=torch.float64)
    for n in range(1, 40):  # freed chunks of changing sizes, as drafting leaves behind
        del_me = torch.ones(n * 7_919, dtype=torch.float64)
        del del_me
    assert isinstance(release_freed_memory(), bool)
    assert torch.equal(keep, torch.arange(10_000, dtype=torch.float64))
