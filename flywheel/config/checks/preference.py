"""Cross-field rules of the pair pipelines (`pipeline_type: dpo`, `reward_model`), and the
refusal of their keys elsewhere.

A DPO run trains actor_train alone on fixed pairs, in the driver process, on the shared
update loop (pipelines/dpo/run.py), as SFT does: the keys SFT reads, plus the pairwise
loss's (schema/preference.py), sequence_length and the reference block. What it refuses,
each in one line naming the key:
- a pair key in another pipeline (it would do nothing there), a DPO loss key or LoRA in
  reward-model training;
- an RL key in a DPO file (as SFT refuses them), other backends than hf_train, several
  devices, resume;
- loss knobs the chosen loss does not read (label_smoothing with ipo, simpo_gamma without
  simpo), `ipo: true` beside another dpo_loss_type, a reference block under simpo (it has
  none), a reference block with anything but its model (the reference runs in process:
  its backend, devices and batch keys would do nothing);
- token-budget micro-batching (`dynamic_batching` reorders rows and would split a pair).
"""

from __future__ import annotations

from dataclasses import fields

from flywheel.algorithms.preference import LOSS_NAMES
from flywheel.config.checks.pair_keys import PREFERENCE_KEYS
from flywheel.config.checks.sft import SFT_ACTOR_KEYS
from flywheel.config.derived import lora_on, reference_from_actor
from flywheel.config.kinds import kind_of, kind_title, kinds_said
from flywheel.config.schema import ActorTrainConfig, ModelArgs, PipelineConfig, WorkerConfig
from flywheel.config.schema.preference import PreferenceKeys
from flywheel.platform.config.errors import ConfigError


def loss_type(cfg: PipelineConfig) -> str:
    """dpo_loss_type, with ROLL's `ipo: true` read as ipo."""
    return "ipo" if cfg.ipo else cfg.dpo_loss_type


def check_pair_keys(cfg: PipelineConfig) -> None:
    """A preference-pair key written under a kind that does not declare it in its `keys`
    (RLVR and agentic read every other key) is refused, naming the kinds that read it."""
    declared = kind_of(cfg).keys or frozenset()
    defaults = PipelineConfig()
    for name in sorted(PREFERENCE_KEYS - declared):
        if getattr(cfg, name) != getattr(defaults, name):
            where = kinds_said(lambda kind, name=name: kind.keys is not None
                               and name in kind.keys)
            raise ConfigError("", name, f"acts in {where} only (a preference-pair key), not "
                                        f"pipeline_type {cfg.pipeline_type}; remove it")


def check_pair_run(cfg: PipelineConfig) -> None:
    """What both pair kinds refuse: keys they do not read, RL keys of actor_train, and
    what the in-process run cannot do."""
    check_pair_keys(cfg)
    kind, title = kind_of(cfg), kind_title(cfg)
    defaults = PipelineConfig()
    for f in fields(PipelineConfig):
        if not kind.reads_key(f.name) and getattr(cfg, f.name) != getattr(defaults, f.name):
            raise ConfigError("", f.name, f"{title} does not use it (it would do nothing "
                                          f"in pipeline_type: {cfg.pipeline_type}); remove it")
    actor = ActorTrainConfig()
    for f in fields(ActorTrainConfig):
        if f.name not in SFT_ACTOR_KEYS and getattr(cfg.actor_train, f.name) != getattr(
                actor, f.name):
            raise ConfigError("", f"actor_train.{f.name}", f"{title} does not use it (it "
                                                            f"trains on pairs); remove it")
    check_in_process(cfg)


def check_dpo(cfg: PipelineConfig) -> None:
    """The DPO kind's `config_check` (config/kinds.py)."""
    check_pair_run(cfg)
    check_loss_keys(cfg)
    check_reference(cfg)


def check_reward_model_pairs(cfg: PipelineConfig) -> None:
    """The reward_model kind's `config_check` (config/kinds.py)."""
    check_pair_run(cfg)
    if cfg.actor_train.model_args.lora_target:
        raise ConfigError("", "actor_train.model_args.lora_target",
                          "reward-model training trains the whole model and its score head "
                          "(no LoRA yet); remove it")


