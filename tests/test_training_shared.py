"""What both draft-training stacks share (`specdec_lib.training`): batched target sampling, the objectives,
one-token forward timing and the measurements' common parts. Tiny random Llama models stand in for the target."""

import json

import pytest
import torch

from specdec_lib.training.distill import tiny_llama
from specdec_lib.training.evaluation import overlap, read_record, theory_vectors
from specdec_lib.training.losses import full_kl, sub_vocab_kl, sub_vocab_rejection, topk_kl
from specdec_lib.training.sampling import generate_continuations, left_padded, sample_batched
from specdec_lib.training.timing import (
    WARMUP, TimedForward, forward_time_ms, interleaved_seconds, measure_forward_times, random_tokens,
)

VOCAB = 48
EOS = 1


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=VOCAB, layers=2, hidden=32, seed=5)


# ----- sampling -------------------------------------------------------------------------------------

class _LastRows:
    """A recorder that keeps the next-token log-probs of every position of every sequence."""

    def prompt(self, out, batch):
        logp = torch.log_softmax(out.logits.float(), -1)
        self.rows = [[logp[b, batch.width - n:]] for b, n in enumerate(batch.lengths)]
        return logp[:, -1]

    def step(self, out, alive):
        last = torch.log_softmax(out.logits[:, -1].float(), -1)
        for b, live in enumerate(alive):
            if live:
                self.rows[b].append(last[b: b + 1])
        return last


def test_left_padding_counts_positions_from_each_prompt_start():
    batch = left_padded([[5, 6, 7], [9]], pad_token_id=3)
    assert batch.ids.tolist() == [[5, 6, 7], [3, 3, 9]] and batch.mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch.positions.tolist() == [[0, 1, 2], [0, 0, 0]] and batch.lengths == [3, 1] and batch.width == 3


def test_batched_sampling_rows_are_the_teacher_forced_target_rows_and_stop_at_eos(target):
    prompts = [[5, 6, 7], [9], [3, 4, 8, 2]]
    free = sample_batched(target, _LastRows(), prompts, 10, torch.Generator().manual_seed(0))
    assert [len(g) for g in free] == [10, 10, 10]
    eos = free[0][2]  # the first sequence meets it by its third token; the draws before are the same
    rows = _LastRows()
    generated = sample_batched(target, rows, prompts, 10, torch.Generator().manual_seed(0), eos_token_id=eos)
    again = sample_batched(target, _LastRows(), prompts, 10, torch.Generator().manual_seed(0), eos_token_id=eos)
    assert generated == again  # the generator is the only randomness
    first = free[0].index(eos)
    assert generated[0] == free[0][: first + 1]
    for b, (p, g) in enumerate(zip(prompts, generated)):
        assert 1 <= len(g) <= 10 and eos not in g[:-1] and g == free[b][: len(g)]
        tokens = torch.tensor(p + g)
        with torch.no_grad():  # left padding and the KV cache change nothing: the unpadded full forward
            ref = torch.log_softmax(target(tokens[None]).logits[0].float(), -1)
        got = torch.cat(rows.rows[b])  # a row for every token but the last
        assert got.shape[0] == len(tokens) - 1
        assert torch.allclose(got, ref[:-1], atol=1e-4)


def test_generate_keeps_prompts_right_pads_and_cuts_after_eos(target):
    prompts = [[5, 6, 7], [9], [3, 4]]
    roll = generate_continuations(target, prompts, 12, eos_token_id=EOS, pad_token_id=0, seed=0)
    assert roll.prompt_lens.tolist() == [3, 1, 2]
    for b, p in enumerate(prompts):
        n = int(roll.lengths[b])
        row = roll.ids[b].tolist()
        assert row[: len(p)] == p and len(p) < n <= len(p) + 12
        cont = row[len(p): n]
        assert EOS not in cont[:-1]  # cut after the first EOS
        assert all(t == 0 for t in row[n:])
    again = generate_continuations(target, prompts, 12, eos_token_id=EOS, pad_token_id=0, seed=0)
    assert torch.equal(again.ids, roll.ids)
    picked = roll.rows(torch.tensor([1]))
    assert picked.ids.shape == (1, int(roll.lengths[1])) and picked.features is None
    with pytest.raises(ValueError, match="prompts"):
        generate_continuations(target, [[1], []], 4, EOS, 0, 0)
    with pytest.raises(ValueError, match="new_tokens"):
        generate_continuations(target, [[1]], 0, EOS, 0, 0)


# ----- losses ---------------------------------------------------------------------------------------

