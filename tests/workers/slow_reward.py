"""A reward that takes SECONDS per sample and scores 1, for the liveness test
(tests/workers/test_reward_time_limit.py). Imports no torch: its scoring process imports
this module by path in a fresh interpreter."""

from __future__ import annotations

import time
from collections.abc import Callable

from flywheel.config.schema import RewardConfig
from flywheel.workers.rewards.result import RewardResult

SECONDS = 0.25


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    def score(prompt: str, response: str, reference: str) -> RewardResult:
        time.sleep(SECONDS)
        return RewardResult(1.0, {})

    return score
