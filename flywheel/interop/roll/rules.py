"""How each key ROLL reads becomes flywheel's: one rule per key, per block.

A rule is one of:

- `SAME`: flywheel has the key, same name, same meaning: copied (an explicit null becomes
  flywheel's default, reported).
- `To(path, convert)`: flywheel has it under another name or shape (`loss_agg_mode` lives on
  actor_train; a string `file_name` is a one-item list). `path` is relative to the flywheel
  block being built unless it starts with "/" (from the top).
- `Drop(reason)`: a setting that does not change what is learned (where files go, tracking,
  memory and speed knobs flywheel picks itself): dropped, with the reason in the report.
- `Missing(feature)`: a ROLL feature flywheel does not have. Off (null, false, 0, empty, or
  ROLL's default) it is dropped quietly with the rest; set, it is named in the report and the
  config is not converted, because the run would not do what the file says.

A key ROLL reads that has no rule here is treated as `Missing` under its own name, so a new
ROLL field can never be dropped silently. To support a ROLL feature: implement it, then turn
its `Missing` into `SAME` or `To`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Same:
    pass


@dataclass(frozen=True)
class To:
    path: str
    convert: Callable[[Any], Any] | None = None
    note: str = ""


@dataclass(frozen=True)
class Drop:
    reason: str


@dataclass(frozen=True)
class Missing:
    feature: str


SAME = Same()
Rule = Same | To | Drop | Missing

_PERF = "a memory/speed knob; flywheel's backends choose their own"
_FILES = "where ROLL writes files; flywheel writes everything under output_dir"


def rollout_mock(value: Any) -> Any:
    """ROLL's block less its `enable` switch (off: flywheel's default, none); mode and
    dump_dir are checked by flywheel's loader like any written key."""
    if not isinstance(value, dict):
        return value  # refused by the loader with the key's expected shape
    if not value.get("enable", False):
        return None
    return {k: v for k, v in value.items() if k != "enable"}


def as_list(value: Any) -> Any:
    """ROLL accepts a string where flywheel wants a list of strings."""
    return [value] if isinstance(value, str) else value


KL_ESTIMATORS = {"kl": "k1", "mse": "k2", "abs": "abs"}
NORM_TYPES = {None: "none", "batch": "batch", "group": "group"}

