"""Cross-field rules: what a config must satisfy beyond each field's own type.

Pure functions on a `PipelineConfig`; each raises `ConfigError` with the key path to change
and the reason, and none fills anything in. The loader runs `check_config` after strict
conversion and adds the file name. Only rules the ROLL seed configs satisfy belong here;
anything that depends on this machine (packages, GPUs, files) is a warning in
`checks/environment.py` instead, because the same file must validate on a laptop and run on
a cluster.

Names of backends, rewards, loss variants, templates and envs are checked against the
catalogs of the layers that implement them (`catalogs.py`), handed in by the caller: adding
one of those is a line in its own catalog, never a name here.
"""

from __future__ import annotations

from dataclasses import fields

from flywheel.algorithms.policy_loss.params import KnobError, PolicyLossParams, PPOClipKnobs
from flywheel.config.catalogs import BackendEntry, Catalogs, estimator_of
from flywheel.config.checks.agentic import check_agentic
from flywheel.config.checks.distill import check_distill
from flywheel.config.checks.import_allowlist import check_import_paths
from flywheel.config.checks.judge import check_llm_judge
from flywheel.config.checks.keys import check_keys_act
from flywheel.config.checks.kind import check_kind
from flywheel.config.checks.names import check_exp_name
from flywheel.config.checks.preference import check_pair_keys
from flywheel.config.checks.reasoning_gym import check_reasoning_gym
from flywheel.config.checks.reward_model import check_reward_model
from flywheel.config.checks.rewards import check_reward_routing
from flywheel.config.derived import (
    MEGATRON_PARALLEL_KEYS,
    Role,
    data_parallel_size,
    devices,
    is_rule_reward,
    model_parallel_size,
    offloads_between_phases,
    roles,
    shared_actor_devices,
)
from flywheel.config.kinds import kind_of
from flywheel.config.lora_args import check_lora
from flywheel.config.schema import PipelineConfig, RewardConfig, StrategyArgs
from flywheel.platform.config.catalogs import Catalog, entry_settings, import_object
from flywheel.platform.config.errors import ConfigError, did_you_mean


def check_config(cfg: PipelineConfig, catalogs: Catalogs) -> None:
    """Raise ConfigError for the first rule `cfg` breaks."""
    check_kind(cfg)  # first: the kind's own refusals (an RL key in an SFT file, as such)
    check_pair_keys(cfg)  # a DPO / reward-model key under a kind that does not read it
    estimator_of(cfg)  # an unknown adv_estimator: one line listing the known ones
    check_positive(cfg)
    check_exp_name(cfg)
    check_distill(cfg, catalogs.backends)  # before the backends: a teacher's own message
    check_strategies(cfg, catalogs)
    check_device_groups(cfg)
    check_batch_sizes(cfg)
    check_async(cfg, catalogs.backends)
    check_phase_switch(cfg)
    check_weight_sync_carrier(cfg)
    check_frozen_sync(cfg)
    check_cpu_affinity(cfg)
    check_sampling(cfg)
    check_fractions(cfg)
    check_algorithm_roles(cfg)
    check_lora(cfg)
    check_agentic(cfg, catalogs.envs, catalogs.tools)
    check_reward_routing(cfg)
    check_reasoning_gym(cfg)
    check_import_paths(cfg)
    check_llm_judge(cfg, catalogs.backends)
    check_reward_model(cfg)
    check_keys_act(cfg, catalogs)  # accepted keys that would do nothing here (checks/keys.py)


