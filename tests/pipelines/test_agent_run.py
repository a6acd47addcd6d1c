"""A real run of pipeline_type: agent (issue 47): `platform run`'s path through Ray on the
built-in tiny-qwen2-arith, the user's agent by import path (examples/agents/sums_agent.py)
against the endpoint served by an agent worker, actor_infer on hf_infer, one step ahead
(async_generation_ratio 1): every call's rows are trained, nothing is stale or dropped,
and the staleness bound holds per call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run

ROOT = Path(__file__).parents[2]


def two_steps_of_tiny_sums(tmp_path, top: dict | None = None,
                           agent: dict | None = None) -> list[dict]:
    """examples/agent_tiny_sums.yaml for 2 steps of 16 episodes through Ray, validating
    on 8 held-out sums at steps 0 and 2, with `top` and `agent` keys added; its metrics."""
    raw = yaml.safe_load((ROOT / "examples/agent_tiny_sums.yaml").read_text())
    val = tmp_path / "val.jsonl"
    val.write_text("".join((ROOT / "examples/data/sums_tasks_val.jsonl").read_text()
                           .splitlines(keepends=True)[:8]))
    raw.update(output_dir=str(tmp_path / "run"), max_steps=2, save_steps=0, logging_steps=1,
               eval_steps=2, rollout_batch_size=16, **(top or {}))
    raw["agent"].update(tasks=str(ROOT / raw["agent"]["tasks"]), val_tasks=str(val),
                        chat_template=str(ROOT / raw["agent"]["chat_template"]),
                        **(agent or {}))
    raw["actor_train"]["training_args"]["per_device_train_batch_size"] = 16
    run_dir = run(load_config_dict(raw))
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text()
            .splitlines()]


@pytest.mark.long  # a Ray run: 80 s under load (avg 20) on the shared 2 cores, beyond the budget
def test_an_agent_by_import_path_trains_through_the_endpoint(tmp_path, ray_session):
    records = two_steps_of_tiny_sums(tmp_path)
    steps = [r for r in records if "agent/reward" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["agent/calls"] == 1.0 and r["agent/rows"] == 16.0
        assert r["agent/prompt_tokens"] == 7.0  # <bos> ab+cd=: the warm start's prompt
        assert r["agent/errors"] == 0 and r["agent/timeouts"] == 0
        assert r["agent/history_rewrites"] == 0
        assert r["staleness/max"] <= 1 and r["rollout/dropped_stale"] == 0
        assert all(r[f"rollout/dropped_agent_{f}"] == 0 for f in ("error", "timeout"))
        assert 0 <= r["agent/reward"] <= 1
    # greedy on 8 held-out sums, before and after (measured under load: 0.375 -> 0.625)
    assert [r["step"] for r in records if "val/agent/reward" in r] == [0, 2]


@pytest.mark.long  # a Ray run, as the one above
def test_the_rewards_score_an_agents_answers_in_a_real_run(tmp_path, ray_session):
    """agent.reward: rewards on the tiny model: a reward function (reward_type python, its
    own reward worker) scores each episode's answer; every step's agent/reward equals the
    agent's own check of the same answers (agent/self_check), in training and validation."""
    records = two_steps_of_tiny_sums(
        tmp_path, top={"import_allowlist": ["examples.agents", "tests.pipelines.agents"],
                       "rewards": {"exact": {"reward_type": "python", "reward_import_path":
                                             "tests.pipelines.agents.answer_sums:exact"}}},
        agent={"import_path": "tests.pipelines.agents.answer_sums:agent",
               "reward": "rewards"})
    steps = [r for r in records if "agent/reward" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["agent/reward"] == pytest.approx(r["agent/self_check"])
        assert r["agent/bad_reward"] == 0 and r["reward/fn_errors"] == 0
    checked = [r for r in records if "val/agent/reward" in r]
    assert [r["step"] for r in checked] == [0, 2]
    for r in checked:
        assert r["val/agent/reward"] == pytest.approx(r["val/agent/self_check"])