TOP: dict[str, Rule] = {
    **{k: SAME for k in (
        "exp_name", "seed", "output_dir", "logging_dir", "max_steps", "save_steps",
        "logging_steps", "eval_steps", "rollout_batch_size", "val_batch_size", "prompt_length",
        "response_length", "sequence_length", "pretrain", "reward_pretrain",
        "async_generation_ratio", "ppo_epochs", "lambd", "gamma", "pg_clip",
        "use_pg_clip_range", "pg_clip_low", "pg_clip_high", "value_clip", "target_kl",
        "init_kl_coef", "kl_horizon", "reward_clip", "whiten_advantages", "advantage_clip",
        "use_kl_loss", "kl_loss_coef", "entropy_loss_coef", "dual_clip_loss",
        "num_return_sequences_in_group", "is_num_return_sequences_expand")},
    "loss_agg_mode": To("/actor_train/loss_agg_mode"),
    "max_grad_norm": To("/actor_train/training_args/max_grad_norm"),
    "kl_penalty": To("kl_penalty", lambda v: KL_ESTIMATORS.get(v, v)),
    "norm_mean_type": To("norm_mean_type", lambda v: NORM_TYPES.get(v, v),
                         "ROLL's null (no centring) is flywheel's 'none'"),
    "norm_std_type": To("norm_std_type", lambda v: NORM_TYPES.get(v, v),
                        "ROLL's null (no scaling) is flywheel's 'none'"),
    "adv_estimator": SAME,
    "resume_from_checkpoint": To("resume_from_checkpoint", lambda v: None if v is False else v,
                                 "false (ROLL's 'no') is flywheel's null"),
    "track_with": Drop("flywheel tracks to mlflow, the console and metrics.jsonl"),
    "tracker_kwargs": Drop("options of ROLL's tracker (flywheel: tracking.mlflow_uri)"),
    "checkpoint_config": Drop("flywheel writes checkpoints under output_dir"),
    "system_envs": Drop("flywheel sets no environment variables from a config; export them "
                        "before `platform run`"),
    "num_gpus_per_node": Drop("flywheel reads devices from the Ray cluster"),
    "num_nodes": Drop("flywheel reads nodes from the Ray cluster"),
    "rpc_timeout": Drop("flywheel reports a stalled worker by its role itself"),
    "model_download_type": Drop("flywheel loads models by path or hub name"),
    "render_save_dir": Drop(_FILES),
    "base_dir": Drop(_FILES), "rollout_dump_dir": Drop(_FILES),
    "length_profiler_dir": Drop(_FILES), "profiler_output_dir": Drop(_FILES),
    "otlp_output_dir": Drop(_FILES), "save_logging_board_dir": Drop(_FILES),
    "max_ckpt_to_keep": To("save_total_limit", lambda v: v if v and v > 0 else None,
                           "the newest N checkpoints are kept; ROLL's 0 (all) is null"),
    "local_rank": Drop("set by the launcher, never by a config"),
    "profiler_timeline": Drop("profiling"), "profiler_memory": Drop("profiling"),
    "report_length_and_rewards": Drop("flywheel always logs response/* and reward/*"),
    # Read by ROLL's DPO and distill pipelines only. Its RLVR and agentic workers offload
    # around every step whatever it says (meta_info is_offload_states, default true; the
    # synchronous RLVR loop also offloads actor_infer after generating), so colocated roles
    # take turns there: flywheel's offload_between_phases: auto, its default.
    "is_offload_states": Drop("ROLL's RLVR and agentic pipelines never read it: their "
                              "workers offload around every step, as flywheel's "
                              "offload_between_phases: auto does on shared devices"),
    "is_offload_optimizer_states_in_train_step": Drop(_PERF),
    "model_update_buffer_size_mb": Drop(_PERF), "generate_opt_level": Drop(_PERF),
    "max_running_requests": Drop(_PERF), "router_args": Drop(_PERF),
    "max_additional_running_prompts": Drop(_PERF), "transfer_backend": Drop(_PERF),
    "partial_gpu_mode": Drop(_PERF), "env_monitor": Drop("flywheel bounds every env step by "
                                                         "train_env_manager.step_timeout_s"),
    "enable_reference": Drop("flywheel starts a reference role when the file declares one"),
    "enable_old_logprobs_recompute": Drop("flywheel always computes the old log-probs"),
    "force_disable_old_logprobs_recompute": Drop("flywheel always computes the old log-probs"),
    "add_token_level_kl": Drop("ROLL's switch of the KL reward penalty: flywheel penalises when "
                               "init_kl_coef > 0, so init_kl_coef is kept only where this is "
                               "true"),
    "val_greedy": Drop("flywheel's validation decodes greedily unless "
                       "validation.generating_args.do_sample is set"),
    "val_n_sample": Missing("several samples per validation prompt (val_n_sample)"),
    "exp_mode": Drop("ROLL's run-mode label"),
    "is_use_additional_prompts": Missing("additional prompts in flight "
                                         "(is_use_additional_prompts)"),
    "user_defined_rollout_loop_cls": Missing("a user-defined rollout loop class"),
    "rollout_mock": To("rollout_mock", rollout_mock),
    # val_prompt_length, val_sequence_length: fit/val_lengths.py converts the pair.
    "l2": Missing("an L2 penalty on the policy (l2)"),
    "use_reward_scaling": Missing("running reward scaling (use_reward_scaling)"),
    "add_len_reward": Missing("a length reward (add_len_reward)"),
    "use_reward_norm": Missing("reward normalisation before advantages (use_reward_norm)"),
    "whiten_rewards": Missing("reward whitening (whiten_rewards)"),
    "critic_warmup": Missing("critic warm-up steps (critic_warmup)"),
    "pure_opd_pipeline_type": Drop("on-policy distillation only"),
    "teacher": Missing("on-policy distillation (teacher)"),
    "student_train": Missing("on-policy distillation (student_train)"),
    "student_infer": Missing("on-policy distillation (student_infer)"),
    "is_pure_opd": Missing("on-policy distillation (is_pure_opd)"),
    "use_opd": Missing("on-policy distillation (use_opd)"),
    "global_template": To("/actor_train/data_args/template"),  # roll_convert._global_template
    # tag_to_template: roll_convert._tag_to_template converts it.
    "dataset_filter": Missing("difficulty-based dataset filtering (dataset_filter)"),
    "reward_model": Missing("a reward model role (reward_model)"),
    "reward": Missing("an agentic reward worker (reward)"),
    "difficulty_loss_weight": Missing("difficulty loss weighting"),
    "length_loss_weight": Missing("length loss weighting"),
    "use_policy_loss_type": Missing("use_policy_loss_type"),
    "use_topr_loss": Missing("use_topr_loss (flywheel: actor_train.pg_variant: topr)"),
    # importance_sampling, postive_loss_coef, use_topr_neg_loss_coef, rl_loss_coef and
    # train_infer_correction choose the loss together: fit/loss.py converts them.
    "max_len_mask": SAME,
    "mask_type": Missing("mask_type"),
    "difficulty_mask": SAME,
    "balance_length": Missing("length balancing (balance_length)"),
    "minibatch_data_iter_num": Missing("minibatch_data_iter_num"),
    "difficulty_low_threshold": SAME,
    "difficulty_high_threshold": SAME,
    "error_max_len_clip": Missing("error_max_len_clip"),
    "error_max_len_threshold": Drop("error_max_len_clip only"),
    "dirty_data_mask": Missing("dirty data masking (dirty_data_mask)"),
    "open_feedback_turn": Missing("feedback turns (open_feedback_turn)"),
    "use_token_reward": Missing("token-level env rewards (use_token_reward)"),
    # batch_adjust_mode, step_reward_gamma: fit/step_credit.py converts them.
    "episode_reward_weight": SAME,
    "step_reward_weight": SAME,
    "ratio_type": Missing("segment-level ratios (ratio_type)"),
    "parse_tool_call_parameter_to_dict": Missing("tool calls"),
    "skip_mock_system_prompt": Missing("skip_mock_system_prompt"),
}

