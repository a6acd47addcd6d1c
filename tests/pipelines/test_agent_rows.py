"""The agent kind's training rows (issue 47 item 3): one row per call, exactly its prompt
and completion ids with the behaviour log-probs on the completion, every row of an
episode credited with the episode's GRPO advantage over the episodes of its task
(worked out by hand below); a group's version is its oldest call's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.agent.episodes import CallRow, EpisodeOutcome
from flywheel.pipelines.agent.jobs import AgentGroup, agent_group_from_dict, agent_group_to_dict
from flywheel.pipelines.agent.rollout import call_advantages, pack_calls


def episode(reward, *calls):
    rows = [CallRow(p, t, [-0.5] * len(t), v, 0) for p, t, v in calls]
    return EpisodeOutcome(0, rows, reward)


def test_rows_are_the_calls_and_share_their_episodes_advantage():
    # task A: episode 0 (reward 1, two calls, the second on version 3), episode 1 (0)
    # task B: both episodes reward 1 (no spread: advantage 0)
    a = AgentGroup(0, {}, [episode(1.0, ([5, 6], [7], 2), ([5, 6, 7, 9], [8, 8], 3)),
                           episode(0.0, ([5, 6], [4, 4, 4], 2))], version=2)
    b = AgentGroup(1, {}, [episode(1.0, ([1], [2], 2)), episode(1.0, ([1], [3], 2))], version=2)
    assert agent_group_from_dict(agent_group_to_dict(a)) == a
    batch = pack_calls([a, b], pad_id=0, multiple_of=3)
    assert len(batch) == 6  # 5 rows + 1 loss-free padding row
    assert batch.input_ids[1, :6].tolist() == [5, 6, 7, 9, 8, 8]
    assert batch.response_mask[1].tolist() == [0, 0, 0, 0, 1, 1]
    assert batch.infer_log_probs[1, 4:6].tolist() == [-0.5, -0.5]
    assert batch.version.tolist()[:5] == [2, 3, 2, 2, 2]
    assert batch.episode.tolist() == [0, 0, 1, 2, 3, -1]
    cfg = dataclasses.replace(PipelineConfig(), adv_estimator="grpo", whiten_advantages=False)
    call_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    per_row = [float(batch.advantages[r][batch.response_mask[r].bool()].mean())
               if batch.response_mask[r].any() else 0.0 for r in range(6)]
    # GRPO over task A's episodes: (1 - 0.5) / (0.5 + 1e-6) = +1, and -1; task B: 0
    assert per_row == pytest.approx([1.0, 1.0, -1.0, 0.0, 0.0, 0.0], abs=1e-5)
    assert torch.all(batch.advantages[5] == 0)


def test_step_reinforce_credits_each_call_its_discounted_return():
    # task A: episode 0 (reward 1, two calls), episode 1 (reward 0, one call); gamma 0.5:
    # returns 0.5 (call 0: one call before the reward), 1.0, 0.0; over the group's calls
    # mean 0.5, std sqrt(1/6): advantages 0, +sqrt(1.5), -sqrt(1.5). Task B: 1, 1 -> 0.
    a = AgentGroup(0, {}, [episode(1.0, ([5, 6], [7], 2), ([5, 6, 7, 9], [8, 8], 3)),
                           episode(0.0, ([5, 6], [4, 4, 4], 2))], version=2)
    b = AgentGroup(1, {}, [episode(1.0, ([1], [2], 2)), episode(1.0, ([1], [3], 2))], version=2)
    for e in a.episodes[0].rows[1:]:
        e.call = 1
    batch = pack_calls([a, b], pad_id=0, multiple_of=3, gamma=0.5)
    assert batch.scores.tolist() == [0.5, 1.0, 0.0, 1.0, 1.0, 0.0]
    cfg = dataclasses.replace(PipelineConfig(), adv_estimator="step_reinforce",
                              whiten_advantages=False)
    call_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    per_row = [float(batch.advantages[r][batch.response_mask[r].bool()].mean())
               if batch.response_mask[r].any() else 0.0 for r in range(6)]
    assert per_row == pytest.approx([0.0, 1.5 ** 0.5, -(1.5 ** 0.5), 0.0, 0.0, 0.0], abs=1e-4)
