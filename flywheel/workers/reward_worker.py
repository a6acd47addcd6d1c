"""Reward workers: score (prompt, response, reference) triples with one reward function."""

from __future__ import annotations

from flywheel.workers.rewards.math_rule import RewardResult
from flywheel.workers.rewards.registry import reward_fn
from flywheel.workers.role_worker import RoleWorker


class RewardWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, reward_type: str,
                 num_threads: int | None = 1, cpu_affinity: list[int] | None = None):
        super().__init__(role, rank, world_size, num_threads, cpu_affinity)
        self.score_fn = reward_fn(reward_type)

    def score(self, items: list[tuple[str, str, str]]) -> list[RewardResult]:
        return [self.score_fn(prompt, response, ref) for prompt, response, ref in items]
