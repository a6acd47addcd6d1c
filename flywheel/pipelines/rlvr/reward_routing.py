"""Which rewards score a record, and how their scores become the one a sample trains on.

A record goes by its `tag` to the rewards whose `tag_included` holds it (an empty list
takes every tag). `reward_aggregation` says what happens when several take it:

- `first_match`: the first of them in file order scores it alone (ROLL's one reward per
  domain; a catch-all reward with an empty tag_included goes last).
- `weighted_sum`: each of them scores it, and the sample's score is
  sum_r weight_r * score_r over those rewards r (e.g. correctness plus a format bonus).
  The rewards' metadata are merged: a flag (`timed_out`, `parsed`, ...) is set when any
  reward set it, counts are added, anything else keeps the first reward's value.

A record that no reward takes cannot be scored. The tags are known once the data has
loaded, so `check_routes` refuses such data before any worker starts (one line naming
the tag, how many records carry it and the rewards' tag_included); routing never meets
one during the run.

Not here: calling the reward workers (rollout.submit_scoring) and the batch's mix of
domains (rlvr/domain_mix.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from flywheel.config.schema import PipelineConfig, RewardConfig
from flywheel.pipelines.data.prompt_data import DataError, PromptRecord


def rewards_for_tag(tag: str, rewards: dict[str, RewardConfig],
                    aggregation: str = "first_match") -> list[str]:
    """Names of the rewards that score a record tagged `tag`, in file order."""
    takers = [name for name, r in rewards.items() if not r.tag_included or tag in r.tag_included]
    return takers[:1] if aggregation == "first_match" else takers


def route_rewards(tags: list[str], rewards: dict[str, RewardConfig],
                  aggregation: str = "first_match") -> dict[str, list[int]]:
    """Reward name -> indices (into `tags`, one per group) of the groups it scores."""
    routes: dict[str, list[int]] = {name: [] for name in rewards}
    for i, tag in enumerate(tags):
        takers = rewards_for_tag(tag, rewards, aggregation)
        if not takers:  # check_routes refuses such data at start
            raise ValueError(f"no reward takes tag '{tag}' (check rewards.*.tag_included)")
        for name in takers:
            routes[name].append(i)
    return routes


def check_routes(records: Iterable[PromptRecord], cfg: PipelineConfig, role: str,
                 key: str = "") -> None:
    """Every record's tag is taken by some reward; else a one-line DataError naming `key`
    (default: the role's data_args)."""
    counts = Counter(r.tag for r in records)
    for tag, n in counts.items():
        if not rewards_for_tag(tag, cfg.rewards, cfg.reward_aggregation):
            taken = "; ".join(f"{name}: {r.tag_included}" for name, r in cfg.rewards.items())
            shown = f"'{tag}'" if tag else "no tag"
            raise DataError(f"{key or f'{role}.data_args'}: {n} record(s) with {shown} "
                            f"would go to no reward (rewards' tag_included: {taken}); add "
                            f"the tag to a reward's tag_included, or a reward with an empty "
                            f"tag_included")


def merged_metadata(parts: list[dict]) -> dict:
    """One sample's metadata from several rewards (weighted_sum): flags or-ed, counts added,
    other values from the first reward that gave them."""
    merged: dict = {}
    for meta in parts:
        for key, value in meta.items():
            if key not in merged:
                merged[key] = value
            elif isinstance(value, bool) and isinstance(merged[key], bool):
                merged[key] = merged[key] or value
            elif (isinstance(value, int | float) and isinstance(merged[key], int | float)
                  and not isinstance(value, bool) and not isinstance(merged[key], bool)):
                merged[key] = merged[key] + value
    return merged