def check_loss_keys(cfg: PipelineConfig) -> None:
    if cfg.ipo and cfg.dpo_loss_type not in ("sigmoid", "ipo"):
        raise ConfigError("", "ipo", f"is true (ROLL's switch for dpo_loss_type: ipo) but "
                                     f"dpo_loss_type is {cfg.dpo_loss_type}; write one")
    loss = loss_type(cfg)
    if loss == "ipo" and cfg.label_smoothing:
        raise ConfigError("", "label_smoothing", "IPO's loss has no label smoothing (cDPO "
                                                 "smooths the sigmoid loss); remove it or "
                                                 "use dpo_loss_type: sigmoid")
    if loss != "simpo" and cfg.simpo_gamma != PreferenceKeys.simpo_gamma:
        raise ConfigError("", "simpo_gamma", f"is SimPO's margin; dpo_loss_type is {loss}: "
                                             f"remove it or use dpo_loss_type: simpo")


def check_reference(cfg: PipelineConfig) -> None:
    """The reference runs in the driver from its model alone: only
    reference.model_args.model_name_or_path acts (the copy takes actor_train's precision),
    and with LoRA the reference is actor_train's base with the adapter off, so a reference
    of another model is refused there."""
    loss = loss_type(cfg)
    if cfg.reference is None:
        return
    if not LOSS_NAMES[loss]:
        raise ConfigError("", "reference", f"{loss} uses no reference policy; remove the "
                                           f"reference block")
    model = cfg.reference.model_args
    bare = WorkerConfig(model_args=model, name=cfg.reference.name)
    for f in fields(WorkerConfig):
        if getattr(cfg.reference, f.name) != getattr(bare, f.name):
            raise ConfigError("", f"reference.{f.name}", "the DPO reference runs frozen in "
                                                         "the driver beside actor_train: "
                                                         "only its model_args."
                                                         "model_name_or_path acts; remove "
                                                         "it")
    named = ModelArgs(model_name_or_path=model.model_name_or_path)
    for f in fields(ModelArgs):
        if getattr(model, f.name) != getattr(named, f.name):
            raise ConfigError("", f"reference.model_args.{f.name}",
                              "the DPO reference is a frozen copy in actor_train's precision: "
                              "only model_name_or_path acts; remove it")
    if lora_on(cfg.actor_train.model_args) and not reference_from_actor(cfg):
        raise ConfigError("", "reference.model_args.model_name_or_path",
                          "with LoRA the DPO reference is actor_train's base model with the "
                          "adapter disabled; another reference model is not supported: "
                          "remove it")


def check_in_process(cfg: PipelineConfig) -> None:
    if cfg.resume_from_checkpoint:
        raise ConfigError("", "resume_from_checkpoint", "pair runs do not resume yet; start "
                                                        "a new run (pretrain: a checkpoint "
                                                        "folder continues from its weights)")
    strategy = cfg.actor_train.strategy_args.strategy_name
    if strategy != "hf_train":
        raise ConfigError("", "actor_train.strategy_args.strategy_name",
                          f"pair runs train actor_train in process on hf_train (one "
                          f"device), not "
                          f"{strategy}; write hf_train or leave strategy_args out")
    mapping = cfg.actor_train.device_mapping
    if (mapping is not None and len(mapping) > 1) or cfg.actor_train.num_gpus_per_worker != 1:
        raise ConfigError("", "actor_train.device_mapping",
                          "pair runs train on one device (hf_train in process): leave "
                          "device_mapping and num_gpus_per_worker unset")
    if cfg.actor_train.training_args.dynamic_batching:
        raise ConfigError("", "actor_train.training_args.dynamic_batching",
                          "token-budget micro-batches reorder rows and would split a "
                          "pair's chosen and rejected responses; remove it")
    if cfg.eval_steps and cfg.validation is None:
        raise ConfigError("", "eval_steps", f"is {cfg.eval_steps} but there is no validation "
                                            f"block: add validation.data_args.file_name, or "
                                            f"set eval_steps: 0")
    if cfg.validation is not None and not cfg.eval_steps:
        raise ConfigError("", "validation", "is set but eval_steps is 0, so it would never "
                                            "run: set eval_steps, or remove validation")
