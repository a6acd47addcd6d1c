"""Agent jobs: a few tasks' episode groups, played at once against one endpoint.

An `AgentJob` holds `num_groups` tasks; each task is played `group_size` times (GRPO
compares the episodes of one task), every episode with a seed of its own derived from the
job's. All of a job's episodes run concurrently (concurrency is bounded by the episode
count). The result is one `AgentGroup` per task: the unit the replay buffer, the
staleness bound and the ledger see. Its version is the oldest policy version that sampled
any of its calls (the staleness bound holds per call); a group with a failed episode is
dropped whole, named by its failure (`agent/<failure>` counts, episodes.py).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass, field

import numpy as np

from flywheel.pipelines.agent.endpoint import AgentEndpoint
from flywheel.pipelines.agent.episodes import (
    AgentFn,
    AgentLimits,
    CallRow,
    EpisodeOutcome,
    run_episode,
)
from flywheel.pipelines.agent.task_record import task_record
from flywheel.pipelines.data.records import PromptRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentJob:
    batch_index: int  # the training step it was drawn for; -1 for validation
    first_seq: int  # run-wide sequence number of its first group
    tasks: list[dict]  # one per group
    group_size: int
    seed: int

    @property
    def num_groups(self) -> int:
        return len(self.tasks)

    def describe(self) -> str:
        where = "validation" if self.batch_index < 0 else f"batch {self.batch_index}"
        return (f"agent task groups {self.first_seq}..{self.first_seq + self.num_groups - 1}"
                f" of {where} (seed {self.seed})")


@dataclass
class AgentGroup:
    seq: int
    task: dict
    episodes: list[EpisodeOutcome]
    version: int  # the oldest version among its calls (-1: no call)
    scores: list[float] = field(default_factory=list)  # episode rewards
    # agent.reward rewards: per episode what the rewards said beside the score (RLVR's
    # Group.reward_info: the reward/* metrics and the reward health check read it)
    reward_info: list[dict] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"agent/task{self.seq}"

    @property
    def num_samples(self) -> int:
        return len(self.episodes)

    @property
    def num_tokens(self) -> int:
        return sum(len(r.token_ids) for e in self.episodes for r in e.rows)

    @property
    def record(self) -> PromptRecord:
        """The task as the record the rewards see (answers.py)."""
        return task_record(self.task, self.seq)

    @property
    def failure(self) -> str | None:
        return next((e.failure for e in self.episodes if e.failure), None)


def agent_group_to_dict(group: AgentGroup) -> dict:
    return asdict(group)


def agent_group_from_dict(d: dict) -> AgentGroup:
    episodes = [EpisodeOutcome(**{**e, "rows": [CallRow(**r) for r in e["rows"]]})
                for e in d["episodes"]]
    return AgentGroup(**{**d, "episodes": episodes})


def episode_seeds(job: AgentJob) -> list[int]:
    state = np.random.SeedSequence([job.seed]).generate_state(job.num_groups * job.group_size)
    return [int(s) & 0x7FFFFFFF for s in state]


async def run_job(endpoint: AgentEndpoint, job: AgentJob, limits: AgentLimits,
                  agent: AgentFn | None = None, command: list[str] | None = None,
                  answers: bool = False) -> list[AgentGroup]:
    """`answers`: agent.reward is rewards (episodes return answers; rewards NaN until
    the rewards score them: answers.py)."""
    seeds = episode_seeds(job)
    runs = [run_episode(endpoint, task, g, f"{job.describe()} task {g} episode {e}",
                        seeds[g * job.group_size + e], limits, agent, command, answers)
            for g, task in enumerate(job.tasks) for e in range(job.group_size)]
    outcomes = await asyncio.gather(*runs)
    groups = []
    for g, task in enumerate(job.tasks):
        episodes = list(outcomes[g * job.group_size:(g + 1) * job.group_size])
        versions = [r.version for e in episodes for r in e.rows]
        group = AgentGroup(job.first_seq + g, task, episodes, min(versions, default=-1),
                           [e.reward for e in episodes])
        if group.failure:
            failed = next(e for e in episodes if e.failure)
            log.warning("dropping agent group %d (%s): %s: %s", group.seq, job.describe(),
                        failed.failure, failed.message)
        groups.append(group)
    return groups
