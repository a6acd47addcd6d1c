"""Reward-model training from preference pairs (`pipeline_type: reward_model`)."""
