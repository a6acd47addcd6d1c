"""Reward workers: score samples (prompt, response, reference, record) with one reward.

The reward itself runs in the worker's killable scoring processes (rewards/time_limit.py),
under the hard per-sample limit `sample_timeout_s`: a hanging or crashing sample costs that
sample (scored 0, counted in its metadata), never the worker. The first timeout is said on
the console while the call still runs (`progress`), and a reward whose samples time out
`max_consecutive_timeouts` times in a row stops the run (time_limit.RewardHangs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import ray

from flywheel.config.schema import RewardConfig
from flywheel.platform.liveness import PROGRESS_GROUP, doing, snapshot
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.rewards.time_limit import START_TIMEOUT_S, TimeLimitedScorer
from flywheel.workers.role_worker import RoleWorker


class RewardWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, reward_type: str,
                 num_threads: int | None = 1, cpu_affinity: list[int] | None = None,
                 cfg: RewardConfig | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 build: str | None = None, log_path: str | None = None):
        super().__init__(role, rank, world_size, num_threads, cpu_affinity, log_path)
        # start_timeout_s: each scoring process's start (a judge model loads there); build:
        # the reward's builder by import path, looked up where it was registered (the
        # driver), since this process never ran a user's register_reward
        self.scorer = TimeLimitedScorer(replace(cfg or RewardConfig(), reward_type=reward_type),
                                        start_timeout_s, build)

    @ray.method(concurrency_group=PROGRESS_GROUP)
    def progress(self) -> tuple[int, str, list[str]]:
        """RoleWorker's (counter, doing), and what the console should hear of this
        worker's scoring so far (its scorer's notices: the first timeout), read by the
        driver while a score call runs (pipelines/roles/handles.py RewardRole)."""
        return (*snapshot(), list(self.scorer.notices))

    def score(self, items: Sequence[Sample | tuple[str, str, str]]) -> list[RewardResult]:
        # each scored sample ticks (time_limit.py): a long batch that moves is not a stall
        with doing(f"scoring {len(items)} samples with {self.scorer.cfg.reward_type}"):
            return self.scorer.score(items)
