"""The agent rollout: each episode is one run of the user's agent against the endpoint.

The step loop (loop/step_loop.py) is the one RLVR and agentic use, with its prefetch
generator, replay buffer, ledger, staleness bound, validation pause and checkpoints; what
differs is the rollout:
  1. batch        rollout_batch_size / agent.group_size tasks, each played group_size
                  times by agent workers (worker.py), which serve the endpoint and ask
                  actor_infer for every call (ahead by async_generation_ratio)
  2. rows         agent.rows episode: the calls that continue each other packed into one
                  row (rows.py; an episode without rewrites is one row), the ids the
                  engine saw and produced (token_ledger.py), the loss on the sampled ids
                  only, with their behaviour log-probs; agent.rows call: one row per call
                  choice. A row's version is its oldest call's
  3. advantages   GRPO (or reinforce) over the episodes of a task; every row of an
                  episode gets its episode's advantage (the reward is the episode's), plus
                  the reward-to-go of the KL penalty on its own tokens, as RLVR's;
                  step_reinforce (agent.rows: call): each call its discounted return,
                  normalised over the task's calls
  4. train / sync / log / validate / checkpoint: the loop's

Rewards: the agent's own (agent.reward: agent), or under agent.reward: rewards the
`rewards:` block's score of each episode's final answer, sent to the reward workers as
each job comes back (AgentSource.complete; answers.py: RLVR's scoring path), so scoring
overlaps generation as RLVR's does; validation's answers are scored the same way.

A group's version is the oldest version that sampled any of its calls, so the staleness
bound holds per call. A group with a failed episode is dropped whole and counted
(rollout/dropped_agent_<failure>; agent/errors, agent/timeouts, ... per step).
A checkpoint pauses generation until the episodes in flight have returned, so they are in
it; a kill loses them, and the resumed run plays their job again (same tasks and seeds),
never training a group twice (the loop's ledger; tests/pipelines/test_agent_resume.py).

Metrics: agent/reward (mean episode reward), agent/calls (per episode), agent/rows,
agent/row_tokens (ids of an episode's rows: what the trainer reads),
agent/history_rewrites, agent/malformed_calls, agent/refused (requests refused, per
episode), agent/prompt_tokens, agent/completion_tokens (per episode), and the failure
counts agent/errors, agent/timeouts, agent/no_call, agent/bad_reward, agent/over_budget,
agent/engine_errors (episodes since the last step); under agent.reward: rewards also
RLVR's reward/* (what the rewards said: parse rate, timeouts, function errors).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import ray
import torch

from flywheel.algorithms import advantage_clip, whiten_advantages
from flywheel.algorithms.estimators import estimator_spec, sample_estimator
from flywheel.algorithms.kl import apply_kl_penalty
from flywheel.config.derived import context_length
from flywheel.config.kinds import scores_with_rewards
from flywheel.config.schema import PipelineConfig, ValidationGeneratingArgs
from flywheel.pipelines.agent.answers import AnswerScoring, check_task_routes, score_answers
from flywheel.pipelines.agent.episodes import FAILURES
from flywheel.pipelines.agent.jobs import (
    AgentGroup,
    AgentJob,
    agent_group_from_dict,
    agent_group_to_dict,
)
from flywheel.pipelines.agent.rows import ROWS
from flywheel.pipelines.agent.worker import AGENT_ROLE, AgentRole, AgentWorker
from flywheel.pipelines.agentic.batch import (
    agentic_advantages,
    data_parallel_rows,
    fit_rows,
    rows_per_optimizer_step,
)
from flywheel.pipelines.data.data_files import DataFileError, OversizeRow, read_rows
from flywheel.pipelines.data.prompt_data import PromptOrder
from flywheel.pipelines.loop.seams import Completion, Scored, Taken
from flywheel.pipelines.rlvr.generation import sampling_params
from flywheel.pipelines.rlvr.metrics import reward_info_metrics
from flywheel.pipelines.rlvr.reward_health import RewardHealth
from flywheel.pipelines.roles.roles import Roles, streams
from flywheel.platform.resources import RoleDevices
from flywheel.workers.batch import TokenBatch, pack_sequences

FAILURE_METRICS = {"error": "errors", "timeout": "timeouts", "no_call": "no_call",
                   "bad_reward": "bad_reward", "over_budget": "over_budget",
                   "engine": "engine_errors"}
VAL_SEED = 2**31 - 1  # validation's job seeds, apart from every batch's
MAX_TASK_BYTES = 1 << 20  # a task is a small JSON object; a longer line is refused unread


@dataclass
class AgentTasks:
    train: list[dict]
    val: list[dict]


def read_tasks(path: str, key: str) -> list[dict]:
    """A .jsonl (or parquet) file of task objects (data_files.read_rows); ValueError naming
    the key, the line and what is wrong."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{key}: no file {path}")
    tasks = []
    try:
        for where, row in read_rows(file, MAX_TASK_BYTES):
            if isinstance(row, OversizeRow):
                raise ValueError(f"{key}: {where}: a task over {MAX_TASK_BYTES} bytes")
            tasks.append(row)
    except DataFileError as error:
        raise ValueError(f"{key}: {error}") from None
    if not tasks:
        raise ValueError(f"{key}: {path} holds no task")
    return tasks