def test_topk_kl_is_exact_with_full_rows_and_a_lower_bound_otherwise():
    gen = torch.Generator().manual_seed(3)
    logits_p, logits_q = torch.randn(5, VOCAB, generator=gen) * 2, torch.randn(5, VOCAB, generator=gen) * 2
    logp = torch.log_softmax(logits_p, -1)
    exact = (logp.exp() * (logp - torch.log_softmax(logits_q, -1))).sum(-1)
    assert torch.allclose(topk_kl(logits_q, None, logp), exact, atol=1e-5)
    assert torch.allclose(full_kl(logp, logits_q), exact, atol=1e-5)
    full_idx = torch.arange(VOCAB).expand(5, VOCAB)
    assert torch.allclose(topk_kl(logits_q, full_idx, logp.gather(-1, full_idx)), exact, atol=1e-5)
    vals, idx = logp.topk(8, -1)
    coarse = topk_kl(logits_q, idx, vals)
    assert bool((coarse <= exact + 1e-6).all()) and bool((coarse > 0).all())
    with pytest.raises(ValueError, match="shape mismatch"):
        topk_kl(logits_q, idx[:, :4], vals)


def test_sub_vocab_kl_is_the_full_kl_over_the_whole_vocabulary_and_a_lower_bound_otherwise():
    gen = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(5, 12, generator=gen), -1)
    logits = torch.randn(5, 12, generator=gen)
    assert torch.allclose(sub_vocab_kl(logp, logits, torch.arange(12)), full_kl(logp, logits), atol=1e-5)
    half = torch.arange(0, 12, 2)
    part = sub_vocab_kl(logp, logits[:, half], half)
    # the target's mass outside the head vocabulary is left out: the draft cannot put mass there
    outside = logp[:, 1::2].exp().sum(-1)
    assert bool(torch.isfinite(part).all()) and bool((outside > 0).all())


def test_sub_vocab_rejection_is_one_minus_the_acceptance_of_token_verification():
    from specdec_lib.experiments.regime import acceptance
    from specdec_lib.theory import total_variation

    gen = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(6, 12, generator=gen), -1)
    logits = torch.randn(6, 12, generator=gen)
    p, q = logp.exp(), torch.softmax(logits, -1)
    rejection = sub_vocab_rejection(logp, logits, torch.arange(12))
    assert torch.allclose(rejection, total_variation(p, q).float(), atol=1e-6)
    assert float(1 - rejection.mean()) == pytest.approx(acceptance(p.double(), q.double()), abs=1e-6)
    half = torch.arange(0, 12, 2)  # a head vocabulary: the draft is 0 outside it, the target's mass there is rejected
    q_half = torch.zeros_like(p)
    q_half[:, half] = torch.softmax(logits[:, half], -1)
    assert torch.allclose(sub_vocab_rejection(logp, logits[:, half], half), total_variation(p, q_half).float(), atol=1e-6)


# ----- evaluation -----------------------------------------------------------------------------------

def test_overlap_is_one_minus_total_variation_and_the_first_positional_acceptance():
    from specdec_lib.theory import total_variation

    gen = torch.Generator().manual_seed(2)
    p = torch.softmax(torch.randn(40, 10, generator=gen), -1).double()
    q = torch.softmax(torch.randn(40, 10, generator=gen), -1).double()
    assert torch.allclose(overlap(p, q), 1 - total_variation(p, q), atol=1e-12)
    assert torch.allclose(overlap(p, p), torch.ones(40, dtype=torch.float64))
    vectors = theory_vectors(p, q, max_children=3, num_samples=4)
    # p_1 of sampling without replacement is sum_x min(p, q); the race's first index cannot beat it (MC slack)
    assert vectors["sequoia_positional_acceptance"][0] == pytest.approx(float(overlap(p, q).mean()), abs=3e-3)
    assert 0.0 < vectors["erss_r_vector"][0] <= float(overlap(p, q).mean()) + 0.05
    assert vectors == theory_vectors(p, q, max_children=3, num_samples=4)  # seeded


def test_a_record_is_read_when_there_is_one(tmp_path):
    assert read_record(tmp_path) is None
    (tmp_path / "draft.json").write_text(json.dumps({"name": "d"}))
    assert read_record(tmp_path) == {"name": "d"}


# ----- timing ---------------------------------------------------------------------------------------

def test_timed_calls_alternate_on_fresh_cache_copies_and_drop_the_warm_up():
    seen = []

    def call(name):
        def run(cache):
            cache.append(name)  # a copy: the base cache stays as it was
            seen.append((name, len(cache)))
        return TimedForward([0], run)

    a, b = call("a"), call("b")
    times = interleaved_seconds([a, b], repeats=3, device=torch.device("cpu"))
    assert [len(t) for t in times] == [3, 3] and all(x >= 0 for t in times for x in t)
    assert seen == [("a", 2), ("b", 2)] * (3 + WARMUP) and a.base_cache == [0] == b.base_cache


def test_forward_times_of_a_tiny_pair(target):
    prefix, token = random_tokens(6, VOCAB, seed=1)
    assert prefix.shape == (1, 6) and token.shape == (1, 1) and int(prefix.max()) < VOCAB
    assert torch.equal(random_tokens(6, VOCAB, seed=1)[0], prefix)
    assert forward_time_ms(target, prefix_len=6, repeats=2) > 0
    draft = tiny_llama(vocab_size=VOCAB, layers=1, hidden=32, seed=6)
    rec = measure_forward_times(draft, target, prefix_len=6, repeats=2, rounds=2)
    assert rec["ratio"] == pytest.approx(rec["draft_ms"] / rec["target_ms"]) and rec["repeats"] == 4
