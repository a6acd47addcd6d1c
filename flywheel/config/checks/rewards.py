"""Rules for routing records to rewards and mixing domains, checked without the data.

`reward_aggregation` and `rewards.*.weight` say how several rewards that take one tag
combine; `actor_train.data_args.domain_interleave_probs` sets each batch's mix of domains.
What needs the data (a key naming a tag or reward the records have, every record routed
to some reward and in one domain) is checked when the data loads
(pipelines/rlvr/reward_routing.py, pipelines/rlvr/domain_mix.py). Pure functions on a
`PipelineConfig`, run by `checks.check_config`; each raises `ConfigError`.
"""

from __future__ import annotations

import math
import re

from flywheel.config.checks.reward_limits import check_reward_limits
from flywheel.config.kinds import scores_with_rewards
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError

PROBS = "domain_interleave_probs"
SUM_TOLERANCE = 0.01  # probabilities summing to 1 within this are rescaled to exactly 1


def check_reward_routing(cfg: PipelineConfig) -> None:
    rlvr = scores_with_rewards(cfg)  # the run scores its samples with rewards:
    if not rlvr and cfg.reward_aggregation != "first_match":
        raise ConfigError("", "reward_aggregation", f"combines RLVR rewards; "
                                                    f"pipeline_type {cfg.pipeline_type} "
                                                    f"scores no records: remove it")
    for name, reward in cfg.rewards.items():
        check_reward_shaping(name, reward.format_pattern, reward.response_length_penalty_coef)
        check_reward_limits(name, reward)
        key = f"rewards.{name}.weight"
        if not math.isfinite(reward.weight):
            raise ConfigError("", key, f"must be a finite number, got {reward.weight}")
        if reward.weight != 1.0 and cfg.reward_aggregation != "weighted_sum":
            raise ConfigError("", key, f"is {reward.weight}, but reward_aggregation is "
                                       f"{cfg.reward_aggregation} (one reward's score, as "
                                       f"is); set reward_aggregation: weighted_sum or "
                                       f"remove weight")
    if cfg.validation is not None and getattr(cfg.validation.data_args, PROBS):
        raise ConfigError("", f"validation.data_args.{PROBS}",
                          "validation scores every validation record once, so there is no "
                          "mix to set; remove it (val/<tag>/accuracy reports each domain)")
    probs = getattr(cfg.actor_train.data_args, PROBS)
    if not probs:
        return
    key = f"actor_train.data_args.{PROBS}"
    if not rlvr:
        raise ConfigError("", key, f"mixes RLVR prompt domains; pipeline_type "
                                   f"{cfg.pipeline_type} does not draw batches by domain: "
                                   f"remove it")
    for name, p in probs.items():
        if not (math.isfinite(p) and p >= 0):
            raise ConfigError("", f"{key}.{name}", f"must be a probability >= 0, got {p}")
    total = sum(probs.values())
    if abs(total - 1) > SUM_TOLERANCE:
        raise ConfigError("", key, f"probabilities sum to {total:g}; they must sum to 1 "
                                   f"(e.g. {{{', '.join(f'{n}: ...' for n in probs)}}})")


def check_reward_shaping(name: str, format_pattern: str | None, length_coef: float) -> None:
    """format_pattern compiles (workers/rewards/format_pattern.py applies it) and
    response_length_penalty_coef is a finite number (pipelines/rlvr/generation.py)."""
    if format_pattern is not None:
        try:
            re.compile(format_pattern)
        except re.error as e:
            raise ConfigError("", f"rewards.{name}.format_pattern",
                              f"is not a Python regular expression ({e})") from None
    if not math.isfinite(length_coef):
        raise ConfigError("", f"rewards.{name}.response_length_penalty_coef",
                          f"must be a finite number, got {length_coef}")
