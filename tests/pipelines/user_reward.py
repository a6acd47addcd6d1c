"""A reward from outside flywheel's catalog, with a setting of its own
(tests/pipelines/test_registration.py registers it with `register_reward`). Imports no torch:
its scoring process starts in a fresh interpreter, which imports this module by the path the
registration gave."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.catalogs import settings_from
from flywheel.workers.rewards.result import RewardResult


@dataclass(frozen=True)
class OddCodesSettings:
    # What a response whose character codes add up odd scores, in (0, 1].
    score: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.score <= 1:
            raise ValueError(f"score must be in (0, 1], got {self.score}")


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    settings = settings_from(OddCodesSettings, cfg.reward_args, "reward_args")

    def score(prompt: str, response: str, reference: str) -> RewardResult:
        # the group's scores differ, so advantages are not 0; "parsed": False for every
        # sample makes reward/parse_rate 0
        odd = sum(map(ord, response)) % 2
        return RewardResult(settings.score if odd else 0.0, {"parsed": False})

    return score
