"""A reward from outside flywheel's catalog (tests/pipelines/test_registration.py registers it
with `register_reward`). Imports no torch: its scoring process starts in a fresh interpreter,
which imports this module by the path the registration gave."""

from __future__ import annotations

from collections.abc import Callable

from flywheel.platform.config.schema import RewardConfig
from flywheel.workers.rewards.result import RewardResult

SCORE = 0.123  # what no 0/1 reward averages to (it is no multiple of 1/n for n <= 100)


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    def score(prompt: str, response: str, reference: str) -> RewardResult:
        # responses whose character codes add up odd score: the group's scores differ, so
        # advantages are not 0; "parsed": False for every sample makes reward/parse_rate 0
        return RewardResult(SCORE if sum(map(ord, response)) % 2 else 0.0, {"parsed": False})

    return score
