"""Hierarchical Speculative Decoding as the authors' released code runs it (NOT lossless: measured only).

The same backward scan as `hsd` (the paper's Algorithm 2; capped ratios ``w_t = Lambda_t / max(1,
max_{i<=t} Lambda_i)`` at levels t < g, stop probability ``E_t / max(E_t, D_t)``), except that all g drafts are
accepted with probability ``min(1, Lambda_g)``, the uncapped joint ratio, instead of ``min(r*, 1)``. The line is
in ZhouYuxuanYX/Hierarchical-Speculative-Decoding, ``transformers/generation/utils.py``, function
``_speculative_sampling`` (the ``backward=True`` path that ``eval_speculative_qwen_backward_clever.sh`` runs
for GSM8K; the paper's Listing 2)::

    probability_ratio = torch.exp(torch.log(p_i).cumsum(1) - torch.log(q_i).cumsum(1)).unsqueeze(-1)
    is_accepted = r_i <= probability_ratio
    select[torch.arange(p_primes.shape[0]), stop_positions] = ~is_accepted[:, -1:]

Where an earlier prefix had ``Lambda_i > 1``, ``min(1, Lambda_g) > min(r*, 1)``: the full chain is accepted too
often and the output law is not the target's (exact enumeration, tests/test_hsd.py; docs/papers/hsd.md). It is
registered in `specdec_lib.verifiers.NOT_LOSSLESS`: ``verify`` / ``exact_law`` measure it, decoding refuses it.
"""

from __future__ import annotations



from .hsd import chain_verifier

NAME = "hsd_released"


VERIFIER = chain_verifier(
    NAME, released=True, lossless=False,
    description="HSD as released (authors' transformers fork, generation/utils.py _speculative_sampling; NOT "
                "lossless, measured only): the paper's scan, whole chain accepted with min(1, Lambda_gamma).",
)
law, sample, check = VERIFIER.law, VERIFIER.sample, VERIFIER.check
