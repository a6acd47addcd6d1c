"""The top-level keys the pair pipelines read (their `keys` in config/kinds.py): kept apart
from their checks so that the kinds catalog reads them without importing the checks."""

from __future__ import annotations

from dataclasses import fields

from flywheel.config.checks.sft import SFT_KEYS
from flywheel.config.schema import PipelineConfig
from flywheel.config.schema.offline_distill import OfflineDistillKeys
from flywheel.config.schema.preference import PreferenceKeys

PREFERENCE_KEYS = frozenset(f.name for f in fields(PreferenceKeys))
PAIR_DATA_KEYS = frozenset({"chosen_key", "rejected_key", "overlong_pairs", "equal_pairs"})
# in this process, as SFT: the ray block is refused as such
_IN_PROCESS = SFT_KEYS - {"ray"}
DPO_KEYS = _IN_PROCESS | (PREFERENCE_KEYS - {"margin_key"}) | {"sequence_length",
                                                                 "reference"}
# reward-model training reads the pairs, not the DPO loss (pipelines/reward_model/run.py)
REWARD_MODEL_KEYS = _IN_PROCESS | PAIR_DATA_KEYS | {"sequence_length", "margin_key"}
# online DPO: RLVR's keys (prompts, generation, rewards, async, weight sync, roles) and the
# pair loss's; not the policy-gradient loss's, advantages', KL terms', critic's, the
# train/infer correction's (the pair loss reads none of them), nor the pair data's
ONLINE_DPO_UNREAD = frozenset({
    "adv_estimator", "norm_mean_type", "norm_std_type", "whiten_advantages", "reward_clip",
    "advantage_clip", "gamma", "lambd", "pg_clip", "use_pg_clip_range", "pg_clip_low",
    "pg_clip_high", "dual_clip_loss", "dual_clip_c", "value_clip", "use_kl_loss",
    "kl_loss_coef", "kl_loss_type", "init_kl_coef", "kl_penalty", "target_kl", "kl_horizon",
    "entropy_loss_coef", "infer_is_correction", "infer_is_lower_bound",
    "infer_is_upper_bound", "infer_filter_level", "infer_filter_ratio_band",
    "infer_filter_diff_band", "max_len_mask", "difficulty_mask", "difficulty_low_threshold",
    "difficulty_high_threshold", "critic", "teacher", "opd_mode", "opd_gamma",
    "train_env_manager", "val_env_manager", "custom_envs", "env_import_allowlist",
    "turn_level_returns", "step_level_samples", "episode_reward_weight",
    "step_reward_weight", "batch_adjust_mode", "agent", "margin_key", *PAIR_DATA_KEYS,
    *(f.name for f in fields(OfflineDistillKeys))})  # offline distillation's own keys
ONLINE_DPO_KEYS = frozenset(f.name for f in fields(PipelineConfig)) - ONLINE_DPO_UNREAD
