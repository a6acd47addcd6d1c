"""`rewards.<name>.format_pattern`: a regex every response must match, on any reward.

ROLL's format reward (`format_reward_fn` in roll/pipeline/rlvr/rewards/
math_rule_reward_worker.py): `re.match(pattern, response, re.DOTALL | re.MULTILINE)`, 0
when it matches, -1 when it does not; the whole response, thinking included. ROLL computes
it in MathRuleRewardWorker only and leaves it out of the reward it returns; here it is
added to the score of whichever reward has the key, so it acts (`platform convert` says so
when it carries a ROLL file's pattern over). Metadata `format_ok` says whether it matched
(`reward/format_rate`).

Applied where the reward is built (registry.reward_fn), so it runs in the scoring process
under the per-sample time limit like the reward: a pattern that backtracks badly on some
response costs that sample (timed out, 0), never the worker. The pattern is compiled when
the config loads (config/checks/rewards.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from flywheel.workers.rewards.result import RewardResult

FLAGS = re.DOTALL | re.MULTILINE
MISMATCH_SCORE = -1.0  # ROLL's format reward for a response that does not match

Score = Callable[[str, str, str], RewardResult]


def format_check(pattern: str) -> Callable[[str], RewardResult]:
    """The format term alone: 0 when `pattern` matches the response, -1 when not."""
    compiled = re.compile(pattern, FLAGS)

    def check(response: str) -> RewardResult:
        ok = compiled.match(response) is not None
        return RewardResult(0.0 if ok else MISMATCH_SCORE, {"format_ok": ok})

    return check


def plus_format(result: RewardResult, fmt: RewardResult) -> RewardResult:
    return RewardResult(result.score + fmt.score, {**result.metadata, **fmt.metadata})


def with_format_pattern(score: Score, pattern: str | None) -> Score:
    """`score`, plus -1 for a response that `pattern` does not match (unset: `score`)."""
    if pattern is None:
        return score
    check = format_check(pattern)

    def shaped(prompt: str, response: str, reference: str) -> RewardResult:
        return plus_format(score(prompt, response, reference), check(response))

    return shaped
