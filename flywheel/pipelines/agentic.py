"""Agentic: multi-turn episodes in text environments, trained with a policy-gradient loss.

The same step as RLVR (rlvr.py), on the same roles, prefetch generator, replay buffer,
ledger, staleness bound, checkpoints and metrics; only what a step is made of differs:
  1. batch        take rollout_batch_size / group_size episode groups from the prefetch
                  generator (env workers played them, asking actor_infer for every turn,
                  ahead by async_generation_ratio)
  2. log-probs    old log-probs of every trajectory (model tokens only count), reference
  3. advantages   GRPO over the episodes of a group (or per-turn discounted returns)
  4. train        actor_train.train_step with the configured pg_variant loss
  5. sync         publish the new weights to actor_infer
  6. log / validate on fixed held-out env seeds (generation paused) / checkpoint

So this class is RLVRPipeline with its rollout-specific parts replaced: the generator's
source (env jobs instead of prompt chunks), packing (trajectories instead of prompt +
response), advantages, validation and the buffer's checkpoint format. Episodes in flight
when weights change are continued; see agentic_rollout.py for why and how it is recorded.

Metrics beyond RLVR's (`reward/*` is the episode return, `response/length_*` the model
tokens of a whole episode):
| env/success, env/<tag>/success          | fraction of episodes won (info "success")     |
| env/episode_reward, env/<tag>/...       | mean episode return                           |
| env/episode_length                      | mean turns per episode                        |
| env/action_is_valid                     | fraction of turns whose action parsed         |
| env/truncated, env/failed               | stopped by max_steps; env raised or hung      |
| val/env/...                             | the same on the validation envs               |
| rollout/dropped_env_error               | episodes dropped this step (whole groups)     |
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.pipelines.agentic_batch import (
    agentic_advantages,
    env_metrics,
    pack_steps,
    pack_trajectories,
)
from flywheel.pipelines.agentic_rollout import (
    EnvSource,
    EpisodeGroup,
    episode_group_from_dict,
    episode_group_to_dict,
    episode_groups,
    run_jobs,
    val_jobs,
)
from flywheel.pipelines.prefetch import PrefetchGenerator
from flywheel.pipelines.replay_buffer import Taken
from flywheel.pipelines.rlvr import RLVRPipeline
from flywheel.pipelines.roles import Roles
from flywheel.platform.cluster import Cluster
from flywheel.platform.config.schema import PipelineConfig, ValidationGeneratingArgs
from flywheel.platform.timing import StepTimer
from flywheel.platform.tracking import Tracker
from flywheel.workers.batch import TokenBatch


@dataclass
class AgenticPipeline(RLVRPipeline):
    env_workers: Cluster | None = None  # started by launch (agentic_rollout.start_env_workers)
    _dropped: dict[str, int] = field(default_factory=dict)  # reason -> episodes, this step
    _dropped_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def create(cls, cfg: PipelineConfig, roles: Roles, tokenizer: object, tracker: Tracker,
               output_dir: Path, env_workers: Cluster) -> AgenticPipeline:
        return cls(cfg, roles, tokenizer, train_records=[], val_records=[], tracker=tracker,
                   output_dir=output_dir, env_workers=env_workers)

    @property
    def group_size(self) -> int:
        return self.cfg.train_env_manager.group_size

    def make_generator(self) -> PrefetchGenerator:
        cfg = self.cfg
        source = EnvSource(self.env_workers, cfg, self.roles.actor_infer.world_size)
        return PrefetchGenerator(
            actor_infer=self.roles.actor_infer, source=source, buffer=self.buffer,
            batch_size=cfg.rollout_batch_size // self.group_size,
            ratio=cfg.async_generation_ratio, on_generated=self.generated,
            on_dropped=self.on_dropped, first_batch=self.first_batch, first_seq=self.next_seq,
            started_groups=len(self.buffer), cpu_affinity=cfg.prefetch_cpu_affinity,
            stall_timeout_s=cfg.timeouts.generate_s,
        )

    def on_dropped(self, groups: list[EpisodeGroup], reason: str) -> None:
        """Groups the generator thread dropped as they arrived (failed envs)."""
        self.ledger.dropped(groups, reason, self.step + 1)
        with self._dropped_lock:
            self._dropped[reason] = self._dropped.get(reason, 0) + sum(
                g.num_samples for g in groups)

    def train_step(self, generator: PrefetchGenerator) -> dict[str, float]:
        metrics = super().train_step(generator)
        with self._dropped_lock:
            metrics["rollout/dropped_env_error"] = float(self._dropped.pop("env_error", 0))
        return metrics

    def train_on(self, groups: list[EpisodeGroup], timer: StepTimer) -> dict[str, float]:
        metrics = super().train_on(groups, timer)
        metrics.update(env_metrics(groups, "env/"))
        return metrics

    # ---- RLVRPipeline's rollout-specific parts --------------------------------------
    def pack(self, groups: list[EpisodeGroup]) -> TokenBatch:
        cfg = self.cfg
        if cfg.step_level_samples:
            return pack_steps(groups, self.tokenizer.pad_token_id, cfg.gamma,
                              cfg.turn_level_returns, self._data_parallel_rows())
        return pack_trajectories(groups, self.tokenizer.pad_token_id, cfg.gamma)

    def reward_metrics(self, taken: Taken) -> dict[str, float]:
        return {}  # envs score episodes; their metrics are env/*

    def add_advantages(self, batch: TokenBatch) -> dict[str, float]:
        return agentic_advantages(batch, self.cfg, self.group_size, self.kl_ctl.value)

    def validate(self) -> dict[str, float]:
        """Greedy (unless validation.generating_args says otherwise) on fixed seeds."""
        cfg = self.cfg
        gen_args = (cfg.validation.generating_args if cfg.validation
                    else ValidationGeneratingArgs())
        jobs = val_jobs(cfg, gen_args, self.roles.actor_infer.world_size)
        groups: list[EpisodeGroup] = []
        for job, result in run_jobs(self.env_workers, jobs):
            kept, failed = episode_groups(job, result)
            groups += kept + failed  # failed envs count as unsuccessful episodes here
        metrics = env_metrics(groups, "val/env/")
        lengths = [sum(t.response_mask) for g in groups for t in g.trajectories]
        metrics["val/response_length"] = sum(lengths) / len(lengths)
        return metrics

    def group_state(self, group: EpisodeGroup) -> dict:
        return episode_group_to_dict(group)

    def group_from_state(self, state: dict) -> EpisodeGroup:
        return episode_group_from_dict(state)

    def _data_parallel_rows(self) -> int:
        """Rows must split evenly over every role a batch is sharded to."""
        roles = (self.roles.actor_train, self.roles.reference, self.roles.critic)
        return math.lcm(*(r.world_size for r in roles if r is not None))