def check_positive(cfg: PipelineConfig) -> None:
    """Counts that are divided by or looped over must be at least 1."""
    counts = {
        "rollout_batch_size": cfg.rollout_batch_size,
        "num_return_sequences_in_group": cfg.num_return_sequences_in_group,
        "ppo_epochs": cfg.ppo_epochs,
        "model_update_frequency": cfg.model_update_frequency,
        "weight_sync_bucket_mb": cfg.weight_sync_bucket_mb,
    }
    if cfg.ray.object_store_memory_mb is not None:
        counts["ray.object_store_memory_mb"] = cfg.ray.object_store_memory_mb
    for role in roles(cfg):
        counts[f"{role.key_path}.num_gpus_per_worker"] = role.worker.num_gpus_per_worker
        counts[f"{role.key_path}.infer_batch_size"] = role.worker.infer_batch_size
        args = role.worker.training_args
        counts[f"{role.key_path}.training_args.per_device_train_batch_size"] = (
            args.per_device_train_batch_size)
        counts[f"{role.key_path}.training_args.gradient_accumulation_steps"] = (
            args.gradient_accumulation_steps)
        if args.dynamic_batching:  # the budget each micro-batch is cut to
            counts[f"{role.key_path}.training_args.max_tokens_per_micro_batch"] = (
                args.max_tokens_per_micro_batch)
        if args.max_packed_sequence_length < 0:
            raise ConfigError("", f"{role.key_path}.training_args.max_packed_sequence_length",
                              f"must be >= 0 (0: the longest row), got "
                              f"{args.max_packed_sequence_length}")
        if args.sequence_packing and role.worker.model_args.moe_aux_loss_coef not in (None, 0):
            raise ConfigError("", f"{role.key_path}.training_args.sequence_packing",
                              "the MoE load-balancing loss (model_args.moe_aux_loss_coef) "
                              "reads the padded layout and is not built for packed rows: "
                              "turn one of them off")
        if isinstance(role.worker, RewardConfig):
            counts[f"{role.key_path}.world_size"] = role.worker.world_size
    for key_path, value in counts.items():
        if value < 1:
            raise ConfigError("", key_path, f"must be at least 1, got {value}")
    for key_path, value in {"max_steps": cfg.max_steps, "save_steps": cfg.save_steps,
                            "eval_steps": cfg.eval_steps}.items():
        if value < 0:
            raise ConfigError("", key_path, f"must be >= 0, got {value}")


def role_backends(backends: Catalog[BackendEntry], kind: str) -> list[str]:
    """The backends that can run a role of `kind` (actor_train, critic, rewards, ...)."""
    return [name for name, spec in backends.items() if kind in spec.roles]


def check_strategies(cfg: PipelineConfig, catalogs: Catalogs) -> None:
    """Every role names a known backend that can run it; every reward type and the policy
    loss are known, with the settings they declare (catalogs.entry_settings)."""
    backends = catalogs.backends
    for role in roles(cfg):
        key_path = f"{role.key_path}.strategy_args.strategy_name"
        name = role.worker.strategy_args.strategy_name
        allowed = role_backends(backends, role.kind)
        if name not in backends:
            raise ConfigError("", key_path, f"unknown strategy '{name}'"
                                            f"{did_you_mean(name, backends.names())}; "
                                            f"{role.kind} accepts {', '.join(allowed)}")
        if name not in allowed:
            kind = "training" if backends.get(name, key_path).kind == "train" else "generation"
            unset = " (the default when strategy_name is not written)" if (
                name == StrategyArgs().strategy_name) else ""
            raise ConfigError("", key_path, f"'{name}'{unset} is a {kind} backend and cannot "
                                            f"run {role.kind}; it accepts {', '.join(allowed)}")
        if not is_rule_reward(role, catalogs.rewards):  # a rule reward starts no backend
            check_backend_config(role, backends.get(name, key_path), cfg)
        if isinstance(role.worker, RewardConfig):
            reward_type = role.worker.reward_type
            reward = catalogs.rewards.get(reward_type, f"{role.key_path}.reward_type")
            entry_settings(reward.settings, role.worker.reward_args,
                           f"{role.key_path}.reward_args", f"reward_type {reward_type}")
    variant = cfg.actor_train.pg_variant
    loss = catalogs.losses.get(variant, "actor_train.pg_variant")
    entry_settings(loss.settings, cfg.actor_train.pg_variant_args,
                   "actor_train.pg_variant_args", f"pg_variant {variant}")
    if loss.settings is None:
        check_loss_knobs(cfg)


def check_loss_knobs(cfg: PipelineConfig) -> None:
    """The knobs flywheel's variants read, checked by the params object the loss is built
    with (its checks live beside the losses), so a bad value is refused before the run
    starts, under its key."""
    try:
        PolicyLossParams.from_groups(cfg, cfg.actor_train)
    except KnobError as e:
        top = e.name in {f.name for f in fields(PPOClipKnobs)}
        raise ConfigError("", e.name if top else f"actor_train.{e.name}", e.message) from None


def check_backend_config(role: Role, backend: BackendEntry, cfg: PipelineConfig) -> None:
    """What the role's backend would refuse at start, refused now (its `config_check`).
    A key path that begins with a role field (strategy_args, generating_args) is the
    role's; any other (validation.) is the config's."""
    if backend.config_check is None:
        return
    try:
        import_object(backend.config_check)(role.kind, role.worker, cfg)
    except ConfigError as e:
        own = e.key_path.split(".")[0] in {f.name for f in fields(role.worker)}
        # the same class: a conversion tells a droppable refusal by it
        # (interop/roll/fit/backends.py)
        raise type(e)("", f"{role.key_path}.{e.key_path}" if own else e.key_path,
                      e.message) from None


