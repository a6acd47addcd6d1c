"""The agentic rollout: multi-turn episodes in text environments.

The step loop (loop/step_loop.py) is RLVR's, on the same roles, prefetch generator, replay
buffer, ledger, staleness bound, checkpoints and metrics; what a step is made of differs:
  1. batch        take rollout_batch_size / group_size episode groups from the prefetch
                  generator (env workers played them, asking actor_infer for every turn,
                  ahead by async_generation_ratio)
  2. log-probs    old log-probs of every trajectory (model tokens only count), reference
  3. advantages   GRPO over the episodes of a group (or per-turn discounted returns);
                  with teachers, their per-token term (on-policy distillation: the
                  teachers score the packed trajectories, distill/episode_teachers.py)
  4. train        actor_train.train_step with the configured pg_variant loss
  5. sync         publish the new weights to actor_infer
  6. log / validate on fixed held-out env seeds (generation paused) / checkpoint

The generator's source runs env jobs instead of prompt chunks; packing makes trajectories
(or per-turn samples) instead of prompt + response rows. Episodes in flight when weights
change are continued; see agentic/env_jobs.py for why and how it is recorded.

Metrics beyond RLVR's (`reward/*` is the episode return, `response/length_*` the model
tokens of a whole episode):
| env/success, env/<tag>/success          | fraction of episodes won (info "success")     |
| env/episode_reward, env/<tag>/...       | mean episode return                           |
| env/episode_length                      | mean turns per episode                        |
| env/action_is_valid                     | fraction of turns whose action parsed         |
| env/truncated, env/failed               | stopped by max_steps; env raised or hung      |
| env/observation_cut                     | observations cut to max_observation_chars     |
| env/context_truncated                   | episodes stopped at the run's sequence_length |
| env/tool_output_cut                     | tool results cut to max_tool_output_chars     |
| val/env/...                             | the same on the validation envs               |
| rollout/dropped_env_error               | episodes dropped this step (whole groups)     |
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flywheel.algorithms.estimators import estimator_spec
from flywheel.config.schema import PipelineConfig, ValidationGeneratingArgs
from flywheel.pipelines.agentic.batch import (
    agentic_advantages,
    data_parallel_rows,
    env_metrics,
    fit_rows,
    pack_steps,
    pack_trajectories,
    rows_per_optimizer_step,
)
from flywheel.pipelines.agentic.env_jobs import (
    EnvSource,
    EpisodeGroup,
    FailureStreak,
    episode_group_from_dict,
    episode_group_to_dict,
    episode_groups,
    run_jobs,
    start_env_workers,
    val_jobs,
)
from flywheel.pipelines.distill.episode_teachers import score_episodes
from flywheel.pipelines.distill.teachers import check_teacher_tokenizers
from flywheel.pipelines.loop.seams import Taken
from flywheel.pipelines.roles.handles import EnvRole
from flywheel.pipelines.roles.roles import Roles
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import load_tokenizer


def no_data(cfg: PipelineConfig, tokenizer) -> None:
    """Envs make their own observations: nothing to load before Ray starts (a teacher's
    tokenizer is checked against the student's here, for on-policy distillation)."""
    check_teacher_tokenizers(cfg, tokenizer, load_tokenizer)
    return None


def start_agentic(cfg: PipelineConfig, roles: Roles, tokenizer, data: None, model_path: str,
                  log_dir: Path | None) -> AgenticRollout:
    """Starts the env workers, which are shut down with the roles."""
    env_workers = start_env_workers(cfg, model_path, roles.actor_infer, log_dir)
    roles.all.append(env_workers)
    return AgenticRollout(cfg, roles, tokenizer, env_workers)


@dataclass
class AgenticRollout:
    cfg: PipelineConfig
    roles: Roles
    tokenizer: object
    env_workers: EnvRole  # started by launch (agentic_rollout.start_env_workers)
    drop_reasons: tuple[str, ...] = ("env_error",)  # an env raised or hung: whole groups

    @property
    def group_size(self) -> int:
        return self.cfg.train_env_manager.group_size

    @property
    def batch_groups(self) -> int:
        return self.cfg.rollout_batch_size // self.group_size

    def source(self) -> EnvSource:
        return EnvSource(self.env_workers, self.cfg, self.roles.actor_infer.world_size)

    def pack(self, groups: list[EpisodeGroup]) -> TokenBatch:
        cfg = self.cfg
        if cfg.step_level_samples:
            step_credit = estimator_spec(cfg.adv_estimator).per_turn
            return pack_steps(groups, self.tokenizer.pad_token_id, cfg.gamma,
                              cfg.turn_level_returns or step_credit,
                              self._data_parallel_rows(),
                              episode_gamma=1.0 if cfg.adv_estimator == "gigpo" else None)
        batch = pack_trajectories(groups, self.tokenizer.pad_token_id, cfg.gamma)
        if self.roles.teachers:  # on-policy distillation over the episodes
            score_episodes(batch, self.roles.teachers)
        return batch

    def add_advantages(self, batch: TokenBatch, kl_coef: float) -> dict[str, float]:
        """Advantages over every episode played, then the rows fitted to whole optimizer
        steps (batch_adjust_mode), seeded by the run's seed and the batch's versions."""
        metrics = agentic_advantages(batch, self.cfg, self.group_size, kl_coef)
        seed = self.cfg.seed * 1_000_003 + int(batch.version.sum()) + len(batch)
        return metrics | fit_rows(batch, self.cfg.batch_adjust_mode,
                                  self._rows_per_optimizer_step(), seed)

    def _rows_per_optimizer_step(self) -> int:
        return rows_per_optimizer_step(self.cfg, self.roles)

    def step_metrics(self, taken: Taken[EpisodeGroup], step: int) -> dict[str, float]:
        return env_metrics(taken.groups, "env/")  # envs score episodes: no reward/*

    def validate(self) -> dict[str, float]:
        """Greedy (unless validation.generating_args says otherwise) on fixed seeds."""
        cfg = self.cfg
        gen_args = (cfg.validation.generating_args if cfg.validation
                    else ValidationGeneratingArgs())
        jobs = val_jobs(cfg, gen_args, self.roles.actor_infer.world_size)
        groups: list[EpisodeGroup] = []
        streak = FailureStreak("val_env_manager",
                               cfg.val_env_manager.max_consecutive_env_failures)
        for job, result in run_jobs(self.env_workers, jobs):
            kept, failed = episode_groups(job, result)
            streak.saw(kept, failed)
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
        return data_parallel_rows(self.roles)
