"""flywheel: YAML-declarative RL post-training for language models."""
