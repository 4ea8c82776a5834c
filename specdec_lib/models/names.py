"""The names `load_model` knows without a download: the offline target and the project's three drafts."""

TARGET_NAME = "smollm2-135m-instruct"
DRAFT_NAME = "smollm2-135m-draft"
EAGLE_NAME = "smollm2-135m-eagle"  # the feature draft (models.feature; trained by specdec_lib.training.feature)
QUANTIZED_NAME = "smollm2-135m-int4"  # the target requantized to 4 bits in groups of 64 (models.quantized)
OFFLINE_NAMES = (TARGET_NAME, DRAFT_NAME, EAGLE_NAME, QUANTIZED_NAME)
