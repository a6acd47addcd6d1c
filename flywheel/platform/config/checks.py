"""Cross-field rules: what a config must satisfy beyond each field's own type.

Pure functions on a `PipelineConfig`; each raises `ConfigError` with the key path to change
and the reason, and none fills anything in. The loader runs `check_config` after strict
conversion and adds the file name. Only rules the ROLL seed configs satisfy belong here;
anything that depends on this machine (packages, GPUs, files) is a warning in
`environment_checks.py` instead, because the same file must validate on a laptop and run on
a cluster.

To add a backend: one name in `TRAIN_STRATEGIES` or `INFER_STRATEGIES` (and its entry in
`flywheel.workers.strategies.registry`). To add a reward type: one line in `REWARD_TYPES`
(and in `flywheel.workers.rewards.registry`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from flywheel.platform.config.agentic_checks import check_agentic
from flywheel.platform.config.derived import offloads_between_phases, shared_actor_devices
from flywheel.platform.config.errors import ConfigError, did_you_mean
from flywheel.platform.config.judge_checks import check_llm_judge
from flywheel.platform.config.key_checks import check_keys_act
from flywheel.platform.config.reward_checks import check_reward_routing
from flywheel.platform.config.schema import (
    PipelineConfig,
    RewardConfig,
    StrategyArgs,
    WorkerConfig,
)
from flywheel.platform.config.sft_checks import check_sft

# sim_*: latency-only backends for scheduling benchmarks and tests (latency_sim.py).
TRAIN_STRATEGIES = ("hf_train", "deepspeed_train", "megatron_train", "sim_train")
INFER_STRATEGIES = ("hf_infer", "vllm", "sglang", "sim_infer")
# Engines that load weights while requests run (workers/strategies/registry.py `streams`)
STREAMING = ("vllm",)
ALL_STRATEGIES = TRAIN_STRATEGIES + INFER_STRATEGIES
# Which backends can run each role. A reward model may train-style score or generate (judge).
ROLE_STRATEGIES: dict[str, tuple[str, ...]] = {
    "actor_train": TRAIN_STRATEGIES,
    # a value head on every real training backend (workers/strategies/model_head.py)
    "critic": ("hf_train", "deepspeed_train", "megatron_train"),
    "actor_infer": INFER_STRATEGIES,
    "reference": TRAIN_STRATEGIES + ("hf_infer",),
    "rewards": ALL_STRATEGIES,
}
# reward_type -> "rule" (scored in Python, no model, strategy unused) or "model".
REWARD_TYPES: dict[str, str] = {"math_rule": "rule", "code_sandbox": "rule", "llm_judge": "model"}
# megatron_train splits each worker group into model-parallel groups of this many devices;
# data parallelism is what remains.
MEGATRON_PARALLEL_KEYS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
)


@dataclass(frozen=True)
class Role:
    key_path: str  # "actor_train", "rewards.math_rule"
    kind: str  # key of ROLE_STRATEGIES
    worker: WorkerConfig


def roles(cfg: PipelineConfig) -> Iterator[Role]:
    """Every role the config declares, with its key path."""
    yield Role("actor_train", "actor_train", cfg.actor_train)
    yield Role("actor_infer", "actor_infer", cfg.actor_infer)
    if cfg.reference is not None:
        yield Role("reference", "reference", cfg.reference)
    if cfg.critic is not None:
        yield Role("critic", "critic", cfg.critic)
    for name, reward in cfg.rewards.items():
        yield Role(f"rewards.{name}", "rewards", reward)


def is_rule_reward(role: Role) -> bool:
    """A rule reward loads no model, so its strategy and devices are unused."""
    return isinstance(role.worker, RewardConfig) and REWARD_TYPES.get(
        role.worker.reward_type) == "rule"


def devices(worker: WorkerConfig) -> list[int]:
    """The role's device indices; unset means one worker on slot 0."""
    return worker.device_mapping if worker.device_mapping is not None else [0]


def model_parallel_size(worker: WorkerConfig, key_path: str) -> int:
    """Devices per model replica inside one worker group (megatron TP x PP x CP), else 1."""
    if worker.strategy_args.strategy_name != "megatron_train":
        return 1
    size = 1
    for key in MEGATRON_PARALLEL_KEYS:
        value = worker.strategy_args.strategy_config.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError("", f"{key_path}.strategy_args.strategy_config.{key}",
                              f"expected an int >= 1, got {value!r}")
        size *= value
    return size


def data_parallel_size(worker: WorkerConfig, key_path: str = "") -> int:
    """Model replicas: len(device_mapping) / num_gpus_per_worker / model-parallel size."""
    return len(devices(worker)) // worker.num_gpus_per_worker // model_parallel_size(
        worker, key_path)


