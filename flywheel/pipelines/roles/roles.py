"""Starting the roles a pipeline needs, as Ray clusters placed by `device_mapping`.

One placement group covers every role's devices (see platform/resources.py). Rule-based
reward workers own no device and are scheduled freely. Thread budget: in a synchronous
run training and generation take turns, so each may use every core; when they overlap
(async_generation_ratio > 0) each gets half, so neither starves the other.

Training backends whose ranks form one torch.distributed group (deepspeed_train,
megatron_train) finish starting in `join_process_group`: rank 0 names its address and a
free port, then every rank joins and builds its strategy.

A reference of the same base model as a LoRA actor_train (derived.py
`reference_from_actor`) starts no worker and takes no device: its log-probs are
actor_train's with the adapter disabled (`Roles.reference_logprobs`). That is the one
place the pipeline asks for reference log-probs, so the roles a rollout needs follow it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from flywheel.config.derived import (
    context_length,
    data_parallel_size,
    loads_model,
    offloads_between_phases,
    reference_from_actor,
    served_adapter,
    shared_actor_devices,
)
from flywheel.config.kinds import kind_of, scores_with_rewards
from flywheel.config.schema import PipelineConfig, WorkerConfig
from flywheel.pipelines.roles.handles import InferRole, Pending, RewardRole, TrainRole
from flywheel.platform.cluster import Cluster
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.models.weight_size import weight_bytes
from flywheel.platform.resources import DevicePlacement, RoleDevices, place_devices, slots_needed
from flywheel.platform.startup_heap import freeze_startup_heap
from flywheel.workers.batch import TokenBatch
from flywheel.workers.infer_worker import InferWorker
from flywheel.workers.reward_worker import RewardWorker
from flywheel.workers.rewards.registry import reward_spec
from flywheel.workers.rewards.reward_limits import memory_limit_mb
from flywheel.workers.strategies.model_head import VALUE, actor_and_reference_heads
from flywheel.workers.strategies.registry import strategy_spec
from flywheel.workers.strategies.train_loop import optimizer_steps_per_train_step
from flywheel.workers.train_worker import TrainWorker
from flywheel.workers.weight_broadcast import Backend


def role_devices(role: str, cfg: WorkerConfig) -> RoleDevices:
    mapping = tuple(cfg.device_mapping) if cfg.device_mapping else (0,)
    return RoleDevices(role, mapping, cfg.num_gpus_per_worker)


def streams(cfg: PipelineConfig) -> bool:
    """Whether actor_infer's backend takes many generate calls at once into one engine
    batch (vllm; workers/infer_worker.py's generate_stream)."""
    return strategy_spec(cfg.actor_infer.strategy_args.strategy_name).streams


def device_roles(cfg: PipelineConfig) -> list[RoleDevices]:
    roles = [role_devices("actor_train", cfg.actor_train),
             role_devices("actor_infer", cfg.actor_infer)]
    if cfg.reference is not None and not reference_from_actor(cfg):
        roles.append(role_devices("reference", cfg.reference))
    if cfg.critic is not None:
        roles.append(role_devices("critic", cfg.critic))
    roles += [role_devices(f"teacher.{name}", t) for name, t in cfg.teacher.items()
              if t.weights == "own"]  # the student's own weights: actor_train's
    if scores_with_rewards(cfg):
        roles += [role_devices(f"rewards.{name}", reward)
                  for name, reward in cfg.rewards.items() if loads_model(reward)]
    return roles


def join_process_group(cluster: Cluster, wcfg: WorkerConfig) -> None:
    """Second start phase of process-group backends: rendezvous at rank 0, then build."""
    if not strategy_spec(wcfg.strategy_args.strategy_name).process_group:
        return
    master_addr, master_port = cluster.get(cluster.submit_one(0, "master_address"), rank=0)
    cluster.call_all("init_process_group", master_addr, master_port)


def collective_weight_sync(cfg: PipelineConfig, actor_train: TrainRole,
                           actor_infer: InferRole) -> Backend | None:
    """The collective backend weight syncs take, or None (shared memory or the object store
    carry them). `weight_sync_carrier: collective`: NCCL on CUDA, else gloo (the checks
    refused the layouts a broadcast cannot serve). auto: "nccl" when actor_train and
    actor_infer run on CUDA on devices of their own (NCCL refuses two ranks on one GPU)
    and every sync is loaded as soon as it is made (a broadcast keeps no copy for a
    checkpoint: model_update_frequency 1); on CPU gloo would be slower than shared memory."""
    carrier = cfg.weight_sync_carrier
    if carrier in ("shared_memory", "object_store") or (carrier == "auto" and (
            cfg.model_update_frequency > 1 or shared_actor_devices(cfg))):
        return None
    seen = actor_train.call_all("accelerator")[:1] + actor_infer.call_all("accelerator")
    on_cuda = all(a == "cuda" for a in seen)
    if carrier == "collective":
        return "nccl" if on_cuda else "gloo"
    return "nccl" if on_cuda else None


def num_slots(cfg: PipelineConfig) -> int:
    return slots_needed(device_roles(cfg))


@dataclass
class Roles:
    actor_train: TrainRole
    actor_infer: InferRole
    reference: TrainRole | None
    critic: TrainRole | None
    rewards: dict[str, RewardRole]
    placement: DevicePlacement
    all: list[Cluster] = field(default_factory=list)
    # the train steps the learning-rate schedules were sized for; kept in every checkpoint
    # so a resumed run keeps the curve (platform/resume.py: schedule_steps)
    schedule_steps: int = 0
    # the reference is actor_train's LoRA base (derived.py reference_from_actor)
    reference_in_actor: bool = False
    # on-policy distillation's teachers of their own weights, by name (forward-only, like a
    # reference); a teacher of the student's weights scores on actor_train
    teachers: dict[str, TrainRole] = field(default_factory=dict)

    def reference_logprobs(self, batch: TokenBatch) -> Pending | None:
        """The reference policy's log-probs of `batch`, under way; None without one."""
        if self.reference_in_actor:
            return self.actor_train.forward_base_logprobs(batch)
        return self.reference.forward_logprobs(batch) if self.reference else None

    def freeze_startup_heaps(self) -> None:
        """Start-up is over (models loaded, rollout workers started): every worker's and
        the driver's start-up objects leave later full garbage collections, each of which
        would stall the step it falls in (platform/startup_heap.py)."""
        pending = [(cluster, cluster.submit_all("freeze_startup_heap")) for cluster in self.all]
        freeze_startup_heap()
        for cluster, refs in pending:
            cluster.gather(refs)

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):  # a dead rank 0 left its files to the sweep
            self.actor_train.stop_sharing_weights()
        for cluster in self.all:
            cluster.shutdown()
        self.placement.release()


