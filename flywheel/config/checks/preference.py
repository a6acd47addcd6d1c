"""Cross-field rules of the pair pipelines (`pipeline_type: dpo`, `reward_model`), and the
refusal of their keys elsewhere.

A DPO run trains actor_train alone on fixed pairs on the shared update loop
(pipelines/dpo/run.py), as SFT does: in the driver process on hf_train, or as Ray ranks of
one process group (deepspeed_train) with the reference a frozen cluster of the same backend
on the same devices; the keys SFT reads, plus the pairwise loss's (schema/preference.py),
sequence_length and the reference block. Reward-model training runs in process only. What
they refuse, each in one line naming the key:
- a pair key in another pipeline (it would do nothing there), a DPO loss key or LoRA in
  reward-model training;
- an RL key in a DPO file (as SFT refuses them), other backends than those, several
  devices in process, LoRA on ranks (the checkpoint there is the whole model), resume;
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
from flywheel.config.checks.sft import SFT_ACTOR_KEYS, sft_backend, sft_ranks_backend
from flywheel.config.derived import lora_on, reference_from_actor
from flywheel.config.kinds import kind_of, kind_title, kinds_said
from flywheel.config.schema import ActorTrainConfig, ModelArgs, PipelineConfig, WorkerConfig
from flywheel.config.schema.preference import PreferenceKeys
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.strategies.registry import backends_with, has_capability


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
    what their run cannot do where it trains."""
    check_pair_keys(cfg)
    kind, title = kind_of(cfg), kind_title(cfg)
    defaults = PipelineConfig()
    # `ray` acts on ranks; acts_when/table.py (ON_RAY) refuses it in process
    on_ray = {"ray"} if kind.ranks_with_process_group else set()
    for f in fields(PipelineConfig):
        if (not kind.reads_key(f.name) and f.name not in on_ray
                and getattr(cfg, f.name) != getattr(defaults, f.name)):
            raise ConfigError("", f.name, f"{title} does not use it (it would do nothing "
                                          f"in pipeline_type: {cfg.pipeline_type}); remove it")
    actor = ActorTrainConfig()
    for f in fields(ActorTrainConfig):
        if f.name not in SFT_ACTOR_KEYS and getattr(cfg.actor_train, f.name) != getattr(
                actor, f.name):
            raise ConfigError("", f"actor_train.{f.name}", f"{title} does not use it (it "
                                                            f"trains on pairs); remove it")
    check_where_it_trains(cfg)


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
    if cfg.actor_train.training_args.num_train_epochs:
        raise ConfigError("", "actor_train.training_args.num_train_epochs",
                          "reward-model training counts its steps with max_steps; remove it")


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
    """The reference is built from its model alone, beside actor_train (in the driver, or
    on ranks as a frozen cluster of actor_train's backend on its devices): only
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
            raise ConfigError("", f"reference.{f.name}", "the DPO reference runs frozen "
                                                         "beside actor_train, on its backend "
                                                         "and devices: only its model_args."
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


def check_where_it_trains(cfg: PipelineConfig) -> None:
    """hf_train in process on one device; on a kind that trains on ranks
    (`ranks_with_process_group`) also a process-group backend, without LoRA."""
    if cfg.resume_from_checkpoint:
        raise ConfigError("", "resume_from_checkpoint", "pair runs do not resume yet; start "
                                                        "a new run (pretrain: a checkpoint "
                                                        "folder continues from its weights)")
    kind, title = kind_of(cfg), kind_title(cfg)
    strategy = cfg.actor_train.strategy_args.strategy_name
    in_process = " or ".join(backends_with(lambda s: sft_backend(s) and not s.process_group))
    ranks = (" or ".join(backends_with(sft_ranks_backend)) if kind.ranks_with_process_group
             else "")
    on_ranks = bool(ranks) and has_capability(strategy, sft_ranks_backend)
    if not on_ranks and not has_capability(strategy, lambda s: sft_backend(s)
                                           and not s.process_group):
        where = f"{in_process} (in process, one device)" + (
            f" or {ranks} (ranks on device_mapping)" if ranks else "")
        raise ConfigError("", "actor_train.strategy_args.strategy_name",
                          f"{title} trains actor_train on {where}, not {strategy}")
    mapping = cfg.actor_train.device_mapping
    if not on_ranks and ((mapping is not None and len(mapping) > 1)
                         or cfg.actor_train.num_gpus_per_worker != 1):
        raise ConfigError("", "actor_train.device_mapping",
                          f"{title} on {strategy} trains on one device in process: leave "
                          f"device_mapping and num_gpus_per_worker unset"
                          + (f", or use {ranks} for several ranks" if ranks else ""))
    if on_ranks and lora_on(cfg.actor_train.model_args):
        raise ConfigError("", "actor_train.model_args.lora_target",
                          f"{title} with LoRA trains on {in_process} (its checkpoint is the "
                          f"adapter); on {strategy} ranks it writes whole models: remove "
                          f"LoRA or use {in_process}")
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


# actor_train's policy-gradient keys: online DPO's pair loss reads none of them
PG_ACTOR_KEYS = ("pg_variant", "pg_variant_args", "loss_agg_mode", "tis_lower_bound",
                 "tis_upper_bound", "topr_positive_weight", "topr_negative_weight",
                 "cispo_epsilon_low", "cispo_epsilon_high", "cispo_use_unified_mask",
                 "kimi15_tau")


def check_online_dpo(cfg: PipelineConfig) -> None:
    """The online_dpo kind's `config_check` (config/kinds.py): the loss keys as offline
    DPO's, actor_train's policy-gradient keys refused, and the reference the loss reads:
    a `reference` block (a role of its own, or with LoRA the adapter-off base) for
    sigmoid and ipo, none for simpo."""
    check_pair_keys(cfg)
    check_loss_keys(cfg)
    actor = ActorTrainConfig()
    for name in PG_ACTOR_KEYS:
        if getattr(cfg.actor_train, name) != getattr(actor, name):
            raise ConfigError("", f"actor_train.{name}", "online DPO trains with the pairwise "
                                                          "loss (dpo_loss_type), not a "
                                                          "policy-gradient loss; remove it")
    args = cfg.actor_train.training_args
    if args.per_device_train_batch_size % 2:
        raise ConfigError("", "actor_train.training_args.per_device_train_batch_size",
                          f"counts rows in online DPO, two per pair: "
                          f"{args.per_device_train_batch_size} would split a pair; make it "
                          f"even")
    if args.dynamic_batching:
        raise ConfigError("", "actor_train.training_args.dynamic_batching",
                          "token-budget micro-batches reorder rows and would split a "
                          "pair's chosen and rejected responses; remove it")
    loss = loss_type(cfg)
    if LOSS_NAMES[loss] and cfg.reference is None:
        raise ConfigError("", "reference", f"dpo_loss_type {loss} reads a reference policy: "
                                           f"add a reference block (its model_args: the "
                                           f"start model; with LoRA the base with the "
                                           f"adapter off), or use dpo_loss_type: simpo")
    if not LOSS_NAMES[loss] and cfg.reference is not None:
        raise ConfigError("", "reference", f"{loss} uses no reference policy; remove the "
                                           f"reference block")
