"""Reward functions by `reward_type`.

A reward is built once from its `RewardConfig` (so a reward with settings, like
code_sandbox's limits, checks them and its environment when built) and then called per
sample. A new reward: one file with a `build(cfg) -> RewardFn`, one line in `REWARDS`.
"""

from __future__ import annotations

from collections.abc import Callable

from flywheel.platform.config.schema import RewardConfig
from flywheel.workers.rewards import code_sandbox, llm_judge, math_rule
from flywheel.workers.rewards.result import RewardResult

RewardFn = Callable[[str, str, str], RewardResult]  # (prompt, response, reference)

REWARDS: dict[str, Callable[[RewardConfig], RewardFn]] = {
    "math_rule": math_rule.build,
    "code_sandbox": code_sandbox.build,
    "llm_judge": llm_judge.build,
}


def reward_fn(name: str, cfg: RewardConfig | None = None) -> RewardFn:
    """The reward `name`, built with `cfg` (its defaults when unset). Runs in the calling
    process: workers wrap it in time_limit.TimeLimitedScorer."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward_type '{name}' (known: {', '.join(sorted(REWARDS))})")
    return REWARDS[name](cfg or RewardConfig(reward_type=name))
