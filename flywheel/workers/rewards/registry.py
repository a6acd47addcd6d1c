"""Reward functions by `reward_type`."""

from __future__ import annotations

from collections.abc import Callable

from flywheel.workers.rewards import math_rule
from flywheel.workers.rewards.math_rule import RewardResult

RewardFn = Callable[[str, str, str], RewardResult]

REWARDS: dict[str, RewardFn] = {
    "math_rule": math_rule.score,
}


def reward_fn(name: str) -> RewardFn:
    if name not in REWARDS:
        raise ValueError(f"unknown reward_type '{name}' (known: {', '.join(sorted(REWARDS))})")
    return REWARDS[name]