def load_tasks(cfg: PipelineConfig, tokenizer) -> AgentTasks:
    """Before Ray starts: the tasks, read and checked (under agent.reward: rewards, each
    task's tag taken by some reward)."""
    agent = cfg.agent
    tasks = AgentTasks(read_tasks(agent.tasks, "agent.tasks"),
                       read_tasks(agent.val_tasks, "agent.val_tasks") if agent.val_tasks
                       else [])
    if scores_with_rewards(cfg):
        check_task_routes(tasks.train, cfg, "agent.tasks")
        check_task_routes(tasks.val, cfg, "agent.val_tasks")
    return tasks


def start_agent(cfg: PipelineConfig, roles: Roles, tokenizer, tasks: AgentTasks,
                model_path: str, log_dir: Path | None) -> AgentRollout:
    """Starts the agent workers, which are shut down with the roles."""
    val_args = (cfg.validation.generating_args if cfg.validation
                else ValidationGeneratingArgs())
    workers = AgentRole.create(
        AGENT_ROLE, AgentWorker, RoleDevices(AGENT_ROLE, (0,)), None,
        init_kwargs=dict(model_path=model_path, infer_actors=list(roles.actor_infer.actors),
                         infer_streams=streams(cfg), agent=cfg.agent,
                         sampling=sampling_params(cfg.actor_infer.generating_args, 1, 0),
                         val_sampling=sampling_params(val_args, 1, 0),
                         context_length=context_length(cfg)),
        log_dir=log_dir)
    roles.all.append(workers)
    return AgentRollout(cfg, roles, tokenizer, workers, tasks)


@dataclass
class AgentSource:
    """The agent RolloutSource (loop/seams.py): task groups played by agent workers."""

    pool: AgentRole
    cfg: PipelineConfig
    order: PromptOrder
    failures: Counter  # episodes failed since the last step, by failure (shared)
    # agent.reward rewards: the kept groups' answers -> their scoring in flight
    score: Callable[[list[AgentGroup]], AnswerScoring] | None = None
    waits_for_weights: bool = True  # agents call actor_infer themselves, as env workers
    per_worker: int = 1

    def items(self, batch_index: int) -> list[AgentJob]:
        groups = self.cfg.rollout_batch_size // self.cfg.agent.group_size
        tasks = self.order.batch(batch_index, groups)
        seed = int(np.random.SeedSequence([self.cfg.seed, batch_index]).generate_state(1)[0])
        return [AgentJob(batch_index, batch_index * groups, tasks, self.cfg.agent.group_size,
                         seed)]

    def submit(self, item: AgentJob, rank: int, version: int) -> ray.ObjectRef:
        return self.pool.play(rank, item)

    def complete(self, item: AgentJob, rank: int,
                 result: list[AgentGroup]) -> Completion[AgentJob, AgentGroup]:
        kept, dropped = [], {}
        for group in result:
            self.failures.update(e.failure for e in group.episodes if e.failure)
            if group.failure:
                dropped.setdefault(f"agent_{group.failure}", []).append(group)
            else:
                kept.append(group)
        if self.score is not None and kept:  # the rewards score the answers meanwhile
            return Completion(self.score(kept), [], dropped)
        return Completion(Scored(kept), [], dropped)


