"""Wall-clock cost of the verifiers themselves (no model calls), on random trees at a real
vocabulary size: ``python scripts/verifier_timing.py [--vocab 49152 --gamma 8]``.

The trees have random target rows ``softmax(z)`` and draft rows ``softmax(z + noise)`` (so
acceptance is neither 0 nor 1) in float32, as a model would give them; drafts are sampled from the
draft rows. Each call times `specdec_lib.verifiers.verify` (its tree check plus its sampler), the
call the decode loop makes, and reports the median over ``repeats`` calls in milliseconds. This is
a measurement, never an assertion: it depends on the machine and on its load.

By default the measurement runs with one torch thread (restored afterwards): the verifiers are a
few full-vocabulary vector passes, and on a shared machine torch's intra-op thread pool contends
with other processes (a [9, 49152] sum took 25 ms with 2 threads under load, 0.08 ms with 1).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Sequence

import torch

from specdec_lib import tree as tree_mod
from specdec_lib.tree import DraftTree, chain_parents
from specdec_lib.verifiers import VERIFIERS, get_verifier, verify

DEFAULT_NAMES = ("token", "asps", "block", "greedy_block")


def random_tree(vocab_size: int, parents: Sequence[int], generator: torch.Generator,
                noise: float = 1.0, sampling: str = "iid") -> DraftTree:
    """A tree of shape ``parents`` with random float32 rows; children drawn iid from their
    parent's draft row (``sampling`` is recorded as given: use "iid" for chains and trees)."""
    n = len(parents)
    logits = 3.0 * torch.randn(n, vocab_size, generator=generator, dtype=torch.float64)
    # softmax in float64, then float32 rows: a float32 softmax over 49k peaked logits can miss a
    # total of 1 by more than DraftTree's 1e-5 tolerance (as `sampling.process_logits` notes)
    target = torch.softmax(logits, dim=1).float()
    noisy = logits + noise * torch.randn(n, vocab_size, generator=generator, dtype=torch.float64)
    draft = torch.softmax(noisy, dim=1).float()
    tokens = [0] * n
    tokens[0] = int(torch.randint(vocab_size, (1,), generator=generator))
    for i in range(1, n):
        tokens[i] = int(torch.multinomial(draft[parents[i]], 1, generator=generator))
    return DraftTree(torch.tensor(tokens), torch.tensor(list(parents)), draft, target, sampling)


def _parents_of(shape: str | Sequence[int]) -> list[int]:
    if isinstance(shape, str):
        parse = getattr(tree_mod, "parse_shape", None)
        if parse is None:
            raise ValueError("shape strings need specdec_lib.tree.parse_shape; give a parents list instead")
        return list(parse(shape))
    return [int(p) for p in shape]


def time_verifiers(names: Sequence[str] = DEFAULT_NAMES, vocab_size: int = 49152, gamma: int = 8,
                   repeats: int = 30, seed: int = 0, shapes: Sequence[str | Sequence[int]] | None = None,
                   num_trees: int = 4, threads: int | None = 1) -> dict[str, float]:
    """Median milliseconds per `verify` call for each verifier.

    Without ``shapes`` the trees are chains of ``gamma`` drafts and the keys are the verifier names.
    With ``shapes`` (shape strings for `tree.parse_shape` or parents lists) the keys are
    ``"name shape"``; verifiers that refuse a shape (their check raises ValueError) are left out.
    ``threads`` torch threads are used while timing (None keeps the current setting).
    """
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _time(names, vocab_size, gamma, repeats, seed, shapes, num_trees)
    finally:
        torch.set_num_threads(previous)


def _time(names, vocab_size, gamma, repeats, seed, shapes, num_trees) -> dict[str, float]:
    gen = torch.Generator().manual_seed(seed)
    layouts = [("", chain_parents(gamma))] if shapes is None else [
        (f" {s if isinstance(s, str) else 'parents:' + ','.join(map(str, s))}", _parents_of(s)) for s in shapes]
    out: dict[str, float] = {}
    for label, parents in layouts:
        trees = [random_tree(vocab_size, parents, gen) for _ in range(num_trees)]
        for name in names:
            verifier = get_verifier(name)
            try:
                verifier.check(trees[0])
            except ValueError:
                continue
            call_gen = torch.Generator().manual_seed(seed)
            for tree in trees:          # warm-up
                verify(name, tree, call_gen)
            samples = []
            for r in range(repeats):
                tree = trees[r % num_trees]
                start = time.perf_counter()
                verify(name, tree, call_gen)
                samples.append((time.perf_counter() - start) * 1e3)
            out[name + label] = statistics.median(samples)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", default=list(DEFAULT_NAMES),
                        help=f"verifiers to time (known: {', '.join(sorted(VERIFIERS))})")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--gamma", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes", nargs="*", default=None, help="tree shapes (e.g. binary:4) instead of chains")
    parser.add_argument("--threads", type=int, default=1, help="torch threads while timing (0: leave as is)")
    args = parser.parse_args(argv)
    threads = args.threads or None
    result = time_verifiers(args.names, args.vocab, args.gamma, args.repeats, args.seed, args.shapes,
                            threads=threads)
    what = f"chain gamma={args.gamma}" if args.shapes is None else "trees"
    print(f"verifier timing: V={args.vocab}, {what}, median of {args.repeats} calls, "
          f"{threads or torch.get_num_threads()} torch thread(s)")
    print(f"{'verifier':<32}{'median ms':>10}")
    for name, ms in result.items():
        print(f"{name:<32}{ms:>10.3f}")
    return result


if __name__ == "__main__":
    main()