WORKER: dict[str, Rule] = {
    **{k: SAME for k in ("name", "device_mapping", "num_gpus_per_worker", "infer_batch_size")},
    "world_size": Drop("flywheel derives workers from device_mapping / num_gpus_per_worker"),
    "model_update_frequency": To("/model_update_frequency"),
    "worker_cls": Drop("flywheel picks the worker from the role"),
    "backend_timeout": Drop(_PERF), "system_envs": Drop("flywheel sets no environment "
                                                        "variables from a config"),
    "max_concurrency": Drop(_PERF),
    "use_dynamic_batching_in_train": To("training_args/dynamic_batching"),
    "max_tokens_per_microbatch_in_train": To("training_args/max_tokens_per_micro_batch",
                                             lambda v: v or 0),
    "sequence_length_round_in_train": Drop(_PERF), "use_dynamic_batching_in_infer": Drop(_PERF),
    "max_tokens_per_microbatch_in_infer": Drop(_PERF),
    "sequence_length_round_in_infer": Drop(_PERF), "offload_nccl": Drop(_PERF),
    # use_sequence_packing, sequence_packing_args: fit/packing.py, once backends are final
    "logits_in_fp32": Drop("flywheel computes log-probs in fp32"),
    "router_replay": Missing("MoE router replay (router_replay)"),
    "apply_loss_scale": Drop(_PERF),
    "mtp_training_mode": Missing("multi-token prediction training (mtp_training_mode)"),
    "opd_kl_coef": Missing("on-policy distillation (opd_kl_coef)"),
    "pg_variant": Drop("only actor_train's pg_variant is used"),
    "topr_positive_weight": Drop("only actor_train's is used"),
    "topr_negative_weight": Drop("only actor_train's is used"),
    "tag_included": Drop("only rewards route by tag"),
}
ACTOR_TRAIN: dict[str, Rule] = {**WORKER, "pg_variant": SAME, "topr_positive_weight": SAME,
                                "topr_negative_weight": SAME}
