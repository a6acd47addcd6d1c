"""The RL step loop: written once, holding a rollout (RLVR or agentic, loop/seams.py).

One training step, in order:
  1. batch        take a batch of scored groups from the prefetch generator (the
                  rollout's source generated and scored them, ahead by
                  async_generation_ratio: loop/async_window.py)
  2. log-probs    reference log-probs (and critic values); the old log-probs (pre-update
                  policy) too when the KL reward penalty needs them here
  3. advantages   the rollout's (GRPO / reinforce / per-turn returns; + KL penalty,
                  whitening, clipping)
  4. train        actor_train's train step with the kind's loss (config/kinds.py; RLVR and
                  agentic: the configured pg_variant loss) (and the
                  critic's beside it); it computes the old log-probs and the train/infer
                  mismatch first when step 2 did not
  5. sync         publish the new weights to actor_infer (every model_update_frequency);
                  the weights are asked for right behind the train call (policy_sync.py)
  6. log / validate (generation paused) / checkpoint; with ratio > 0 validation runs
                  beside the next step's training, and that step's sync waits for it
                  (loop/overlapped_validation.py)

Steps are 1-based in logs; a policy version is the number of train steps its weights
include, so a sample's staleness at (1-based) step s is (s − 1) − version: 0 for the
synchronous pipeline, at most ceil(r) + model_update_frequency − 1 with ratio r. With
partial rollout a response's later tokens may come from newer versions; its staleness is
still that of its first token (the bound), and `staleness/token_mean` averages per token.

What the loop does not know: what a group is, where work comes from, how groups become
rows, advantages and validation. That is the rollout's (pipelines/rlvr/rollout.py,
pipelines/agentic/rollout.py).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic

from flywheel.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    MismatchCorrection,
    TrainInferFilter,
)
from flywheel.config.derived import (
    infer_is_correction,
    offloads_between_phases,
    shared_actor_devices,
)
from flywheel.config.kinds import kind_of
from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.loop.async_window import AsyncWindow
from flywheel.pipelines.loop.group_filter import group_filter
from flywheel.pipelines.loop.layout_hint import LAST, idle_split_hint
from flywheel.pipelines.loop.overlapped_validation import OverlappedValidation
from flywheel.pipelines.loop.phase_switch import PhaseSwitch, describe
from flywheel.pipelines.loop.policy_sync import PolicySync
from flywheel.pipelines.loop.prefetch import PrefetchGenerator, PrefetchSettings
from flywheel.pipelines.loop.replay_buffer import ReplayBuffer
from flywheel.pipelines.loop.rollout_mock import Recorded, ReplayedSource, RolloutDump
from flywheel.pipelines.loop.sample_ledger import SampleLedger
from flywheel.pipelines.loop.seams import G, Rollout, W
from flywheel.pipelines.loop.step_metrics import rollout_metrics, staleness_metrics
from flywheel.pipelines.roles.roles import Roles
from flywheel.pipelines.run.metric_views import PANELS
from flywheel.platform.checkpoint import PIPELINE_STATE, prune_checkpoints, writing_checkpoint
from flywheel.platform.checkpoint_state import read_pipeline_state
from flywheel.platform.cluster import WorkerError
from flywheel.platform.config.catalogs import import_object
from flywheel.platform.timing import StepTimer
from flywheel.platform.tracking import Tracker
from flywheel.workers.batch import TokenBatch
from flywheel.workers.critic_loss import CriticLoss
from flywheel.workers.strategies.train_loop import Objective

PHASE_EVENTS = "phase_events.jsonl"  # a colocated run's phase switches (loop/phase_switch.py)
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
    rule = None
    if cfg.infer_filter_level != "none":
        bands = (cfg.infer_filter_ratio_band, cfg.infer_filter_diff_band)
        rule = TrainInferFilter(cfg.infer_filter_level,
                                *(tuple(b) if b is not None else None for b in bands))
    return MismatchCorrection(level, mode, cfg.infer_is_lower_bound, cfg.infer_is_upper_bound,
                              apply=chosen != "none" or rule is not None,
                              weigh=chosen != "none", filter=rule)


@dataclass
class StepLoop(Generic[W, G]):
    cfg: PipelineConfig
    roles: Roles
    rollout: Rollout[W, G]
    tracker: Tracker
    output_dir: Path
    step: int = 0  # train steps completed
    # Asked after every step; true: checkpoint and return early (launch: SIGINT/SIGTERM).
    stop_requested: Callable[[], bool] = lambda: False
    # rollout_mock mode mock: the dump whose groups replace generation (rollout_mock.py)
    recorded: Recorded | None = None
    # -- built from cfg ------------------------------------------------------------------
    window: AsyncWindow = field(init=False)
    kl_ctl: FixedKLController | AdaptiveKLController = field(init=False)
    loss_fn: Objective = field(init=False)  # the kind's loss (config/kinds.py `loss`)
    correction: MismatchCorrection = field(init=False)  # infer_is_correction
    old_in_train: bool = field(init=False)  # actor_train computes the old log-probs itself
    switch: PhaseSwitch = field(init=False)  # colocated roles take turns (loop/phase_switch.py)
    policy: PolicySync = field(init=False)  # step 5
    dump: RolloutDump[G] | None = field(init=False)  # rollout_mock mode dump
    # -- what a checkpoint keeps ---------------------------------------------------------
    buffer: ReplayBuffer[G] = field(init=False)
    ledger: SampleLedger = field(init=False)
    first_batch: int = 0  # batch index the generator starts from (moves on resume)
    # Every group below this seq has been generated (trained, dropped, or in the buffer):
    # a resumed run starts its first batch's items here, so none is generated twice.
    next_seq: int = 0
    # -- this step's groups dropped by the source as they arrived (generator thread) ----
    _dropped: dict[str, int] = field(default_factory=dict)  # reason -> samples
    _dropped_lock: threading.Lock = field(default_factory=threading.Lock)
    _layout_rows: dict[int, dict[str, float]] = field(default_factory=dict)  # layout_hint
    # the validation running beside training (ratio > 0), its step's row held until it ends
    validation: OverlappedValidation | None = None

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.window = AsyncWindow(cfg.async_generation_ratio, self.rollout.batch_groups,
                                  cfg.model_update_frequency)
        self.loss_fn = import_object(kind_of(cfg).loss)(cfg)
        self.correction = mismatch_correction(cfg)
        # Only the KL reward penalty needs the old log-probs before the train call.
        self.old_in_train = cfg.init_kl_coef == 0
        self.kl_ctl = (AdaptiveKLController(cfg.init_kl_coef, cfg.target_kl, cfg.kl_horizon)
                       if cfg.target_kl is not None else FixedKLController(cfg.init_kl_coef))
        self.buffer = ReplayBuffer(self.window.max_staleness, group_filter=group_filter(cfg),
                                   batch_groups=self.rollout.batch_groups)
        self.ledger = SampleLedger(self.output_dir / "samples.jsonl")
        self.switch = PhaseSwitch(self.roles.actor_train, self.roles.actor_infer,
                                  offloads_between_phases(cfg))
        self.policy = PolicySync(self.roles, self.switch, cfg.model_update_frequency)
        mock = cfg.rollout_mock
        self.dump = (RolloutDump(Path(mock.dump_dir), self.rollout.group_state)
                     if mock is not None and mock.mode == "dump" else None)

    @property
    def version(self) -> int:
        """Train steps included in actor_infer's weights."""
        return self.policy.version

    # ---- the loop -------------------------------------------------------------------
    def make_generator(self) -> PrefetchGenerator[W, G]:
        cfg = self.cfg
        settings = PrefetchSettings(
            self.window, stall_timeout_s=cfg.timeouts.generate_s,
            score_timeout_s=cfg.timeouts.score_s, cpu_affinity=cfg.prefetch_cpu_affinity,
            first_batch=self.first_batch, first_seq=self.next_seq,
            started_groups=len(self.buffer))
        source = self.rollout.source()
        if self.recorded is not None:  # rollout_mock: groups from the dump, nothing generated
            source = ReplayedSource(source, self.recorded, self.rollout.group_from_state,
                                    cfg.rollout_mock.dump_dir)
        return PrefetchGenerator(self.roles.actor_infer, source, self.buffer,
                                 settings, on_generated=self.generated,
                                 on_dropped=self.on_dropped)

    def generated(self, groups: list[G]) -> None:
        """Items go out in seq order and a checkpoint pauses until every started one is
        finished, so at a save every group below `next_seq` is done (generator thread)."""
        self.next_seq = max([self.next_seq, *(g.seq + 1 for g in groups)])
        self.ledger.generated(groups)

    def on_dropped(self, groups: list[G], reason: str) -> None:
        """Groups the source dropped as they arrived (failed envs; generator thread)."""
        self.ledger.dropped(groups, reason, self.step + 1)
        if self.dump is not None:
            self.dump.source_dropped(groups, reason)
        with self._dropped_lock:
            self._dropped[reason] = self._dropped.get(reason, 0) + sum(
                g.num_samples for g in groups)

    def run(self) -> None:
        cfg = self.cfg
        print(self.phase_switch_line(), flush=True)
        if self.step == 0:  # a resumed run synced in load_checkpoint
            self.policy.first()
        if cfg.eval_steps and self.step == 0:  # the baseline every later evaluation is read against
            self.tracker.log(0, self.rollout.validate())
        self.switch.start_generation()  # colocated: actor_train leaves the devices
        self.roles.freeze_startup_heaps()
        generator = self.make_generator()
        generator.start()
        started = self.step
        try:
            while self.step < cfg.max_steps and not self.stop_requested():
                step = self.step + 1
                try:
                    metrics = self.train_step(generator)
                except WorkerError as error:  # a diverged loss, a dead worker: name the step
                    raise error.at_step(step) from None
                if metrics is None:  # asked to stop while waiting for a batch
                    break
                self.end_validation()  # still running (model_update_frequency > 1): rows in order
                if self.validates_after(self.step) and self.overlaps_validation():
                    self.validation = OverlappedValidation.start(
                        self.step, metrics, self.rollout.validate, generator)  # 6. validate
                else:
                    self.tracker.log(self.step, metrics)
                self.hint_layout(metrics)
                if cfg.save_steps and self.step % cfg.save_steps == 0:
                    self.save_checkpoint(generator)
            self.end_validation()
            # The end of a run is always resumable: a checkpoint of its last step, unless
            # it has one (save_steps, or no step trained since the start or the resume).
            if self.step > started and not (cfg.save_steps and self.step % cfg.save_steps == 0):
                self.save_checkpoint(generator)
        finally:
            generator.stop()
            self.ledger.close(self.step)
            with contextlib.suppress(Exception):  # never hide the error that got us here
                self.switch.write_events(self.output_dir / PHASE_EVENTS)

    def validates_after(self, step: int) -> bool:
        cfg = self.cfg
        return bool(cfg.eval_steps) and (step % cfg.eval_steps == 0 or step == cfg.max_steps)

    def overlaps_validation(self) -> bool:
        """Validation beside training (loop/overlapped_validation.py): there are batches to
        train meanwhile (ratio > 0), the devices are not taken in turns, a step follows."""
        cfg = self.cfg
        return (cfg.async_generation_ratio > 0 and not self.switch.active
                and self.step < cfg.max_steps)

    def end_validation(self) -> None:
        """Wait for the validation running beside training and log its step's row."""
        if self.validation is not None:
            run, self.validation = self.validation, None
            self.tracker.log(run.step, run.wait())

    def hint_layout(self, metrics: dict[str, float]) -> None:
        """Once, at step layout_hint.LAST: say whether the CPU split idles a role."""
        if self.step > LAST:
            return
        self._layout_rows[self.step] = metrics
        hint = idle_split_hint(self.cfg, self._layout_rows) if self.step == LAST else None
        if hint:
            print(hint, flush=True)

    def train_step(self, generator: PrefetchGenerator[W, G]) -> dict[str, float] | None:
        """One step's metrics; None when a stop was asked for before its batch was ready."""
        cfg = self.cfg
        timer = StepTimer()
        started = time.time()
        self.switch.take_seconds()  # from here on, this step's
        with timer.phase("step"):
            with timer.phase("wait_for_batch"):
                taken = generator.take(self.step, self.stop_requested)  # 1. batch
            if taken is None:
                return None
            self.step += 1
            if self.step == cfg.max_steps:
                generator.no_more_batches()
            if self.dump is not None:
                self.dump.write(self.step, taken)
            self.ledger.dropped(taken.stale, "stale", self.step)
            self.ledger.dropped(taken.filtered, "filtered", self.step)
            with self.training_phase(generator):  # colocated: the engine sleeps meanwhile
                metrics = self.train_on(taken.groups, timer)  # 2-4. log-probs, adv., train
                sync = self.policy.syncs_after(self.step)
                if sync and self.validation is not None:  # it must end on its version
                    with timer.phase("wait_for_validation"):
                        self.end_validation()
                if sync or self.switch.active:
                    with timer.phase("weight_sync"):  # 5. sync
                        self.policy.after_step(self.step, generator, sync)
            generator.release(len(taken.groups))
            self.ledger.trained(taken.groups, self.step)
            if self.validates_after(self.step) and not self.overlaps_validation():
                with timer.phase("validate"), generator.paused():  # 6. validate
                    metrics.update(self.rollout.validate())
        seconds = timer.seconds
        infer_busy = generator.busy_seconds(started, time.time())
        metrics.update(timer.metrics())
        if self.switch.active:  # this step's switches (a checkpoint's are not counted)
            metrics["time/phase_switch"] = self.switch.take_seconds()
        metrics.update(staleness_metrics(taken, self.step, generator.queue_depth()))
        metrics.update(self.rollout.step_metrics(taken, self.step))
        infer_workers = self.roles.actor_infer.world_size
        metrics.update({
            "time/generate": infer_busy / infer_workers,
            "time/weight_load": generator.load_seconds(started, time.time()) / infer_workers,
            "time/score": generator.score_seconds(started, time.time()),
            "idle/actor_infer": 1 - infer_busy / (seconds["step"] * infer_workers),
            "idle/actor_train": 1 - (seconds["logprobs"] + seconds["train"]) / seconds["step"],
        })
        samples = sum(g.num_samples for g in taken.groups)
        tokens = sum(g.num_tokens for g in taken.groups)
        metrics["throughput/samples_per_s"] = samples / seconds["step"]
        metrics["throughput/tokens_per_s"] = tokens / seconds["step"]
        with self._dropped_lock:
            for reason in self.rollout.drop_reasons:
                metrics[f"rollout/dropped_{reason}"] = float(self._dropped.pop(reason, 0))
        return metrics

    def train_on(self, groups: list[G], timer: StepTimer) -> dict[str, float]:
        """Steps 2-4 of the module docstring on one batch of scored groups."""
        batch = self.rollout.pack(groups)
        metrics = rollout_metrics(batch)
        with timer.phase("logprobs"):
            metrics |= self.compute_logprobs(batch)  # 2. log-probs
        metrics |= self.rollout.add_advantages(batch, self.kl_ctl.value)  # 3. advantages
        if "kl/penalty_mean" in metrics:  # the KL the penalty acted on (Ziegler et al. 2019)
            self.kl_ctl.update(metrics["kl/penalty_mean"], n_steps=len(batch))
        with timer.phase("train"):
            metrics |= self.update(batch)  # 4. train
        return metrics

    @contextlib.contextmanager
    def training_phase(self, generator: PrefetchGenerator[W, G]):
        """Steps 2-5 of a colocated run: generation paused (nothing in flight), the engine
        asleep and actor_train back on the devices until the sync hands them over;
        otherwise nothing."""
        if not self.switch.active:
            yield
            return
        with generator.paused():
            self.switch.to_training()
            yield

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
        ref = roles.reference_logprobs(batch)  # a LoRA run's: actor_train, adapter off
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
        if self.policy.syncs_after(self.step):  # queued on the same actors now,
            self.policy.ask_behind_train()  # so it runs with no round trip between
        results = actor.result() + (critic.result() if critic else [])
        metrics = mean_over_ranks(results)
        metrics["loss/policy"] = metrics.get("pg/loss", float("nan"))
        return metrics

    # ---- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self, generator: PrefetchGenerator[W, G]) -> None:
        """Pause generation so the checkpoint holds every finished group: a resumed run
        continues with exactly the batches the uninterrupted one would have trained."""
        self.end_validation()
        with (generator.paused(), self.switch.training(),
              writing_checkpoint(self.output_dir, self.step, plots=PANELS) as tmp):
            self.roles.actor_train.save(str(tmp / "actor_train"))
            if self.roles.critic is not None:
                self.roles.critic.save(str(tmp / "critic"))
            self.policy.save(tmp, self.step)
            state = {"step": self.step, "version": self.version,
                     "next_batch": generator.next_batch, "next_seq": self.next_seq,
                     "kl_coef": self.kl_ctl.value,
                     "schedule_steps": self.roles.schedule_steps,
                     "buffer": [self.rollout.group_state(g) for g in self.buffer.snapshot()],
                     "saved_at": time.time()}
            (tmp / PIPELINE_STATE).write_text(json.dumps(state))
        prune_checkpoints(self.output_dir, self.cfg.save_total_limit)

    def load_checkpoint(self, path: Path) -> None:
        state = read_pipeline_state(path)
        self.roles.actor_train.load(str(path / "actor_train"))
        if self.roles.critic is not None:
            self.roles.critic.load(str(path / "critic"))
        self.step = state["step"]
        self.first_batch = state["next_batch"]
        self.next_seq = state.get("next_seq", 0)
        self.kl_ctl.value = state["kl_coef"]
        restored = [self.rollout.group_from_state(d) for d in state["buffer"]]
        self.buffer.put(restored)
        self.ledger.generated(restored)
        self.policy.restore(path, state.get("version", self.step))
