"""The agent kind's validation mean (issue 47): a validation episode that failed (timeout,
agent error, engine) is an unsuccessful one, as the built-in agentic validation counts a
failed env, so `val/agent/reward` is over every task played; the mean over the finished
ones is `val/agent/reward_finished`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flywheel.pipelines.agent.episodes import CallRow, EpisodeOutcome
from flywheel.pipelines.agent.jobs import AgentGroup
from flywheel.pipelines.agent.rollout import AgentRollout, AgentTasks
from flywheel.pipelines.config import load_config_dict

ROOT = Path(__file__).parents[2]


class PlayedWorkers:
    """The agent role's two calls validation makes, answering with fixed groups."""

    def __init__(self, groups: list[AgentGroup]) -> None:
        self.groups = groups

    def play(self, version, job, tag):
        return job

    def get(self, handle, version):
        return self.groups


def group(seq: int, reward: float, failure: str | None = None) -> AgentGroup:
    row = CallRow([1, 2], [3], [-0.5], version=0, segment=0)
    episode = EpisodeOutcome(seq, [] if failure else [row], reward, failure,
                             counts={"calls": 0 if failure else 1})
    return AgentGroup(seq, {"prompt": str(seq)}, [episode], version=0)


def test_a_failed_validation_episode_counts_as_unsuccessful():
    cfg = load_config_dict(yaml.safe_load((ROOT / "examples/agent_tiny_sums.yaml").read_text()))
    played = [group(0, 1.0), group(1, 1.0), group(2, 0.0), group(3, float("nan"), "timeout")]
    rollout = AgentRollout(cfg, roles=None, tokenizer=None, workers=PlayedWorkers(played),
                           tasks=AgentTasks(train=[], val=[{}] * 4))
    metrics = rollout.validate()
    assert metrics["val/agent/reward"] == pytest.approx(2 / 4)
    assert metrics["val/agent/reward_finished"] == pytest.approx(2 / 3)
    assert metrics["val/agent/failed"] == 1.0
