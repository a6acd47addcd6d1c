"""Rewards that score nothing are said, and stop the run (issue 44): a reward function
that raises on every sample used to score every sample 0 and let the run finish "done".

Per step, over the samples whose fate the step decided (trained, stale or filtered, as
rlvr/metrics.py counts them), each reward's samples are counted, and among them those it
did not score: its function failed (`fn_error`), answered None (`fn_unscored`), the time
limit killed it (`timed_out`) or its scoring process died (`crashed`, out of memory
included). ScoringJob.finish (rlvr/generation.py) records which rewards did not score a
sample in its metadata, `unscored_by` ({reward name: why}), since the merged flags of
several rewards cannot say which one failed.

- more than half of a reward's samples unscored in a step: one console line naming the
  reward, the step and the counts by cause;
- all of them, `rewards.<name>.max_failed_steps` steps in a row (default 3; 0: never):
  `RewardScoresNothing`, which stops the run. A step in which the reward had no sample
  (no record of its tags) neither counts nor breaks the row.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from flywheel.config.schema import RewardConfig
from flywheel.pipelines.loop.seams import Taken
from flywheel.pipelines.rlvr.reward_routing import rewards_for_tag

log = logging.getLogger(__name__)

UNSCORED = "unscored_by"  # the metadata key ScoringJob.finish sets
MOSTLY = 0.5  # a step in which more than this share of a reward's samples is unscored is said


class RewardScoresNothing(RuntimeError):
    """A reward scored none of its samples in `max_failed_steps` steps in a row."""


def why_unscored(metadata: dict) -> str | None:
    """Why one reward's result is not a score of the sample (None: it is one). `crashed`
    is the scorer's flag (True), not code_sandbox's count of crashed tests."""
    for key in ("fn_error", "fn_unscored", "timed_out"):
        if metadata.get(key) is True:
            return key
    return "crashed" if metadata.get("crashed") is True else None


@dataclass
class RewardHealth:
    rewards: dict[str, RewardConfig]
    aggregation: str = "first_match"
    failed_steps: dict[str, int] = field(default_factory=dict)  # reward -> steps in a row

    def check(self, taken: Taken, step: int) -> None:
        """Say a step whose samples a reward mostly did not score; raise
        RewardScoresNothing when one scored none for its max_failed_steps steps."""
        totals: Counter[str] = Counter()
        causes: dict[str, Counter[str]] = {name: Counter() for name in self.rewards}
        for group in [*taken.groups, *taken.stale, *taken.filtered]:
            for name in rewards_for_tag(group.record.tag, self.rewards, self.aggregation):
                totals[name] += group.num_samples
            for info in group.reward_info:
                for name, why in (info.get(UNSCORED) or {}).items():
                    if name in causes:
                        causes[name][why] += 1
        for name, total in totals.items():
            unscored = sum(causes[name].values())
            how = ", ".join(f"{why} {n}" for why, n in sorted(causes[name].items()))
            if unscored > MOSTLY * total:
                log.warning("step %d: reward '%s' scored %d of its %d samples (unscored: %s; "
                            "each scores 0)", step, name, total - unscored, total, how)
            self.failed_steps[name] = self.failed_steps.get(name, 0) + 1 if (
                unscored == total) else 0
            k = self.rewards[name].max_failed_steps
            if k and self.failed_steps[name] >= k:
                raise RewardScoresNothing(
                    f"reward '{name}' scored none of its samples in {k} steps in a row "
                    f"(step {step}: {how} of {total}); the first failure's report is on "
                    f"the console above and in logs/rewards.{name}-0.log. Fix the reward, "
                    f"or set rewards.{name}.max_failed_steps (0: never stop)")
