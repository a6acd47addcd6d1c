"""RLVR: prompts scored by verifiers, trained with a policy-gradient loss.

One training step, in order:
  1. batch        take `rollout_batch_size` scored groups from the prefetch generator
                  (generation and scoring already ran, ahead by async_generation_ratio)
  2. log-probs    reference log-probs (and critic values); the old log-probs (pre-update
                  policy) too when the KL reward penalty needs them here
  3. advantages   grpo / reinforce (+ KL penalty, whitening, clipping)
  4. train        actor_train's train step with the configured pg_variant loss (and the
                  critic's beside it); it computes the old log-probs and the train/infer
                  mismatch first when step 2 did not
  5. sync         publish the new weights to actor_infer (every model_update_frequency);
                  the weights are asked for right behind the train call
  6. log / validate (generation paused) / checkpoint

Steps are 1-based in logs; a policy version is the number of train steps its weights
include, so a sample's staleness at (1-based) step s is (s − 1) − version: 0 for the
synchronous pipeline, at most ceil(r) + model_update_frequency − 1 with ratio r. With
partial rollout a response's later tokens may come from newer versions; its staleness is
still that of its first token (the bound), and `staleness/token_mean` averages per token.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.algorithms import AdaptiveKLController, FixedKLController, MismatchCorrection
from flywheel.pipelines.actor_loss_config import build_actor_loss
from flywheel.pipelines.domain_mix import DomainOrder, training_order
from flywheel.pipelines.group_filter import group_filter
from flywheel.pipelines.phase_switch import PhaseSwitch, describe
from flywheel.pipelines.prefetch import PrefetchGenerator
from flywheel.pipelines.prompt_data import (
    PromptEncoder,
    PromptOrder,
    PromptRecord,
    prompt_encoder,
)
from flywheel.pipelines.replay_buffer import ReplayBuffer, Taken
from flywheel.pipelines.role_handles import Pending
from flywheel.pipelines.roles import Roles, streams
from flywheel.pipelines.rollout import (
    Chunk,
    ChunkSource,
    Group,
    batch_chunks,
    chunk_size,
    generate_chunks,
    group_from_dict,
    group_to_dict,
    sampling_params,
    submit_scoring,
)
from flywheel.pipelines.sample_ledger import SampleLedger
from flywheel.pipelines.step_metrics import (
    domain_reward_metrics,
    domain_val_metrics,
    partial_rollout_metrics,
    reward_info_metrics,
    rollout_metrics,
    staleness_metrics,
    uniform_group_metrics,
)
from flywheel.pipelines.train_batch import add_advantages, pack_groups
from flywheel.platform.checkpoint import prune_checkpoints, writing_checkpoint
from flywheel.platform.cluster import WorkerError
from flywheel.platform.config.derived import (
    infer_is_correction,
    offloads_between_phases,
    shared_actor_devices,
)
from flywheel.platform.config.schema import PipelineConfig
from flywheel.platform.timing import StepTimer
from flywheel.platform.tracking import Tracker
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import TokenBatch
from flywheel.workers.critic_loss import CriticLoss
from flywheel.workers.infer_worker import STREAM_CALLS
from flywheel.workers.strategies.registry import strategy_spec
from flywheel.workers.weight_transfer import SyncedWeights

PHASE_EVENTS = "phase_events.jsonl"  # a colocated run's phase switches (phase_switch.py)
SYNCED_WEIGHTS = "actor_infer_weights"  # a checkpoint's copy of actor_infer's lagging weights
# infer_is_correction -> (level, mode) of train_infer_mismatch_weights
MISMATCH_MODES = {"token-truncate": ("token", "truncate"), "seq-truncate": ("sequence", "truncate"),
                  "token-mask": ("token", "mask"), "seq-mask": ("sequence", "mask")}


def mean_over_ranks(results: list[dict[str, float]]) -> dict[str, float]:
    """Each metric averaged over the ranks (of any role) that reported it."""
    keys = {k for r in results for k in r}
    return {k: sum(r[k] for r in results if k in r) / sum(k in r for r in results)
            for k in sorted(keys)}


def mismatch_correction(cfg: PipelineConfig) -> MismatchCorrection:
    chosen = infer_is_correction(cfg)
    level, mode = MISMATCH_MODES.get(chosen, ("token", "truncate"))
    return MismatchCorrection(level, mode, cfg.infer_is_lower_bound, cfg.infer_is_upper_bound,
                              apply=chosen != "none")


def max_staleness(cfg: PipelineConfig) -> int:
    return math.ceil(cfg.async_generation_ratio) + cfg.model_update_frequency - 1


def segment_tokens(cfg: PipelineConfig) -> int:
    """New tokens per generation request under partial rollout; 0: whole responses (also
    on a streaming backend, which continues running requests on new weights instead)."""
    if not cfg.partial_rollout or streams(cfg):
        return 0
    if cfg.partial_rollout_segment_tokens is not None:
        return cfg.partial_rollout_segment_tokens
    return max(1, cfg.actor_infer.generating_args.max_new_tokens // 4)


@dataclass
class RLVRPipeline:
    cfg: PipelineConfig
    roles: Roles
    tokenizer: object
    train_records: list[PromptRecord]
    val_records: list[PromptRecord]
    tracker: Tracker
    output_dir: Path
    step: int = 0  # train steps completed
    version: int = 0  # train steps included in actor_infer's weights
    order: PromptOrder | DomainOrder = field(init=False)  # prompts of each batch
    encoder: PromptEncoder = field(init=False)  # prompt -> ids, by actor_train's data_args
    kl_ctl: FixedKLController | AdaptiveKLController = field(init=False)
    loss_fn: ActorLoss = field(init=False)
    correction: MismatchCorrection = field(init=False)  # infer_is_correction
    buffer: ReplayBuffer = field(init=False)
    ledger: SampleLedger = field(init=False)
    first_batch: int = 0  # batch index the generator starts from (moves on resume)
    # Every group below this seq has been generated (trained, dropped, or in the buffer):
    # a resumed run starts its first batch's chunks here, so none is generated twice.
    next_seq: int = 0
    weights_ahead: Pending | None = None  # weights queued behind this step's train call
    # The weights actor_infer holds (version `version`), kept while they may lag actor_train's
    # (model_update_frequency > 1): a checkpoint taken between syncs saves them, so a resumed
    # run generates from the same weights as the uninterrupted one.
    synced_weights: SyncedWeights | None = None
    # Asked after every step; true: checkpoint and return early (launch: SIGINT/SIGTERM).
    stop_requested: Callable[[], bool] = lambda: False
    old_in_train: bool = field(init=False)  # actor_train computes the old log-probs itself
    switch: PhaseSwitch = field(init=False)  # colocated roles take turns (phase_switch.py)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.order = training_order(self.train_records, cfg)
        self.encoder = prompt_encoder(self.tokenizer, cfg.actor_train.data_args)
        self.loss_fn = build_actor_loss(cfg)
        self.correction = mismatch_correction(cfg)
        # Only the KL reward penalty needs the old log-probs before the train call.
        self.old_in_train = cfg.init_kl_coef == 0
        self.kl_ctl = (AdaptiveKLController(cfg.init_kl_coef, cfg.target_kl, cfg.kl_horizon)
                       if cfg.target_kl is not None else FixedKLController(cfg.init_kl_coef))
        self.buffer = ReplayBuffer(max_staleness(cfg), group_filter=group_filter(cfg))
        self.ledger = SampleLedger(self.output_dir / "samples.jsonl")
        self.switch = PhaseSwitch(self.roles.actor_train, self.roles.actor_infer,
                                  offloads_between_phases(cfg))

    # ---- the loop -------------------------------------------------------------------
    def make_generator(self) -> PrefetchGenerator:
        cfg = self.cfg
        source = ChunkSource(self.roles.actor_infer, self.chunks_for_batch,
                             score=lambda groups: submit_scoring(
                                 groups, self.roles.rewards, cfg.rewards, self.tokenizer,
                                 cfg.reward_aggregation),
                             segment_tokens=segment_tokens(cfg))
        if streams(cfg):  # one call per group, as many as the engine decodes at once
            capacity = self.roles.actor_infer.stream_capacity()
            source.stream = True
            source.per_worker = max(1, min(STREAM_CALLS,
                                           capacity // cfg.num_return_sequences_in_group))
        return PrefetchGenerator(
            actor_infer=self.roles.actor_infer, source=source, buffer=self.buffer,
            batch_size=cfg.rollout_batch_size,
            ratio=cfg.async_generation_ratio, on_generated=self.generated,
            first_batch=self.first_batch, first_seq=self.next_seq,
            started_groups=len(self.buffer), cpu_affinity=cfg.prefetch_cpu_affinity,
            stall_timeout_s=cfg.timeouts.generate_s, score_timeout_s=cfg.timeouts.score_s,
        )

    def generated(self, groups: list[Group]) -> None:
        """Chunks go out in seq order and a checkpoint pauses until every started one is
        finished, so at a save every group below `next_seq` is done (generator thread)."""
        self.next_seq = max([self.next_seq, *(g.seq + 1 for g in groups)])
        self.ledger.generated(groups)

    def run(self) -> None:
        cfg = self.cfg
        print(self.phase_switch_line(), flush=True)
        if self.step == 0:  # a resumed run synced in load_checkpoint
            self.sync_first_weights()
        if cfg.eval_steps and self.step == 0:  # the baseline every later evaluation is read against
            self.tracker.log(0, self.validate())
        self.switch.start_generation()  # colocated: actor_train leaves the devices
        generator = self.make_generator()
        generator.start()
        try:
            while self.step < cfg.max_steps and not self.stop_requested():
                step = self.step + 1
                try:
                    metrics = self.train_step(generator)
                except WorkerError as error:  # a diverged loss, a dead worker: name the step
                    raise error.at_step(step) from None
                self.tracker.log(self.step, metrics)
                if cfg.save_steps and self.step % cfg.save_steps == 0:
                    self.save_checkpoint(generator)
            if not (cfg.save_steps and self.step % cfg.save_steps == 0):
                self.save_checkpoint(generator)  # the end of a run is always resumable
        finally:
            generator.stop()
            self.ledger.close(self.step)
            with contextlib.suppress(Exception):  # never hide the error that got us here
                self.switch.write_events(self.output_dir / PHASE_EVENTS)

    def train_step(self, generator: PrefetchGenerator) -> dict[str, float]:
        cfg = self.cfg
        timer = StepTimer()
        started = time.time()
        self.switch.take_seconds()  # from here on, this step's
        with timer.phase("step"):
            with timer.phase("wait_for_batch"):
                taken = generator.take(self.step)  # 1. batch
            self.step += 1
            if self.step == cfg.max_steps:
                generator.no_more_batches()
            self.ledger.dropped(taken.stale, "stale", self.step)
            self.ledger.dropped(taken.filtered, "filtered", self.step)
            with self.training_phase(generator):  # colocated: the engine sleeps meanwhile
                metrics = self.train_on(taken.groups, timer)  # 2-4. log-probs, adv., train
                sync = self.step % cfg.model_update_frequency == 0
                if sync or self.switch.active:
                    with timer.phase("weight_sync"):  # 5. sync
                        self.sync_weights(generator, sync)
            generator.release(len(taken.groups))
            self.ledger.trained(taken.groups, self.step)
            if cfg.eval_steps and (self.step % cfg.eval_steps == 0 or self.step == cfg.max_steps):
                with timer.phase("validate"), generator.paused():  # 6. validate
                    metrics.update(self.validate())
        seconds = timer.seconds
        infer_busy = generator.busy_seconds(started, time.time())
        metrics.update(timer.metrics())
        if self.switch.active:  # this step's switches (a checkpoint's are not counted)
            metrics["time/phase_switch"] = self.switch.take_seconds()
        metrics.update(staleness_metrics(taken, self.step, generator.queue_depth()))
        metrics.update(self.reward_metrics(taken))
        if cfg.partial_rollout:
            metrics.update(partial_rollout_metrics(taken.groups, self.step))
        metrics.update({
            "time/generate": infer_busy / self.roles.actor_infer.world_size,
            "time/weight_load": (generator.load_seconds(started, time.time())
                                 / self.roles.actor_infer.world_size),
            "idle/actor_infer": 1 - infer_busy / (seconds["step"] *
                                                  self.roles.actor_infer.world_size),
            "idle/actor_train": 1 - (seconds["logprobs"] + seconds["train"]) / seconds["step"],
        })
        samples = sum(g.num_samples for g in taken.groups)
        tokens = sum(g.num_tokens for g in taken.groups)
        metrics["throughput/samples_per_s"] = samples / seconds["step"]
        metrics["throughput/tokens_per_s"] = tokens / seconds["step"]
        return metrics

    def train_on(self, groups: list[Group], timer: StepTimer) -> dict[str, float]:
        """Steps 2-4 of the module docstring on one batch of scored groups."""
        batch = self.pack(groups)
        metrics = rollout_metrics(batch)
        with timer.phase("logprobs"):
            metrics |= self.compute_logprobs(batch)  # 2. log-probs
        metrics |= self.add_advantages(batch)  # 3. advantages
        with timer.phase("train"):
            metrics |= self.update(batch)  # 4. train
        return metrics

    @contextlib.contextmanager
    def training_phase(self, generator: PrefetchGenerator):
        """Steps 2-5 of a colocated run: generation paused (nothing in flight), the engine
        asleep and actor_train back on the devices until `sync_weights` hands them over;
        otherwise nothing."""
        if not self.switch.active:
            yield
            return
        with generator.paused():
            self.switch.to_training()
            yield

    def sync_weights(self, generator: PrefetchGenerator, sync: bool) -> None:
        """5. sync (when `sync`: every model_update_frequency steps): the generator applies
        the weights before its next chunk. Colocated, the engine wakes for them first and
        they are applied here, before actor_train's parameters leave the devices."""
        weights = None
        if sync:
            self.version = self.step
            weights = self.keep_synced(self.weights())
        if not self.switch.active:
            if weights is not None:
                generator.publish_weights(weights, self.version)
            return
        self.switch.before_sync()
        if weights is not None:
            self.roles.actor_infer.gather(self.roles.actor_infer.update_weights(
                weights, self.version))
        self.switch.after_sync()

    def phase_switch_line(self) -> str:
        cfg = self.cfg
        shared = shared_actor_devices(cfg)
        if self.switch.active:
            reason = "they take turns, each freeing its device memory for the other"
        elif cfg.offload_between_phases is False:
            reason = "offload_between_phases: false keeps both resident"
        elif shared:
            reason = "async_generation_ratio > 0"
        else:
            reason = "nothing to hand over"
        return describe(self.switch.active, shared, reason)

    def compute_logprobs(self, batch: TokenBatch) -> dict[str, float]:
        """Reference log-probs and critic values, on their own devices at once; the old
        log-probs too when the KL reward penalty needs them here (otherwise actor_train
        computes them inside its train call: one trip of the batch, not two)."""
        roles = self.roles
        old = None if self.old_in_train else roles.actor_train.forward_logprobs(batch)
        ref = roles.reference.forward_logprobs(batch) if roles.reference else None
        values = roles.critic.forward_values(batch) if roles.critic else None
        batch.ref_log_probs = ref.result() if ref else None
        batch.values = values.result() if values else None
        if old is None:
            return {}
        batch.old_log_probs = old.result()
        batch.is_weights, metrics = self.correction(batch.old_log_probs, batch.infer_log_probs,
                                                    batch.response_mask)
        return metrics

    def update(self, batch: TokenBatch) -> dict[str, float]:
        """actor_train's (and the critic's, beside it) train step; the new weights are
        asked for right behind it when a sync follows this step."""
        cfg, roles = self.cfg, self.roles
        critic = (roles.critic.train(batch, CriticLoss(cfg.value_clip), cfg.ppo_epochs)
                  if roles.critic else None)
        actor = roles.actor_train.train(batch, self.loss_fn, cfg.ppo_epochs,
                                        self.correction if self.old_in_train else None)
        if self.step % cfg.model_update_frequency == 0:  # a sync follows this step:
            # queue it on the same actors now, so it runs with no round trip between
            self.weights_ahead = roles.actor_train.weights()
        results = actor.result() + (critic.result() if critic else [])
        metrics = mean_over_ranks(results)
        metrics["loss/policy"] = metrics.get("pg/loss", float("nan"))
        if "kl/mean" in metrics:
            self.kl_ctl.update(metrics["kl/mean"], n_steps=len(batch))
        return metrics

    # ---- what the agentic pipeline (a subclass) replaces ------------------------------
    def pack(self, groups: list[Group]) -> TokenBatch:
        return pack_groups(groups, self.tokenizer.pad_token_id)

    def add_advantages(self, batch: TokenBatch) -> dict[str, float]:
        return add_advantages(batch, self.cfg, self.cfg.num_return_sequences_in_group,
                              self.kl_ctl.value)

    def reward_metrics(self, taken: Taken) -> dict[str, float]:
        return (reward_info_metrics(taken) | domain_reward_metrics(taken.groups)
                | uniform_group_metrics(taken.groups))

    def group_state(self, group: Group) -> dict:
        return group_to_dict(group)

    def group_from_state(self, state: dict) -> Group:
        return group_from_dict(state)

    def sync_first_weights(self) -> None:
        """actor_infer generates from actor_train's weights from the first batch on, whatever
        it loaded itself (`load_format: dummy`, another model path, another dtype)."""
        self.roles.actor_infer.gather(self.roles.actor_infer.update_weights(
            self.keep_synced(self.weights()), self.version))

    def keep_synced(self, weights: SyncedWeights) -> SyncedWeights:
        """`weights`, now actor_infer's, kept for a checkpoint when they may lag."""
        self.synced_weights = weights if self.cfg.model_update_frequency > 1 else None
        return weights

    def weights(self) -> SyncedWeights:
        pending, self.weights_ahead = self.weights_ahead, None
        return (pending or self.roles.actor_train.weights()).result()

    def chunks_for_batch(self, batch_index: int) -> list[Chunk]:
        """The prompts of batch `batch_index`, cut into generation chunks (generator thread)."""
        cfg = self.cfg
        records = self.order.batch(batch_index, cfg.rollout_batch_size)
        sampling = sampling_params(cfg.actor_infer.generating_args,
                                   cfg.num_return_sequences_in_group, seed=0,
                                   expand=cfg.is_num_return_sequences_expand)
        size = chunk_size(cfg.rollout_batch_size, self.roles.actor_infer.world_size,
                          cfg.actor_infer.infer_batch_size, strategy_spec(
                              cfg.actor_infer.strategy_args.strategy_name).continuous_batching,
                          streams(cfg))
        return batch_chunks(batch_index, records, self.encode(records), sampling, size,
                            cfg.seed)

    def validate(self) -> dict[str, float]:
        cfg = self.cfg
        records = self.val_records[: cfg.val_batch_size or None]
        gen_args = (cfg.validation.generating_args if cfg.validation
                    else cfg.actor_infer.generating_args)
        sampling = sampling_params(gen_args, 1, seed=cfg.seed)
        size = max(1, cfg.actor_infer.infer_batch_size)
        chunks = batch_chunks(0, records, self.encode(records), sampling, size, cfg.seed)
        # paused (the caller): every update sent has loaded, so no version to wait for
        groups = generate_chunks(self.roles.actor_infer, chunks, stream=streams(cfg))
        submit_scoring(groups, self.roles.rewards, cfg.rewards, self.tokenizer,
                       cfg.reward_aggregation).finish()
        scores = [s for g in groups for s in g.scores]
        lengths = [len(r.token_ids) for g in groups for r in g.responses]
        return {"val/accuracy": sum(scores) / len(scores),
                "val/response_length": sum(lengths) / len(lengths),
                **domain_val_metrics(groups)}

    def encode(self, records: list[PromptRecord]) -> list[list[int]]:
        return [self.encoder(r.prompt) for r in records]

    # ---- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self, generator: PrefetchGenerator) -> None:
        """Pause generation so the checkpoint holds every finished group: a resumed run
        continues with exactly the batches the uninterrupted one would have trained."""
        with (generator.paused(), self.switch.training(),
              writing_checkpoint(self.output_dir, self.step) as tmp):
            self.roles.actor_train.save(str(tmp / "actor_train"))
            if self.roles.critic is not None:
                self.roles.critic.save(str(tmp / "critic"))
            if self.version != self.step:  # actor_infer's weights lag (model_update_frequency)
                self.roles.actor_train.save_synced_weights(self.synced_weights,
                                                           str(tmp / SYNCED_WEIGHTS))
            state = {"step": self.step, "version": self.version,
                     "next_batch": generator.next_batch, "next_seq": self.next_seq,
                     "kl_coef": self.kl_ctl.value,
                     "buffer": [self.group_state(g) for g in self.buffer.snapshot()],
                     "saved_at": time.time()}
            (tmp / "pipeline_state.json").write_text(json.dumps(state))
        prune_checkpoints(self.output_dir, self.cfg.save_total_limit)

    def load_checkpoint(self, path: Path) -> None:
        state = json.loads((path / "pipeline_state.json").read_text())
        self.roles.actor_train.load(str(path / "actor_train"))
        if self.roles.critic is not None:
            self.roles.critic.load(str(path / "critic"))
        self.step = state["step"]
        self.version = state.get("version", self.step)
        self.first_batch = state["next_batch"]
        self.next_seq = state.get("next_seq", 0)
        self.kl_ctl.value = state["kl_coef"]
        restored = [self.group_from_state(d) for d in state["buffer"]]
        self.buffer.put(restored)
        self.ledger.generated(restored)
        # actor_infer restarts from the weights it held at the save: actor_train's, or the
        # earlier ones a checkpoint between two syncs kept
        synced = path / SYNCED_WEIGHTS
        weights = (self.roles.actor_train.synced_weights(str(synced)) if synced.exists()
                   else self.weights())
        self.roles.actor_infer.gather(self.roles.actor_infer.update_weights(
            self.keep_synced(weights), self.version))