REWARD: dict[str, Rule] = {
    **WORKER, "world_size": SAME, "tag_included": SAME,
    "worker_cls": Drop("mapped to reward_type"),
    # reward_type and response_length_penalty_coef: read by ROLL's CrossThinkQA worker only;
    # roll_convert._reward maps or drops them per worker (REWARD_WORKER_KEYS)
    "reward_type": Drop("ROLL's loose/soft/strict switch, read by its "
                        "CrossThinkQARuleRewardWorker only"),
    "response_length_penalty_coef": SAME,
    "query_filter_config": Missing("query filtering by reward (query_filter_config)"),
    "response_filter_config": Missing("response filtering by reward (response_filter_config)"),
    "reward_manager_config": Missing("reward_manager_config"),
    "format_pattern": To("format_pattern", note="ROLL's math worker computes this format "
                         "reward but leaves it out of the score; flywheel subtracts 1 from a "
                         "response that does not match"),
    **{k: Drop("used by ROLL's code sandbox / LLM judge rewards only") for k in (
        "code_url", "use_local", "judge_prompt", "judge_model_type", "judge_model_name",
        "judge_api_url", "judge_api_key")},
}
VALIDATION: dict[str, Rule] = {
    **{k: Drop("flywheel validates with actor_infer's model and backend") for k in WORKER},
}
ENV_MANAGER: dict[str, Rule] = {
    **{k: Drop("env managers run on CPU env workers in flywheel") for k in WORKER},
    **{k: SAME for k in ("max_env_num_per_worker", "num_env_groups", "group_size", "tags",
                         "num_groups_partition", "format_penalty")},
    "llm_proxy": Missing("an LLM proxy for env managers (llm_proxy)"),
    "group_size_redundancy": Missing("redundant env groups (group_size_redundancy)"),
    "max_traj_per_env": Drop("flywheel plays as many episodes as a step needs"),
    "group_filter_cls": Missing("a group filter class (group_filter_cls)"),
}
MODEL_ARGS: dict[str, Rule] = {
    **{k: SAME for k in ("model_name_or_path", "dtype", "attn_implementation",
                         "disable_gradient_checkpointing")},
    # ROLL turns LoRA on by naming target modules; the other lora_* keys only shape it.
    # Copied on every role; fit/lora.py fits the backend and drops them off actor_train.
    **{k: SAME for k in ("lora_target", "lora_alpha", "lora_dropout", "lora_rank",
                         "additional_target", "adapter_name_or_path")},
    "autocast_adapter_dtype": Missing("a LoRA adapter in the model's dtype "
                                      "(autocast_adapter_dtype: false; flywheel's is fp32)"),
    "moe_aux_loss_coef": Missing("an MoE auxiliary loss (moe_aux_loss_coef)"),
    "gradient_checkpointing_use_reentrant": Drop(_PERF),
    "device_map": Drop("flywheel places models by device_mapping"),
    "model_type": Missing("a non-causal-LM model head (model_type)"),
    "num_labels": Drop("classification heads only"),
    "model_config_kwargs": Missing("model config overrides (model_config_kwargs)"),
    "freeze_module_prefix": SAME,  # hf_train's frozen modules (config/acts_when/table.py)
    "ulysses_size": Drop("Ulysses sequence parallelism; " + _PERF),
}
TRAINING_ARGS: dict[str, Rule] = {
    **{k: SAME for k in ("learning_rate", "weight_decay", "per_device_train_batch_size",
                         "gradient_accumulation_steps", "warmup_steps", "adam_beta1",
                         "adam_beta2")},
    "lr_scheduler_type": To("lr_scheduler_type",
                            lambda v: "constant" if v == "constant_with_warmup" else v,
                            "constant_with_warmup is flywheel's constant after warmup_steps"),
    "warmup_ratio": SAME,
    "max_steps": Drop("the top-level max_steps counts steps"),
    "num_train_epochs": Drop("the top-level max_steps counts steps"),
    "seed": Drop("the top-level seed seeds every role"),
    "data_seed": Drop("the top-level seed orders the data"),
    "dataloader_num_workers": Drop(_PERF),
    "fp16": Drop("model_args.dtype sets precision"), "bf16": Drop("model_args.dtype sets "
                                                                   "precision"),
    "tf32": Drop(_PERF), "save_hf_model": Drop(_FILES), "output_dir": Drop(_FILES),
}
DATA_ARGS: dict[str, Rule] = {
    "template": SAME,
    "file_name": To("file_name", as_list, "a string is a one-file list"),
    # ROLL's column names are flywheel DataArgs fields too (prompt_data reads either).
    **{k: SAME for k in ("prompt", "messages", "response", "id", "tag")},
    "domain_interleave_probs": SAME,
    "preprocessing_num_workers": Drop(_PERF),
    "eval_file_name": Missing("an eval file in data_args (flywheel: validation.data_args)"),
    "dataset_type": Drop("flywheel reads JSONL and parquet by file suffix"),
    "custom_data_kwargs_func": Missing("a custom data function (custom_data_kwargs_func)"),
    # images (issue 29): flywheel's data_args keys of the same names (image_files.py); the
    # image column is ROLL's "images", flywheel's image_key default. Video and audio: none.
    **{k: SAME for k in ("image_folder", "image_max_pixels", "image_min_pixels")},
    "video_folder": Missing("video inputs (video_folder)"),
    "audio_folder": Missing("audio inputs (audio_folder)"),
    **{k: Drop("video inputs only") for k in (
        "video_max_pixels", "video_min_pixels", "video_total_pixels", "video_fps",
        "video_max_frames", "video_resize_chunk_frames")},
}
GENERATING_ARGS: dict[str, Rule] = {
    **{k: SAME for k in ("do_sample", "temperature", "top_p", "top_k", "num_beams",
                         "max_new_tokens", "repetition_penalty", "num_return_sequences",
                         "stop_strings")},
    "max_length": Drop("max_new_tokens bounds generation"),
    "length_penalty": Drop("beam search only"),
    "include_stop_str_in_output": Drop("flywheel keeps the stop string in the response"),
    "logprobs": Drop("flywheel always returns the sampled tokens' log-probs"),
}
# ROLL backend name -> flywheel's (None: no counterpart). The note says what changes.
STRATEGY_NAMES: dict[str, tuple[str | None, str]] = {
    "hf_infer": ("hf_infer", ""), "vllm": ("vllm", ""), "sglang": ("sglang", ""),
    "megatron_train": ("megatron_train", ""), "deepspeed_train": ("deepspeed_train", ""),
    "megatron_infer": ("megatron_train", "forward-only roles run on megatron_train"),
    "fsdp2_train": ("deepspeed_train", "FSDP2 is not a flywheel backend: DeepSpeed ZeRO shards "
                                       "the same way; strategy_config dropped key by key"),
    "fsdp2_infer": ("deepspeed_train", "FSDP2 is not a flywheel backend: DeepSpeed ZeRO shards "
                                       "the same way; strategy_config dropped key by key"),
    "deepspeed_infer": ("deepspeed_train", "forward-only roles run on deepspeed_train"),
}
# ROLL reward worker class (last dotted name) -> the flywheel reward_type of the same job;
# converted only while that name is in the reward catalog (so a reward type added there is
# picked up here without an edit).
REWARD_WORKERS: dict[str, str] = {"MathRuleRewardWorker": "math_rule",
                                  "CodeSandboxRewardWorker": "code_sandbox",
                                  "LLMJudgeRewardWorker": "llm_judge",
                                  "GeneralRuleRewardWorker": "ifeval",
                                  "CrossThinkQARuleRewardWorker": "multiple_choice",
                                  "DetectionRewardWorker": "detection"}
