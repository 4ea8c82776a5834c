"""The feature-conditioned draft (EAGLE family: Li et al. 2024, "EAGLE: Speculative Sampling Requires
Rethinking Feature Uncertainty"): a small draft that reads the target's own last hidden state. Its module
and runtime are `specdec_lib.models.feature_net` and `specdec_lib.models.feature`; here is its training:

* `data`: target-sampled text with the target's features and top-k next-token log-probs;
* `levels`: the training-time-test levels (depth-m drafting at every position at once), acceptance by depth;
* `online`: the training run (the target samples, the drafts train, in one process);
* `evaluate`: the record ``draft.json`` and the export.
"""