@dataclass
class AgentRollout:
    cfg: PipelineConfig
    roles: Roles
    tokenizer: object
    workers: AgentRole
    tasks: AgentTasks
    drop_reasons: tuple[str, ...] = tuple(f"agent_{f}" for f in FAILURES)
    failures: Counter = field(default_factory=Counter)
    health: RewardHealth | None = field(init=False)  # agent.reward rewards (reward_health.py)

    def __post_init__(self) -> None:
        self.health = (RewardHealth(self.cfg.rewards, self.cfg.reward_aggregation)
                       if scores_with_rewards(self.cfg) else None)

    @property
    def group_size(self) -> int:
        return self.cfg.agent.group_size

    @property
    def batch_groups(self) -> int:
        return self.cfg.rollout_batch_size // self.group_size

    def source(self) -> AgentSource:
        return AgentSource(self.workers, self.cfg, PromptOrder(self.tasks.train, self.cfg.seed),
                           self.failures, self.score_answers if self.health else None)

    def score_answers(self, groups: list[AgentGroup]) -> AnswerScoring:
        return score_answers(groups, self.roles.rewards, self.cfg.rewards, self.tokenizer,
                             self.cfg.reward_aggregation)

    def pack(self, groups: list[AgentGroup]) -> TokenBatch:
        per_call = estimator_spec(self.cfg.adv_estimator).per_turn  # step_reinforce
        return pack_calls(groups, self.tokenizer.pad_token_id or 0, self._data_parallel_rows(),
                          self.cfg.agent.rows, self.cfg.gamma if per_call else None)

    def add_advantages(self, batch: TokenBatch, kl_coef: float) -> dict[str, float]:
        metrics = call_advantages(batch, self.cfg, self.group_size, kl_coef)
        seed = self.cfg.seed * 1_000_003 + int(batch.version.sum()) + len(batch)
        return metrics | fit_rows(batch, self.cfg.batch_adjust_mode,
                                  self._rows_per_optimizer_step(), seed)

    def step_metrics(self, taken: Taken[AgentGroup], step: int) -> dict[str, float]:
        metrics = agent_metrics(taken.groups, "agent/", self.cfg.agent.rows)
        if self.health is not None:  # says, or stops, a reward that scores nothing
            self.health.check(taken, step)
            metrics |= reward_info_metrics(taken)
        failed = dict(self.failures)
        self.failures.clear()  # the source's counter: the same object
        for failure, name in FAILURE_METRICS.items():
            metrics[f"agent/{name}"] = float(failed.get(failure, 0))
        return metrics

    def validate(self) -> dict[str, float]:
        """Every validation task once (group_size 1), greedy unless validation says not."""
        if not self.tasks.val:
            return {}
        job = AgentJob(-1, 0, self.tasks.val, 1, VAL_SEED)
        groups = self.workers.get(self.workers.play(0, job, "val"), 0)
        kept = [g for g in groups if not g.failure]
        if self.health is not None and kept:
            self.score_answers(kept).finish()
        metrics = agent_metrics(kept, "val/agent/", self.cfg.agent.rows)
        # a failed episode is an unsuccessful one, as the built-in agentic validation
        # counts a failed env (agentic/rollout.py): the mean is over every task played;
        # reward_finished is the mean over the episodes that finished
        finished = metrics.pop("val/agent/reward", None)
        played = sum(len(g.episodes) for g in groups)
        if played:
            metrics["val/agent/reward"] = sum(e.reward for g in kept for e in g.episodes) / played
        if finished is not None:
            metrics["val/agent/reward_finished"] = finished
        metrics["val/agent/failed"] = float(sum(g.failure is not None for g in groups))
        return metrics

    def group_state(self, group: AgentGroup) -> dict:
        return agent_group_to_dict(group)

    def group_from_state(self, state: dict) -> AgentGroup:
        return agent_group_from_dict(state)

    def _data_parallel_rows(self) -> int:
        return data_parallel_rows(self.roles)

    def _rows_per_optimizer_step(self) -> int:
        return rows_per_optimizer_step(self.cfg, self.roles)


def pack_calls(groups: list[AgentGroup], pad_id: int, multiple_of: int,
               rows: str = "call", gamma: float | None = None) -> TokenBatch:
    """The episodes' training rows (`rows`: "call", one per call choice, or "episode",
    continued calls packed into one row: rows.py), padded with loss-free rows to a
    multiple of `multiple_of`; `episode` [B] is each row's episode (-1: padding),
    `episode_return` its reward. The loss mask is 1 exactly on sampled ids. `scores` [B]
    is the episode's reward, or with `gamma` (step_reinforce) the row's discounted return
    gamma^(K-1-k) R, its last call k of the episode's K (the reward comes at the end)."""
    prompts, responses, generated, logprobs, versions, episode, rewards = ([] for _ in range(7))
    scores = []
    index = 0
    for group in groups:
        for outcome in group.episodes:
            last = max((r.call for r in outcome.rows), default=0)
            for row in ROWS[rows](outcome.rows):
                scores.append(outcome.reward if gamma is None
                              else gamma ** (last - row.last_call) * outcome.reward)
                prompts.append(row.prompt)
                responses.append(row.response)
                generated.append(row.generated)
                logprobs.append(row.log_probs)
                versions.append(row.version)
                episode.append(index)
            rewards.append(outcome.reward)
            index += 1
    padding = -len(prompts) % multiple_of
    prompts += [prompts[0][:1]] * padding  # one real token, no response: no loss
    responses += [[]] * padding
    generated += [[]] * padding
    logprobs += [[]] * padding
    batch = pack_sequences(prompts, responses, pad_id, logprobs)
    width = batch.input_ids.shape[1]
    sampled = torch.tensor([[False] * len(p) + g + [False] * (width - len(p) - len(g))
                            for p, g in zip(prompts, generated)])  # [B, L]
    batch.response_mask = batch.response_mask * sampled  # the agent's / template's ids: 0
    episode_ids = torch.tensor(episode + [-1] * padding)  # [B]
    episode_reward = torch.tensor(rewards, dtype=torch.float32)  # [E]
    batch.episode = episode_ids
    batch.episode_return = episode_reward[episode_ids.clamp(min=0)]  # [B]
    batch.scores = torch.tensor(scores + [0.0] * padding, dtype=torch.float32)  # [B]
    batch.version = torch.tensor(versions + [versions[0]] * padding)
    return batch