# ROLL reward keys only some of its workers read: flywheel reward_type -> ROLL key -> where
# it goes (a path under the reward). On another worker ROLL ignores the key: dropped.
REWARD_WORKER_KEYS: dict[str, dict[str, str]] = {
    "multiple_choice": {"reward_type": "reward_args.scoring",
                        "response_length_penalty_coef": "response_length_penalty_coef"},
}
# track_with values ROLL's own registry lacks too (roll/utils/tracking.py: tensorboard,
# wandb, stdout, swanlab, trackio): why, appended to the dropped line
UNKNOWN_TRACKERS: dict[str, str] = {
    "ml_tracker": " (nor does ROLL's tracker registry: ROLL stops at start on it)"}
# custom_envs.<tag> keys flywheel has no use for (ROLL's env manager plumbing).
CUSTOM_ENV_DROPS: dict[str, str] = {
    "use_thread_lock": _PERF, "max_env_step_concurrent": _PERF,
    "env_manager_cls": "flywheel's env manager plays every env (TrajEnvManager's behaviour)",
    "agent_runner_cls": "flywheel's env manager plays every env",
}
# ROLL env types flywheel plays with one of its own envs: env_type -> (flywheel's, why it is
# the same game, env_config keys that only address ROLL's service).
CUSTOM_ENV_TYPES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "sokoban_sandbox": ("sokoban", "ROLL plays Sokoban in its remote sandbox service; "
                        "flywheel's local Sokoban is the same game", ("base_url",)),
    "sokoban_native_env": ("sokoban", "ROLL's native mode hands the conversation over as "
                           "messages; flywheel's env manager builds the same conversation "
                           "from the local Sokoban's text observations", ()),
}
# ROLL env types that need what flywheel does not have yet: env_type -> why.
CUSTOM_ENV_MISSING: dict[str, str] = {}
CUSTOM_ENV_SAME = ("env_type", "max_steps", "max_tokens_per_step", "env_config",
                   "agent_system_template", "agent_template")
