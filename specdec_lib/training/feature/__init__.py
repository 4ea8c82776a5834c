"""The feature-conditioned draft (EAGLE family: Li et al. 2024, "EAGLE: Speculative Sampling Requires
Rethinking Feature Uncertainty"): a small draft that reads the target's own last hidden state.

* `data`: target-sampled training text with the target's features and top-k next-token log-probs;
* `model`: the draft module (`FeatureDraft`), its export and loading;
* `train`: training (resumable), acceptance by depth;
* `session`: drafting with it inside speculative decoding (features handed over by the target's
  verification pass, no extra target forward).
"""
