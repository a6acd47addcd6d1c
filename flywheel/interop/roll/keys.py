"""What ROLL reads: the keys of its config dataclasses and their defaults, per block.

ROLL builds its config with `dacite.from_dict` (not strict), so a key that is not a field of
the block's dataclass is dropped without a word. These tables say which keys ROLL reads
(anything else in a ROLL file is a key "ROLL ignores too") and what ROLL assumes when a key
is left out (where that differs from flywheel's default, `platform convert` writes ROLL's
value out). Read from ROLL's `roll/configs/*.py`, `rlvr_config.py` and `agentic_config.py`
at commit 8eb27cc2: field names and literal defaults only, as facts about its file format.
`_NO_DEFAULT` marks a field whose default is built by code (a factory) or required.

`looks_like_roll` is the strict loader's cue to suggest `platform convert --from roll`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError

_NO_DEFAULT: Any = object()

TOP: dict[str, Any] = {
    "generate_opt_level": 1, "is_num_return_sequences_expand": False,
    "max_running_requests": 128, "is_use_additional_prompts": False,
    "max_additional_running_prompts": 16,
    "user_defined_rollout_loop_cls": (
        "roll.distributed.scheduler.user_defined_rollout_loop.UserDefinedRolloutLoop"),
    "router_args": None, "exp_name": _NO_DEFAULT, "seed": 42, "rpc_timeout": 3600,
    "output_dir": "./output", "base_dir": "./output", "logging_dir": "./output/logs",
    "rollout_dump_dir": None, "track_with": "tensorboard", "tracker_kwargs": _NO_DEFAULT,
    "max_steps": 500, "save_steps": 50, "max_ckpt_to_keep": 0, "logging_steps": 1,
    "eval_steps": 10, "rollout_batch_size": 128, "val_batch_size": 128, "local_rank": -1,
    "resume_from_checkpoint": False, "checkpoint_config": _NO_DEFAULT, "prompt_length": 1024,
    "response_length": None, "sequence_length": None, "val_prompt_length": None,
    "val_sequence_length": None, "profiler_timeline": False, "profiler_memory": False,
    "report_length_and_rewards": False, "is_offload_states": False,
    "is_offload_optimizer_states_in_train_step": False,
    "length_profiler_dir": "./output/profiler", "profiler_output_dir": "./output/profiler",
    "otlp_output_dir": "./output/otlp", "system_envs": _NO_DEFAULT,
    "model_update_buffer_size_mb": 1024, "num_nodes": 1, "num_gpus_per_node": 8,
    "model_download_type": None, "rollout_mock": None, "transfer_backend": None,
    "pretrain": None, "reward_pretrain": None, "actor_train": _NO_DEFAULT,
    "actor_infer": _NO_DEFAULT, "critic": _NO_DEFAULT, "reference": _NO_DEFAULT,
    "reward": None, "async_generation_ratio": 0, "ppo_epochs": 1, "max_grad_norm": 1.0,
    "l2": 0.0, "lambd": 0.95, "gamma": 1, "pg_clip": 0.2, "use_pg_clip_range": False,
    "pg_clip_low": 0.2, "pg_clip_high": 0.2, "value_clip": None, "kl_penalty": "kl",
    "target_kl": None, "init_kl_coef": 0.2, "kl_horizon": 10000, "use_reward_scaling": False,
    "add_len_reward": False, "reward_clip": None, "use_reward_norm": False,
    "whiten_rewards": False, "whiten_advantages": False, "advantage_clip": None,
    "adv_estimator": "gae", "norm_mean_type": None, "norm_std_type": None,
    "add_token_level_kl": False, "critic_warmup": 0, "use_kl_loss": False, "kl_loss_coef": 0,
    "entropy_loss_coef": 0, "loss_agg_mode": "seq-mean-token-mean", "dual_clip_loss": False,
    "enable_reference": False, "enable_old_logprobs_recompute": False,
    "force_disable_old_logprobs_recompute": False, "train_infer_correction": _NO_DEFAULT,
    "pure_opd_pipeline_type": "rlvr", "teacher": _NO_DEFAULT, "student_train": _NO_DEFAULT,
    "student_infer": _NO_DEFAULT, "is_pure_opd": False, "use_opd": False,
    "global_template": None, "tag_to_template": _NO_DEFAULT, "dataset_filter": _NO_DEFAULT,
    "num_return_sequences_in_group": 1, "save_logging_board_dir": None, "validation": None,
    "rewards": _NO_DEFAULT, "reward_model": None, "difficulty_loss_weight": False,
    "length_loss_weight": False, "postive_loss_coef": 0, "use_topr_neg_loss_coef": 0.0,
    "use_policy_loss_type": "PPO", "use_topr_loss": False, "rl_loss_coef": 1.0,
    "importance_sampling": "token", "val_greedy": False, "val_n_sample": 1,
    "max_len_mask": False, "mask_type": "loss", "difficulty_mask": False,
    "balance_length": False, "minibatch_data_iter_num": 1, "difficulty_low_threshold": 0.0,
    "difficulty_high_threshold": 1.0, "error_max_len_clip": False,
    "error_max_len_threshold": 9999999999, "custom_envs": _NO_DEFAULT,
    "train_env_manager": _NO_DEFAULT, "val_env_manager": _NO_DEFAULT, "render_save_dir": None,
    "reward_normalization": _NO_DEFAULT, "env_monitor": _NO_DEFAULT, "dirty_data_mask": False,
    "open_feedback_turn": False, "use_token_reward": False, "batch_adjust_mode": "copy",
    "episode_reward_weight": 1.0, "step_reward_weight": 1.0, "step_reward_gamma": 0.95,
    "ratio_type": "token", "exp_mode": "train", "partial_gpu_mode": True,
    "parse_tool_call_parameter_to_dict": False, "skip_mock_system_prompt": False,
}

WORKER: dict[str, Any] = {
    "name": None, "worker_cls": None, "pg_variant": None, "model_args": _NO_DEFAULT,
    "training_args": _NO_DEFAULT, "data_args": None, "generating_args": None,
    "strategy_args": None, "world_size": None, "device_mapping": None,
    "num_gpus_per_worker": 1, "model_update_frequency": 1, "infer_batch_size": 16,
    "backend_timeout": 30, "system_envs": _NO_DEFAULT, "topr_positive_weight": 1.0,
    "topr_negative_weight": 1.0, "max_concurrency": 1, "use_dynamic_batching_in_train": False,
    "max_tokens_per_microbatch_in_train": 0, "sequence_length_round_in_train": 4,
    "use_dynamic_batching_in_infer": False, "max_tokens_per_microbatch_in_infer": None,
    "sequence_length_round_in_infer": 4, "offload_nccl": False, "use_sequence_packing": False,
    "sequence_packing_args": _NO_DEFAULT, "logits_in_fp32": False,
    "router_replay": _NO_DEFAULT, "apply_loss_scale": True, "mtp_training_mode": "disabled",
    "opd_kl_coef": None, "tag_included": _NO_DEFAULT,
}

REWARD_EXTRA: dict[str, Any] = {
    "code_url": None, "use_local": True, "judge_prompt": None, "judge_model_type": None,
    "judge_model_name": None, "judge_api_url": None, "judge_api_key": None,
    "format_pattern": None, "reward_type": None, "response_length_penalty_coef": 0.0,
    "query_filter_config": _NO_DEFAULT, "response_filter_config": _NO_DEFAULT,
    "reward_manager_config": _NO_DEFAULT,
}

ENV_MANAGER_EXTRA: dict[str, Any] = {
    "llm_proxy": _NO_DEFAULT, "num_env_groups": 128, "group_size": 1,
    "group_size_redundancy": 0, "tags": _NO_DEFAULT, "num_groups_partition": _NO_DEFAULT,
    "max_traj_per_env": -1, "format_penalty": 0, "max_env_num_per_worker": 0,
    "group_filter_cls": "roll.pipeline.agentic.agentic_pipeline.GroupFilter",
}

MODEL_ARGS: dict[str, Any] = {
    "additional_target": None, "autocast_adapter_dtype": True, "lora_alpha": None,
    "lora_dropout": 0.0, "lora_rank": 8, "lora_target": None, "model_name_or_path": None,
    "adapter_name_or_path": None, "attn_implementation": None, "moe_aux_loss_coef": None,
    "disable_gradient_checkpointing": False, "gradient_checkpointing_use_reentrant": None,
    "device_map": "balanced", "dtype": "bf16", "model_type": None, "num_labels": 1,
    "model_config_kwargs": _NO_DEFAULT, "freeze_module_prefix": None, "ulysses_size": 1,
}

TRAINING_ARGS: dict[str, Any] = {
    "output_dir": "", "max_steps": -1, "num_train_epochs": 1.0, "learning_rate": 5e-05,
    "lr_scheduler_type": "linear", "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999,
    "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "seed": 42,
    "data_seed": None, "dataloader_num_workers": 0, "fp16": False, "bf16": False, "tf32": None,
    "warmup_ratio": 0.0, "warmup_steps": 0, "save_hf_model": False,
}

DATA_ARGS: dict[str, Any] = {
    "template": "native", "domain_interleave_probs": None, "preprocessing_num_workers": None,
    "file_name": None, "eval_file_name": None, "dataset_type": "json", "tag": "tag",
    "id": "id", "prompt": None, "response": "solution", "messages": None,
    "image_max_pixels": _NO_DEFAULT, "image_min_pixels": _NO_DEFAULT,
    "video_max_pixels": _NO_DEFAULT, "video_min_pixels": _NO_DEFAULT,
    "video_total_pixels": _NO_DEFAULT, "video_fps": 2.0, "video_max_frames": 128,
    "video_resize_chunk_frames": 64, "image_folder": None, "video_folder": None,
    "audio_folder": None, "custom_data_kwargs_func": None,
}

GENERATING_ARGS: dict[str, Any] = {
    "do_sample": True, "temperature": 0.95, "top_p": 0.7, "top_k": 50, "num_beams": 1,
    "max_length": 8192, "max_new_tokens": 8192, "repetition_penalty": 1.0,
    "length_penalty": 1.0, "num_return_sequences": 1, "stop_strings": None,
    "include_stop_str_in_output": None, "logprobs": 0,
}

STRATEGY_ARGS: dict[str, Any] = {
    "strategy_name": "fsdp2_train", "strategy_config": _NO_DEFAULT,
}

# Keys only ROLL's files have: one of them in a config that fails on an unknown key means the
# user most likely wrote (or copied) a ROLL config.
ROLL_ONLY_TOP_KEYS = frozenset({
    "track_with", "tracker_kwargs", "system_envs", "num_gpus_per_node", "num_nodes",
    "checkpoint_config", "render_save_dir", "reward_normalization", "rpc_timeout",
    "max_actions_per_traj", "env_manager_cls", "custom_env", "hydra",
})


def looks_like_roll(data: dict[str, Any]) -> bool:
    """Whether merged config data carries keys only ROLL's file format has."""
    if ROLL_ONLY_TOP_KEYS & set(data):
        return True
    rewards = data.get("rewards")
    return isinstance(rewards, dict) and any(
        isinstance(r, dict) and "worker_cls" in r for r in rewards.values())


def convert_hint(file: str, data: dict[str, Any]) -> str | None:
    """For a ROLL-shaped file, whatever its error: the command that maps ROLL's keys to
    ours and writes a file that validates; None for any other file (a key flywheel reads
    too, such as track_with, is no sign of ROLL)."""
    ours = {f.name for f in dataclasses.fields(PipelineConfig)} - {"rewards"}
    if not looks_like_roll({k: v for k, v in data.items() if k not in ours}):
        return None
    source = file if file and file != "command line" else "ROLL.yaml"
    return (f"this looks like a ROLL config: `platform convert --from roll {source} -o "
            f"flywheel.yaml` maps ROLL's keys to flywheel's, writes a file that validates and "
            f"reports what it cannot map")


def roll_hint(error: ConfigError, data: dict[str, Any]) -> ConfigError:
    """Any error in a ROLL-shaped file: say which command maps ROLL's keys to ours
    (`convert_hint`). The loader's `hint` (flywheel.pipelines.config passes it), so the
    loader imports nothing of the converter."""
    hint = convert_hint(error.file, data)
    if hint is None:
        return error
    return ConfigError(error.file, error.key_path, f"{error.message}; {hint}")