def call_advantages(batch: TokenBatch, cfg: PipelineConfig, group_size: int,
                    kl_coef: float) -> dict[str, float]:
    """A_e of each episode e over its task's group (a "sample" estimator of
    algorithms/estimators.py: GRPO, Shao et al. 2024 eq. 3 outcome supervision,
    (r_e - mean_g) / std_g; reinforce), given to every token of every row of e; plus the
    reward-to-go of the per-token KL penalty, as RLVR's. A per-turn estimator
    (step_reinforce) credits each call row with its discounted return (pack_calls' scores)
    normalised over its task's calls, as the agentic pipeline's per-turn rows
    (algorithms/step_credit.py)."""
    if estimator_spec(cfg.adv_estimator).per_turn:
        return agentic_advantages(batch, cfg, group_size, kl_coef)
    mask = batch.response_mask  # [B, L]
    real = batch.episode >= 0  # [B]
    episodes = int(batch.episode.max()) + 1
    reward = torch.zeros(episodes).index_copy_(0, batch.episode[real],
                                              batch.episode_return[real].float())  # [E]
    estimate = sample_estimator(estimator_spec(cfg.adv_estimator).fn)
    per_episode = estimate(reward, group_size, norm_mean_type=cfg.norm_mean_type,
                           norm_std_type=cfg.norm_std_type)  # [E]
    per_row = torch.where(real, per_episode[batch.episode.clamp(min=0)], 0.0)  # [B]
    metrics: dict[str, float] = {}
    penalty = torch.zeros_like(mask)  # [B, L]
    if kl_coef > 0:
        penalty, kl_metrics = apply_kl_penalty(penalty, batch.old_log_probs,
                                               batch.ref_log_probs, mask, kl_coef,
                                               cfg.kl_penalty)
        metrics.update(kl_metrics)
    to_go = torch.flip(torch.cumsum(torch.flip(penalty * mask, [1]), 1), [1])  # [B, L]
    advantages = (per_row[:, None] + to_go) * mask  # [B, L]
    if cfg.whiten_advantages:
        advantages = whiten_advantages(advantages, mask)
    if cfg.advantage_clip is not None:
        advantages = advantage_clip(advantages, cfg.advantage_clip)
    batch.advantages = advantages * mask
    valid = mask.bool()
    metrics["advantages/mean"] = float(batch.advantages[valid].mean())
    metrics["advantages/abs_mean"] = float(batch.advantages[valid].abs().mean())
    return metrics


def agent_metrics(groups: list[AgentGroup], prefix: str, rows: str) -> dict[str, float]:
    episodes = [e for g in groups for e in g.episodes]
    if not episodes:
        return {}

    def mean(values) -> float:
        values = list(values)
        return float(sum(values) / len(values)) if values else 0.0

    metrics = {f"{prefix}reward": mean(e.reward for e in episodes),
               f"{prefix}rows": float(sum(len(ROWS[rows](e.rows)) for e in episodes)),
               # ids the trainer reads per episode (per call: prompt + completion tokens)
               f"{prefix}row_tokens": mean(sum(len(r.ids) for r in ROWS[rows](e.rows))
                                           for e in episodes),
               f"{prefix}calls": mean(e.counts.get("calls", 0) for e in episodes)}
    for key in ("history_rewrites", "malformed_calls", "prompt_tokens", "completion_tokens"):
        metrics[f"{prefix}{key}"] = mean(e.counts.get(key, 0) for e in episodes)
    metrics[f"{prefix}refused"] = mean(
        sum(v for k, v in e.counts.items() if k.startswith("refused_")) for e in episodes)
    for key in sorted({k for e in episodes for k in e.info}):
        metrics[f"{prefix}{key}"] = mean(e.info[key] for e in episodes if key in e.info)
    return metrics
