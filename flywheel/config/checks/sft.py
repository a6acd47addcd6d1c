"""Cross-field rules of `pipeline_type: sft`, the SFT kind's `config_check` (config/kinds.py).

SFT trains actor_train alone (pipelines/sft/run.py): on hf_train in the driver process, or
on deepspeed_train as Ray ranks on actor_train's device_mapping (pipelines/sft/trainers.py);
no generation role, no rewards, no advantages, no env pools. A key that only RL reads would
do nothing here, so a value other than its default is refused with one line naming the key
(a YAML copied from an RL run must drop its RL keys; nothing is silently ignored). Pure: each rule
raises `ConfigError` with the key path and the fix.
"""

from __future__ import annotations

from dataclasses import fields

from flywheel.config.schema import ActorTrainConfig, PipelineConfig, ValidationGeneratingArgs
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.strategies.registry import BackendSpec, backends_with, has_capability

# Top-level keys SFT reads (schema.PipelineConfig's pipeline_type comment says how); every
# other top-level key is RL's and must stay at its default.
SFT_KEYS = frozenset({
    "pipeline_type", "exp_name", "seed", "output_dir", "logging_dir", "track_with",
    "tracker_kwargs", "pretrain", "val_batch_size", "prompt_length", "response_length",
    "sequence_length", "timeouts",
    "max_steps", "save_steps", "save_total_limit", "logging_steps", "eval_steps",
    "actor_train", "validation", "tracking", "ray",
})
# actor_train keys SFT reads; the rest (the policy loss, sampling, devices) must stay unset.
SFT_ACTOR_KEYS = frozenset({
    "name", "model_args", "training_args", "data_args", "strategy_args", "device_mapping",
    "num_gpus_per_worker", "infer_batch_size", "num_threads", "cpu_affinity",
})


def sft_backend(spec: BackendSpec) -> bool:
    """A backend SFT trains on: a transformers model (its CrossEntropy reads the policy
    head's log-probs) in training; in the driver without a process group (hf_train)."""
    return spec.kind == "train" and spec.hf_model


def sft_ranks_backend(spec: BackendSpec) -> bool:
    """One SFT trains as Ray ranks of one process group (pipelines/sft/trainers.py)."""
    return sft_backend(spec) and spec.process_group


def check_sft(cfg: PipelineConfig) -> None:
    """SFT's own refusals: the kind's `config_check` (config/kinds.py), run for SFT only."""
    defaults = PipelineConfig()
    for f in fields(PipelineConfig):
        if f.name not in SFT_KEYS and getattr(cfg, f.name) != getattr(defaults, f.name):
            raise ConfigError("", f.name, "SFT does not use it (an RL key: it would do "
                                          "nothing in pipeline_type: sft); remove it")
    actor = ActorTrainConfig()
    for f in fields(ActorTrainConfig):
        if f.name not in SFT_ACTOR_KEYS and getattr(cfg.actor_train, f.name) != getattr(
                actor, f.name):
            raise ConfigError("", f"actor_train.{f.name}", "SFT does not use it (it trains "
                                                            "with cross-entropy on response "
                                                            "tokens); remove it")
    if cfg.resume_from_checkpoint:
        raise ConfigError("", "resume_from_checkpoint", "SFT runs do not resume yet; start "
                                                        "a new run (pretrain: a checkpoint "
                                                        "folder continues from its weights)")
    strategy = cfg.actor_train.strategy_args.strategy_name
    in_process = " or ".join(backends_with(lambda s: sft_backend(s) and not s.process_group))
    ranks = " or ".join(backends_with(sft_ranks_backend))
    if not has_capability(strategy, sft_backend):
        raise ConfigError("", "actor_train.strategy_args.strategy_name",
                          f"SFT trains on {in_process} (in process, one device) or {ranks} "
                          f"(ranks on device_mapping), not {strategy}")
    on_ranks = has_capability(strategy, sft_ranks_backend)
    mapping = cfg.actor_train.device_mapping
    if not on_ranks and ((mapping is not None and len(mapping) > 1)
                         or cfg.actor_train.num_gpus_per_worker != 1):
        raise ConfigError("", "actor_train.device_mapping",
                          f"SFT on {strategy} trains on one device in process: leave "
                          f"device_mapping and num_gpus_per_worker unset, or use {ranks} "
                          f"for several ranks")
    if on_ranks and cfg.actor_train.model_args.lora_target is not None:
        raise ConfigError("", "actor_train.model_args.lora_target",
                          f"SFT with LoRA trains on {in_process} (its checkpoint is the "
                          f"adapter); SFT on {strategy} ranks writes whole models: remove "
                          f"LoRA or use {in_process}")
    check_record_schedule(cfg, "SFT")


def check_record_schedule(cfg: PipelineConfig, title: str) -> None:
    """What a kind that trains on fixed records and validates greedily refuses (SFT,
    offline distillation): max_steps beside num_train_epochs, validation sampling keys,
    eval_steps without a validation block and the reverse."""
    if cfg.actor_train.training_args.num_train_epochs and (
            cfg.max_steps != PipelineConfig().max_steps):
        raise ConfigError("", "max_steps", "is set with actor_train.training_args."
                                           "num_train_epochs, which counts the steps from "
                                           "the data: write one of them")
    if cfg.validation is not None and cfg.validation.generating_args != (
            ValidationGeneratingArgs()):
        raise ConfigError("", "validation.generating_args",
                          f"{title} validation decodes greedily up to response_length "
                          f"tokens; remove generating_args")
    if cfg.eval_steps and cfg.validation is None:
        raise ConfigError("", "eval_steps", f"is {cfg.eval_steps} but there is no validation "
                                            f"block: add validation.data_args.file_name, or "
                                            f"set eval_steps: 0")
    if cfg.validation is not None and not cfg.eval_steps:
        raise ConfigError("", "validation", "is set but eval_steps is 0, so it would never "
                                            "run: set eval_steps, or remove validation")