def check_config(cfg: PipelineConfig) -> None:
    """Raise ConfigError for the first rule `cfg` breaks."""
    check_sft(cfg)  # first: an RL key in an SFT file is refused as such
    check_positive(cfg)
    check_strategies(cfg)
    check_device_groups(cfg)
    check_batch_sizes(cfg)
    check_async(cfg)
    check_phase_switch(cfg)
    check_cpu_affinity(cfg)
    check_sampling(cfg)
    check_algorithm_roles(cfg)
    check_agentic(cfg)
    check_reward_routing(cfg)
    check_llm_judge(cfg)
    check_keys_act(cfg)  # accepted keys that would do nothing here (key_checks.py)


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
        if isinstance(role.worker, RewardConfig):
            counts[f"{role.key_path}.world_size"] = role.worker.world_size
    for key_path, value in counts.items():
        if value < 1:
            raise ConfigError("", key_path, f"must be at least 1, got {value}")
    for key_path, value in {"max_steps": cfg.max_steps, "save_steps": cfg.save_steps,
                            "eval_steps": cfg.eval_steps}.items():
        if value < 0:
            raise ConfigError("", key_path, f"must be >= 0, got {value}")


def check_strategies(cfg: PipelineConfig) -> None:
    """Every role names a known backend that can run it; every reward type is known."""
    for role in roles(cfg):
        key_path = f"{role.key_path}.strategy_args.strategy_name"
        name = role.worker.strategy_args.strategy_name
        allowed = ROLE_STRATEGIES[role.kind]
        if name not in ALL_STRATEGIES:
            raise ConfigError("", key_path, f"unknown strategy '{name}'"
                                            f"{did_you_mean(name, ALL_STRATEGIES)}; "
                                            f"{role.kind} accepts {', '.join(allowed)}")
        if name not in allowed:
            kind = "training" if name in TRAIN_STRATEGIES else "generation"
            unset = " (the default when strategy_name is not written)" if (
                name == StrategyArgs().strategy_name) else ""
            raise ConfigError("", key_path, f"'{name}'{unset} is a {kind} backend and cannot "
                                            f"run {role.kind}; it accepts {', '.join(allowed)}")
        if isinstance(role.worker, RewardConfig) and role.worker.reward_type not in REWARD_TYPES:
            reward_type = role.worker.reward_type
            raise ConfigError("", f"{role.key_path}.reward_type",
                              f"unknown reward_type '{reward_type}'"
                              f"{did_you_mean(reward_type, REWARD_TYPES)}; known: "
                              f"{', '.join(REWARD_TYPES)}")


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


def check_batch_sizes(cfg: PipelineConfig) -> None:
    """One step's samples must fill whole optimizer steps of every training role."""
    if cfg.pipeline_type == "sft":  # a step is one optimizer step; no rollout batch
        return
    samples = cfg.rollout_batch_size * cfg.num_return_sequences_in_group
    trainers = [r for r in roles(cfg) if r.kind in ("actor_train", "critic")]
    for role in trainers:
        args = role.worker.training_args
        dp = data_parallel_size(role.worker, role.key_path)
        global_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * dp
        if samples % global_batch:
            raise ConfigError(
                "", "rollout_batch_size",
                f"rollout_batch_size x num_return_sequences_in_group = "
                f"{cfg.rollout_batch_size} x {cfg.num_return_sequences_in_group} = {samples} "
                f"samples per step is not a multiple of {role.key_path}'s global batch "
                f"per_device_train_batch_size x gradient_accumulation_steps x dp_size = "
                f"{args.per_device_train_batch_size} x {args.gradient_accumulation_steps} x "
                f"{dp} = {global_batch}; change one of them so it divides")


def check_async(cfg: PipelineConfig) -> None:
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
    if segment is not None and cfg.actor_infer.strategy_args.strategy_name in STREAMING:
        raise ConfigError("", "partial_rollout_segment_tokens",
                          "has no effect on vllm: its requests are not cut into segments but "
                          "continue on new weights inside the engine; remove the key")


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


def check_algorithm_roles(cfg: PipelineConfig) -> None:
    """Algorithms that need a role must have it declared."""
    if cfg.adv_estimator == "gae" and cfg.critic is None:
        raise ConfigError("", "adv_estimator", "gae estimates advantages with a value model: "
                                               "add a critic: block, or use grpo or reinforce")
    if cfg.use_kl_loss and cfg.reference is None:
        raise ConfigError("", "use_kl_loss", "the KL loss compares against a reference "
                                             "policy: add a reference: block")
    if cfg.init_kl_coef > 0 and cfg.reference is None:
        raise ConfigError("", "init_kl_coef", f"init_kl_coef={cfg.init_kl_coef:g} adds a KL "
                                              f"penalty against a reference policy: add a "
                                              f"reference: block, or set it to 0")