def check_device_groups(cfg: PipelineConfig) -> None:
    """Each role's devices split evenly into workers and model-parallel groups."""
    for role in roles(cfg):
        worker, key_path = role.worker, f"{role.key_path}.device_mapping"
        count, per_worker = len(devices(worker)), worker.num_gpus_per_worker
        if count % per_worker:
            raise ConfigError("", key_path, f"{count} devices do not split into workers of "
                                            f"num_gpus_per_worker={per_worker}")
        group = model_parallel_size(worker, role.key_path)
        if (count // per_worker) % group:
            sizes = " x ".join(f"{k}={worker.strategy_args.strategy_config.get(k, 1)}"
                               for k in MEGATRON_PARALLEL_KEYS)
            raise ConfigError("", key_path, f"{count // per_worker} workers do not split into "
                                            f"model-parallel groups of {group} ({sizes})")
    check_sibling_devices(cfg)


# the roles whose work all falls while a turn-taking engine sleeps (step_loop.py)
TRAINING_PHASE_ROLES = {"actor_train", "reference", "critic"}


def check_sibling_devices(cfg: PipelineConfig) -> None:
    """A worker of num_gpus_per_worker > 1 (a vLLM engine over several GPUs) is placed on
    its first device; its engine starts its own processes on the others, which Ray does
    not see as taken (platform/resources.py). Another role there would share a GPU that
    Ray counts as free: refused, unless actor_train and actor_infer take turns
    (offloads_between_phases, ROLL's colocated layout) and the role works only in the
    training phase (actor_train, reference, critic: pipelines/loop/step_loop.py
    `training_phase`): the sleeping engine frees every device it runs on, its first and
    its siblings alike, while they run. Such a role's own weights stay resident while the
    engine is awake, as they do on the engine's first device."""
    turns = offloads_between_phases(cfg)
    held: dict[int, Role] = {}  # device -> the role whose engine runs there unseen
    for role in roles(cfg):
        per_worker = role.worker.num_gpus_per_worker
        mapping = devices(role.worker)
        for first in range(0, len(mapping), per_worker):
            for device in mapping[first + 1:first + per_worker]:
                held[device] = role
    for role in roles(cfg):
        for device in devices(role.worker):
            owner = held.get(device)
            if owner is None or owner.key_path == role.key_path or (
                    turns and owner.key_path == "actor_infer"
                    and role.key_path in TRAINING_PHASE_ROLES):
                continue
            hint = (", or let actor_train and actor_infer take turns on shared devices "
                    "(async_generation_ratio 0)"
                    if owner.key_path == "actor_infer" and role.key_path in TRAINING_PHASE_ROLES
                    else "")
            raise ConfigError("", f"{role.key_path}.device_mapping",
                              f"device {device} runs part of the engine of a worker of "
                              f"{owner.key_path} (num_gpus_per_worker "
                              f"{owner.worker.num_gpus_per_worker}), which Ray does not count "
                              f"as taken; give {role.key_path} other devices{hint}")


def check_batch_sizes(cfg: PipelineConfig) -> None:
    """One step's samples (its rows, where the kind trains a fixed number a group) must
    fill whole optimizer steps of every training role."""
    kind = kind_of(cfg)
    if not kind.rl:  # SFT: a step is one optimizer step; no rollout batch
        return
    if kind.envs and cfg.batch_adjust_mode != "none":
        return  # the rows are fitted to whole optimizer steps each step (agentic/batch.py)
    per_group, counted, unit = (
        (kind.rows_per_group, "rows per group", "rows") if kind.rows_per_group is not None
        else (cfg.num_return_sequences_in_group, "num_return_sequences_in_group", "samples"))
    samples = cfg.rollout_batch_size * per_group
    trainers = [r for r in roles(cfg) if r.kind in ("actor_train", "critic")]
    for role in trainers:
        args = role.worker.training_args
        dp = data_parallel_size(role.worker, role.key_path)
        global_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * dp
        if samples % global_batch:
            raise ConfigError(
                "", "rollout_batch_size",
                f"rollout_batch_size x {counted} = "
                f"{cfg.rollout_batch_size} x {per_group} = {samples} "
                f"{unit} per step is not a multiple "
                f"of {role.key_path}'s global batch "
                f"per_device_train_batch_size x gradient_accumulation_steps x dp_size = "
                f"{args.per_device_train_batch_size} x {args.gradient_accumulation_steps} x "
                f"{dp} = {global_batch}; change one of them so it divides")


def check_async(cfg: PipelineConfig, backends: Catalog[BackendEntry]) -> None:
    """Asynchronous generation needs generation and training on separate devices; partial
    rollout only acts on asynchronous generation, in segments no longer than a response."""
    ratio = cfg.async_generation_ratio
    if ratio < 0:
        raise ConfigError("", "async_generation_ratio",
                          f"must be >= 0 (0 = synchronous), got {ratio}")
    if ratio > 0:
        shared = sorted(set(devices(cfg.actor_train)) & set(devices(cfg.actor_infer)))
        if shared:
            raise ConfigError(
                "", "actor_infer.device_mapping",
                f"async_generation_ratio={ratio:g} runs generation and training at the same "
                f"time, so actor_train and actor_infer cannot share devices, but both use "
                f"{shared} (an unset device_mapping means [0]); give them disjoint "
                f"device_mapping or set async_generation_ratio: 0")
    if cfg.offload_between_phases is True and not shared_actor_devices(cfg):
        raise ConfigError(
            "", "offload_between_phases",
            "true, but actor_train and actor_infer share no device, so there is no memory "
            "to hand over between phases; use auto or false, or give them the same "
            "device_mapping (with async_generation_ratio: 0)")
    if cfg.partial_rollout and ratio == 0:
        raise ConfigError(
            "", "partial_rollout",
            "has no effect with async_generation_ratio: 0 (the next batch starts only after "
            "the weight sync, so no generation is ever in flight across one); set "
            "async_generation_ratio > 0 or partial_rollout: false")
    segment, most = (cfg.partial_rollout_segment_tokens,
                     cfg.actor_infer.generating_args.max_new_tokens)
    if segment is not None and not 1 <= segment <= most:
        raise ConfigError("", "partial_rollout_segment_tokens",
                          f"must be in 1..actor_infer.generating_args.max_new_tokens={most}, "
                          f"got {segment}")
    infer = cfg.actor_infer.strategy_args.strategy_name
    if segment is not None and backends.get(infer, "actor_infer.strategy_args").streams:
        raise ConfigError("", "partial_rollout_segment_tokens",
                          f"has no effect on {infer}: its requests are not cut into segments "
                          f"but continue on new weights inside the engine; remove the key")


def check_phase_switch(cfg: PipelineConfig) -> None:
    """DeepSpeed moves ZeRO-3's optimizer state off the GPU only when the optimizer is its
    own FusedAdam: with torch's AdamW its `offload_states` stops on an assertion (seen on an
    H100 with bench/gpu_checks.py). Refused here rather than at the first phase switch."""
    args = cfg.actor_train.strategy_args
    given = args.strategy_config or {}
    if (args.strategy_name == "deepspeed_train" and given.get("zero_stage") == 3
            and given.get("torch_adam") is True and offloads_between_phases(cfg)):
        raise ConfigError(
            "", "actor_train.strategy_args.strategy_config.torch_adam",
            "true with zero_stage: 3, but actor_train frees its GPU memory for actor_infer "
            "between phases (offload_between_phases), and DeepSpeed offloads ZeRO-3 "
            "optimizer state only for its own FusedAdam; drop torch_adam, or set "
            "offload_between_phases: false")


def check_weight_sync_carrier(cfg: PipelineConfig) -> None:
    """A broadcast group delivers each sync as it is made and keeps no copy (a checkpoint
    needs the copy actor_infer holds when model_update_frequency > 1), and NCCL takes one
    rank per GPU: the layouts `collective` cannot serve are refused here."""
    if cfg.weight_sync_carrier != "collective":
        return
    if cfg.model_update_frequency > 1:
        raise ConfigError("", "weight_sync_carrier",
                          f"collective with model_update_frequency "
                          f"{cfg.model_update_frequency}: a broadcast keeps no copy of the "
                          f"weights actor_infer holds for a checkpoint; use auto")
    shared = shared_actor_devices(cfg)
    if shared:
        raise ConfigError("", "weight_sync_carrier",
                          f"collective, but actor_train and actor_infer share device(s) "
                          f"{shared} (one rank per GPU in a broadcast group); use auto")


def check_frozen_sync(cfg: PipelineConfig) -> None:
    """A weight sync leaves actor_train's frozen modules out: actor_infer keeps the copy it
    loaded (workers/strategies/frozen_modules.py), which is the trainer's only when both
    load the same checkpoint."""
    train = cfg.actor_train.model_args
    infer = cfg.actor_infer.model_args.model_name_or_path
    if train.freeze_module_prefix and infer and infer != (train.model_name_or_path
                                                          or cfg.pretrain):
        raise ConfigError("", "actor_infer.model_args.model_name_or_path",
                          f"{infer}, but actor_train loads "
                          f"{train.model_name_or_path or cfg.pretrain}: with "
                          f"freeze_module_prefix the weight sync leaves the frozen modules "
                          f"out, so actor_infer must load the checkpoint actor_train does; "
                          f"remove it or make the two the same")


def check_cpu_affinity(cfg: PipelineConfig) -> None:
    """Core lists are non-empty, without repeats; whether the cores exist is the machine's
    business (a worker that cannot pin itself fails to start, naming role and cores)."""
    lists = [(f"{role.key_path}.cpu_affinity", role.worker.cpu_affinity) for role in roles(cfg)]
    lists.append(("prefetch_cpu_affinity", cfg.prefetch_cpu_affinity))
    for key, cores in lists:
        if cores is None:
            continue
        if not cores:
            raise ConfigError("", key, "an empty core list pins to nothing: list cores, "
                                       "or leave it unset for no pinning")
        if any(c < 0 for c in cores):
            raise ConfigError("", key, f"core indices are ints >= 0, got {cores}")
        if len(set(cores)) != len(cores):
            raise ConfigError("", key, f"a core appears more than once in {cores}")


def check_sampling(cfg: PipelineConfig) -> None:
    """ROLL's two spellings of "samples per prompt" must not disagree."""
    group = cfg.num_return_sequences_in_group
    per_prompt = cfg.actor_infer.generating_args.num_return_sequences
    if per_prompt not in (1, group):
        raise ConfigError(
            "", "actor_infer.generating_args.num_return_sequences",
            f"is {per_prompt} but num_return_sequences_in_group is {group}; samples per "
            f"prompt come from num_return_sequences_in_group: set both to {group}, or write "
            f"num_return_sequences: ${{num_return_sequences_in_group}}")


def check_fractions(cfg: PipelineConfig) -> None:
    """Bounds whose values outside their range would mean nothing."""
    for role in roles(cfg):
        ratio = role.worker.training_args.warmup_ratio
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError("", f"{role.key_path}.training_args.warmup_ratio",
                              f"is a fraction of the run's optimizer steps, in [0, 1]; got "
                              f"{ratio}")
    low, high = cfg.difficulty_low_threshold, cfg.difficulty_high_threshold
    if not low < high:
        raise ConfigError("", "difficulty_low_threshold",
                          f"must be below difficulty_high_threshold ({high}): with {low} "
                          f"every group would be masked")
    for key in ("infer_filter_ratio_band", "infer_filter_diff_band"):
        band = getattr(cfg, key)
        if band is not None and not (len(band) == 2 and band[0] <= band[1]):
            raise ConfigError("", key, f"is [low, high] with low <= high; got {band}")
    if cfg.infer_filter_level != "none" and cfg.infer_filter_ratio_band is None and \
            cfg.infer_filter_diff_band is None:
        raise ConfigError("", "infer_filter_level", "filters by infer_filter_ratio_band, "
                          "infer_filter_diff_band or both: set one, or remove the level")


def check_algorithm_roles(cfg: PipelineConfig) -> None:
    """Algorithms that need a role must have it declared."""
    if estimator_of(cfg).needs_critic and cfg.critic is None:
        raise ConfigError("", "adv_estimator", f"{cfg.adv_estimator} estimates advantages "
                                               f"with a value model: add a critic: block, or "
                                               f"use grpo or reinforce")
    for key in ("kl_loss_coef", "init_kl_coef"):
        if getattr(cfg, key) < 0:
            raise ConfigError("", key, f"is a KL weight, >= 0; got {getattr(cfg, key):g} "
                                       f"(a negative one would reward leaving the reference)")
    if cfg.use_kl_loss and cfg.kl_loss_coef == 0:
        raise ConfigError("", "use_kl_loss", "use_kl_loss: true with kl_loss_coef 0 adds "
                                             "nothing to the loss while the reference runs "
                                             "every step: set kl_loss_coef > 0, or remove "
                                             "use_kl_loss")
    if cfg.use_kl_loss and cfg.reference is None:
        raise ConfigError("", "use_kl_loss", "the KL loss compares against a reference "
                                             "policy: add a reference: block")
    if cfg.init_kl_coef > 0 and cfg.reference is None:
        raise ConfigError("", "init_kl_coef", f"init_kl_coef={cfg.init_kl_coef:g} adds a KL "
                                              f"penalty against a reference policy: add a "
                                              f"reference: block, or set it to 0")
