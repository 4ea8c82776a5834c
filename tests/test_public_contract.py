"""The public contract code block of docs/ARCHITECTURE.md runs as written, with ``HF_HUB_OFFLINE=1``.

huggingface_hub reads ``HF_HUB_OFFLINE`` when it is imported, so setting it inside an already running
test process proves little: the contract runs in a fresh interpreter with the variable set (issue 4:
"Runs with HF_HUB_OFFLINE=1"; the offline pair needs no network).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONTRACT = textwrap.dedent("""
    import torch
    torch.set_num_threads(1)
    from specdec_lib.tree import DraftTree
    from specdec_lib.verifiers import verify, VERIFIERS, Outcome
    from specdec_lib.models import load_model
    from specdec_lib.decoding import speculative_generate, autoregressive_generate
    from specdec_lib.theory import sequoia_tree

    from specdec_lib.verifiers import NOT_LOSSLESS, declared_pairs
    assert {"token", "asps", "block", "greedy_block", "traversal", "erss", "spectr", "match", "hsd"} <= set(VERIFIERS)
    # every verifier declares the (shape, sampling) pairs it accepts and whether it is lossless
    assert all(v.lossless is True and v.accepts for v in VERIFIERS.values())
    assert all(v.lossless is False and v.accepts for v in NOT_LOSSLESS.values())
    assert ("block", "chain", "iid") in declared_pairs(VERIFIERS)
    assert ("block", "tree", "iid") not in declared_pairs(VERIFIERS)
    tree = DraftTree(torch.tensor([0, 1]), torch.tensor([-1, 0]),
                     torch.tensor([[.5, .5], [0., 0.]]), torch.tensor([[.5, .5], [.5, .5]]), sampling="iid", race=None)
    v = verify("block", tree, torch.Generator().manual_seed(0))
    assert isinstance(v, Outcome) and isinstance(v.path, tuple) and v.path == (1,)   # P == Q: accepted
    emitted = [int(tree.tokens[i]) for i in v.path] + [v.token]

    target = load_model("smollm2-135m-instruct")
    draft = load_model("smollm2-135m-draft")
    prompt_ids = target.encode("Hello")
    out = speculative_generate(target, draft, prompt_ids, verifier="block", shape="chain:8",
                               temperature=1.0, top_p=1.0, max_new_tokens=6, seed=0)
    assert len(out.tokens) == 6 and out.steps
    s = out.steps[0]
    assert s.drafted == 8 and s.emitted >= 1 and min(s.draft_s, s.target_s, s.verify_s) >= 0
    ar = autoregressive_generate(target, prompt_ids, temperature=1.0, top_p=1.0, max_new_tokens=2, seed=0)
    assert len(ar.tokens) == 2

    tree_shape, expected_tokens = sequoia_tree([.6, .2, .1], size=4, depth=3)
    assert tree_shape[0] == -1 and len(tree_shape) == 4 and abs(expected_tokens - 2.16) < 1e-9
    print("CONTRACT OK")
""")


def test_architecture_contract_runs_offline():
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", CONTRACT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "CONTRACT OK" in res.stdout
