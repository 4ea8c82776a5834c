"""Training the drafts, one stack: the independent draft (`distill`, DistillSpec-style) and the feature draft
(`feature`, EAGLE-style) share the target's batched sampling (`sampling`), the objectives (`losses`), the
one-token forward timing (`timing`), what their measurements have in common (`evaluation`) and the self-made
instructions their text starts from (`prompts`).

    python -m specdec_lib.training.distill --minutes 60              # the independent draft
    python -m specdec_lib.training.feature.online --minutes 8 --device cuda   # the feature draft
"""