def schedule_per_train_step(cfg: PipelineConfig) -> bool:
    """Whether the learning-rate schedules count train steps rather than optimizer steps:
    agentic step-level samples, one row per turn played, so a train step's optimizer
    steps vary with the episodes' lengths and no count known at the start is the run's.
    Stepped once per train step (as verl steps its schedulers), the schedule spans the run
    exactly: warmup ends after warmup_ratio of the train steps, and the last train step
    has the schedule's last learning rate, above 0. (A bound from max_steps turns per
    episode would leave a run of shorter episodes partway down the curve, its warmup
    stretched by the same factor.)"""
    return kind_of(cfg).envs and cfg.step_level_samples


def schedule_horizon(cfg: PipelineConfig, wcfg: WorkerConfig, train_steps: int) -> int:
    """The learning-rate schedule's length: train steps x mini-batches per step x
    ppo_epochs optimizer steps, as the update loop takes them (one rank's share of the
    batch per model replica); the train steps where `schedule_per_train_step`."""
    if schedule_per_train_step(cfg):
        return train_steps
    rows = cfg.rollout_batch_size
    if kind_of(cfg).responses:  # rollout_batch_size counts prompts, each a group
        rows *= cfg.num_return_sequences_in_group
    per_replica = max(1, rows // data_parallel_size(wcfg))
    return train_steps * optimizer_steps_per_train_step(wcfg.training_args, per_replica,
                                                        cfg.ppo_epochs)


def actor_train_model(cfg: PipelineConfig, model_path: str) -> str:
    """actor_train's own model when it names one, else the run's `pretrain`."""
    name = cfg.actor_train.model_args.model_name_or_path
    return resolve_pretrain(name) if name else model_path


def starts_together(placement: DevicePlacement) -> bool:
    """Whether every role may start at once, or each waits for the one before it.

    At once, the workers' starts (importing torch and transformers, loading a model: most
    of a short run's wall time) overlap on the machine's cores. On GPUs shared by two
    workers they take turns: vLLM sizes its cache from the free memory it measures as it
    starts, which a model loading beside it would skew. CPU slots hold no such memory."""
    return placement.resource != "GPU" or max(placement.sharing.values(), default=1) <= 1


def start_roles(cfg: PipelineConfig, model_path: str, total_steps: int,
                log_dir: Path | None = None) -> Roles:
    """Every role's cluster; `total_steps`: the train steps the learning-rate schedules
    span (a resumed run's are its first start's); `log_dir`: where each worker's output
    goes (platform/backend_logs.py)."""
    placement = place_devices(device_roles(cfg))
    cores = os.cpu_count() or 1
    default_threads = cores if cfg.async_generation_ratio == 0 else max(1, cores // 2)
    together = starts_together(placement)
    started: list[Cluster] = []

    def launched(cluster: Cluster) -> Cluster:
        started.append(cluster)
        if not together:
            cluster.wait_ready(cfg.timeouts.startup_s)
        return cluster

    def start(role: str, handle: type[Cluster], worker_cls: type, wcfg: WorkerConfig,
              **kwargs) -> Cluster:
        # a role's own model: a hub id, a folder, a .gguf file or a built-in name
        path = (resolve_pretrain(wcfg.model_args.model_name_or_path)
                if wcfg.model_args.model_name_or_path else model_path)
        threads = wcfg.num_threads or (len(wcfg.cpu_affinity) if wcfg.cpu_affinity
                                       else default_threads)
        return launched(handle.launch(role, worker_cls, role_devices(role, wcfg), placement,
                                      init_kwargs=dict(model_path=path, cfg=wcfg,
                                                       seed=cfg.seed, num_threads=threads,
                                                       cpu_affinity=wcfg.cpu_affinity,
                                                       **kwargs),
                                      timeout_s=cfg.timeouts.call_s, log_dir=log_dir))

    # the reference's head is untruncated (model_head.ModelHead.for_reference)
    policy, reference_policy = actor_and_reference_heads(
        cfg.actor_infer.generating_args, cfg.actor_infer.strategy_args.strategy_name)
    try:
        actor_train = start("actor_train", TrainRole, TrainWorker, cfg.actor_train,
                            total_steps=schedule_horizon(cfg, cfg.actor_train, total_steps),
                            trainable=True, head=policy,
                            weight_sync_bucket_mb=cfg.weight_sync_bucket_mb,
                            schedule_per_train_step=schedule_per_train_step(cfg))
        actor_infer = start("actor_infer", InferRole, InferWorker, cfg.actor_infer,
                            context_length=context_length(cfg),
                            sleep_mode=offloads_between_phases(cfg),
                            in_flight_updates=cfg.partial_rollout and streams(cfg),
                            lora_adapter=served_adapter(cfg),
                            unsynced_prefix=cfg.actor_train.model_args.freeze_module_prefix)
        reference, in_actor = None, reference_from_actor(cfg)
        if cfg.reference is not None and not in_actor:
            reference = start("reference", TrainRole, TrainWorker, cfg.reference,
                              total_steps=total_steps, trainable=False,
                              head=reference_policy)
        teachers = {name: start(f"teacher.{name}", TrainRole, TrainWorker, tcfg,
                                total_steps=total_steps, trainable=False,
                                head=reference_policy)
                    for name, tcfg in cfg.teacher.items() if tcfg.weights == "own"}
        critic = None
        if cfg.critic is not None:
            critic = start("critic", TrainRole, TrainWorker, cfg.critic,
                           total_steps=schedule_horizon(cfg, cfg.critic, total_steps),
                           trainable=True, head=VALUE,
                           schedule_per_train_step=schedule_per_train_step(cfg))
        rewards = {}
        # Agentic episodes are scored by their envs, an agent's by itself unless
        # agent.reward is rewards: no reward workers.
        for name, rcfg in (cfg.rewards.items() if scores_with_rewards(cfg) else ()):
            role, wcfg, where, threads = f"rewards.{name}", rcfg, None, 1
            devices = RoleDevices(role, tuple(range(max(1, rcfg.world_size))))
            if loads_model(rcfg):  # a judge model on the role's own devices
                model = rcfg.model_args.model_name_or_path or cfg.reward_pretrain
                wcfg = replace(rcfg, model_args=replace(rcfg.model_args,
                                                        model_name_or_path=model))
                devices, where = role_devices(role, rcfg), placement
                threads = rcfg.num_threads or (len(rcfg.cpu_affinity) if rcfg.cpu_affinity
                                               else default_threads)
            # the scoring processes' memory limit by the reward's kind, known here even
            # for a reward registered in this process only (workers/rewards/reward_limits.py)
            wcfg = replace(wcfg, memory_mb=memory_limit_mb(rcfg))
            rewards[name] = launched(RewardRole.launch(
                role, RewardWorker, devices, where, timeout_s=cfg.timeouts.score_s,
                log_dir=log_dir,
                init_kwargs=dict(reward_type=rcfg.reward_type, cpu_affinity=rcfg.cpu_affinity,
                                 cfg=wcfg, num_threads=threads,
                                 start_timeout_s=cfg.timeouts.startup_s,
                                 build=reward_spec(rcfg.reward_type).build)))
        for cluster in started:  # every role is starting; now wait for each
            cluster.wait_ready(cfg.timeouts.startup_s)
        for cluster, wcfg in ((actor_train, cfg.actor_train), (reference, cfg.reference),
                              (critic, cfg.critic),
                              *((teachers[n], cfg.teacher[n]) for n in teachers)):
            if cluster is not None:
                join_process_group(cluster, wcfg)
        train_path = actor_train_model(cfg, model_path)
        carrier = actor_train.share_weights_with(
            actor_infer, weight_bytes(train_path, cfg.actor_train.model_args.dtype),
            collective_weight_sync(cfg, actor_train, actor_infer), cfg.timeouts.call_s,
            carrier=cfg.weight_sync_carrier)
        print(f"weight sync: {carrier}", flush=True)
        if cfg.actor_train.model_args.lora_target is not None:
            print("weight sync sends: " + (
                "the LoRA adapter alone (A and B), served by vllm as one adapter per version "
                "(lora_sync: adapter)" if served_adapter(cfg) else
                "the weights with the LoRA adapter merged in (lora_sync: merged)"), flush=True)
        frozen = cfg.actor_train.model_args.freeze_module_prefix
        if frozen:
            print(f"weight sync sends: every weight but actor_train's frozen modules "
                  f"({frozen}), which actor_infer keeps as it loaded them", flush=True)
        if in_actor:
            print("reference: actor_train's model with its LoRA adapter disabled (no "
                  "reference worker, no second copy of the weights)", flush=True)
    except BaseException:
        for cluster in started:
            cluster.shutdown()
        placement.release()
        raise
    return Roles(actor_train, actor_infer, reference, critic, rewards, placement, all=started,
                 schedule_steps=total_steps, reference_in_actor=in_actor, teachers=teachers)
