"""reward_aggregation: which rewards score a record's tag, and how their scores combine."""

from __future__ import annotations

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import DataError, PromptRecord
from flywheel.pipelines.rlvr.generation import Group, ScoringJob
from flywheel.pipelines.rlvr.reward_routing import (
    check_routes,
    merged_metadata,
    route_rewards,
)
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.strategies.base import Generation

REWARDS = {"exact": {"tag_included": ["math"]},
           "format": {"tag_included": ["math", "code"]},
           "anything": {}}  # empty tag_included: every tag


def config(aggregation: str = "first_match", rewards: dict = REWARDS):
    return load_config_dict({"reward_aggregation": aggregation, "rewards": rewards})


def test_first_match_takes_the_first_reward_in_file_order():
    cfg = config()
    routes = route_rewards(["math", "code", "poetry"], cfg.rewards, cfg.reward_aggregation)
    assert routes == {"exact": [0], "format": [1], "anything": [2]}


def test_weighted_sum_takes_every_reward_that_matches():
    cfg = config("weighted_sum")
    routes = route_rewards(["math", "code", "poetry"], cfg.rewards, cfg.reward_aggregation)
    assert routes == {"exact": [0], "format": [0, 1], "anything": [0, 1, 2]}


def test_a_tag_no_reward_takes_is_refused_when_the_data_loads():
    cfg = config(rewards={"exact": {"tag_included": ["math"]}})
    data = [PromptRecord("1", "1+1=", "2", "math"), PromptRecord("2", "x", "y", "code"),
            PromptRecord("3", "x", "y", "code")]
    with pytest.raises(DataError, match="actor_train.data_args: 2 record.s. with 'code' "
                                        "would go to no reward"):
        check_routes(data, cfg, "actor_train")
    check_routes(data[:1], cfg, "actor_train")


class FakeRewardCluster:
    """What ScoringJob.finish reads of a reward cluster: results by ref."""

    def __init__(self, results: dict[str, list[RewardResult]]):
        self.results = results

    def get(self, ref, rank):
        return self.results[ref]


def group(seq: int, tag: str, n: int) -> Group:
    responses = [Generation(0, [1], [0.0], "stop") for _ in range(n)]
    g = Group(seq, PromptRecord(str(seq), "p", "a", tag), [1], responses, version=0)
    g.texts = ["t"] * n
    return g


def test_weighted_sum_adds_weight_times_score_and_merges_metadata():
    groups = [group(0, "math", 2), group(1, "code", 2)]
    cluster = FakeRewardCluster({
        "exact": [RewardResult(1.0, {"parsed": True}), RewardResult(0.0, {"parsed": False})],
        "format": [RewardResult(1.0, {"parsed": False, "passed": 2}),
                   RewardResult(1.0, {"timed_out": True}),
                   RewardResult(0.5, {}), RewardResult(0.0, {"passed": 1})],
    })
    job = ScoringJob(groups, [(cluster, 0, "exact", [0]), (cluster, 0, "format", [0, 1])],
                     weights=[0.8, 0.2])
    job.finish()
    assert groups[0].scores == pytest.approx([0.8 + 0.2, 0.0 + 0.2])
    assert groups[1].scores == pytest.approx([0.1, 0.0])
    assert groups[0].reward_info == [{"parsed": True, "passed": 2},
                                     {"parsed": False, "timed_out": True}]


def test_one_reward_keeps_its_score_as_is():
    groups = [group(0, "math", 2)]
    cluster = FakeRewardCluster({"r": [RewardResult(0.25, {"parsed": True}),
                                       RewardResult(1.0, {})]})
    ScoringJob(groups, [(cluster, 0, "r", [0])]).finish()
    assert groups[0].scores == [0.25, 1.0]
    assert groups[0].reward_info == [{"parsed": True}, {}]


def test_merged_metadata_rules():
    assert merged_metadata([{"a": True, "n": 1, "s": "x"},
                            {"a": False, "n": 2, "s": "y", "b": False}]) == {
        "a": True, "n": 3, "s": "x", "b": False}


def test_weights_act_only_under_weighted_sum():
    with pytest.raises(ConfigError, match="rewards.exact.weight: is 0.5, but "
                                          "reward_aggregation is first_match"):
        config(rewards={"exact": {"weight": 0.5}})
    assert config("weighted_sum", {"exact": {"weight": 0.5}}).rewards["exact"].weight == 0.5
    with pytest.raises(ConfigError, match="reward_aggregation"):
        load_config_dict({"reward_aggregation": "mean"})
