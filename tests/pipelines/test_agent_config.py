"""pipeline_type: agent's config (issue 47): the shipped examples validate; each refusal is
one line naming its key (the kind's config_check, checks/agent.py, and the acts-when rows
of the agent block and the allowlist)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from flywheel.config.kinds import kind_of
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError

ROOT = Path(__file__).parents[2]
BASE = yaml.safe_load((ROOT / "examples/agent_tiny_sums.yaml").read_text())


def loaded(**changes):
    raw = copy.deepcopy(BASE)
    for key, value in changes.items():
        node, *path = key.split("__")
        target = raw
        for part in [node, *path][:-1]:
            target = target.setdefault(part, {})
        target[[node, *path][-1]] = value
    return load_config_dict(raw)


def test_the_examples_validate_as_the_agent_kind():
    cfg = loaded()
    assert kind_of(cfg).agents and cfg.agent.import_path == "examples.agents.sums_agent:agent"
    raw = yaml.safe_load((ROOT / "examples/agent_smollm2_multiply_openai.yaml").read_text())
    assert load_config_dict(raw).agent.tool_format == "hermes"


@pytest.mark.parametrize("changes, key, says", [
    ({"agent__command": ["python", "a.py"]}, "agent.import_path", "exactly one"),
    ({"agent__import_path": "os.path:join"}, "agent.import_path", "not under a prefix"),
    ({"agent__tasks": "no/such.jsonl"}, "agent.tasks", "no file"),
    ({"agent__group_size": 1}, "agent.group_size", ">= 2"),
    ({"rollout_batch_size": 12}, "rollout_batch_size", "not a multiple"),
    ({"agent__max_calls": 0}, "agent.max_calls", ">= 1"),
    ({"adv_estimator": "gigpo"}, "adv_estimator", "anchor states"),
    ({"adv_estimator": "gae"}, "adv_estimator", "grpo or reinforce or step_reinforce"),
    ({"adv_estimator": "step_reinforce"}, "agent.rows", "set agent.rows: call"),
    ({"response_length": 4}, "response_length", "agent.max_tokens_per_call"),
    ({"custom_envs": {}}, "custom_envs", "not an agentic config"),
])
def test_a_refused_key_is_named(changes, key, says):
    with pytest.raises(ConfigError) as error:
        loaded(**changes)
    assert error.value.key_path == key and says in str(error.value)


def test_step_reinforce_per_call_acts_with_its_discount():
    cfg = loaded(adv_estimator="step_reinforce", agent__rows="call", gamma=0.9)
    assert cfg.adv_estimator == "step_reinforce" and cfg.gamma == 0.9
    with pytest.raises(ConfigError) as error:  # gamma acts only where returns are discounted
        loaded(gamma=0.9)
    assert error.value.key_path == "gamma"


def test_the_agent_block_acts_only_in_the_agent_kind():
    raw = yaml.safe_load((ROOT / "examples/rlvr_sync.yaml").read_text())
    raw["agent"] = {"group_size": 4}
    with pytest.raises(ConfigError) as error:
        load_config_dict(raw)
    assert error.value.key_path == "agent" and "pipeline_type: agent" in str(error.value)


def test_a_task_file_line_that_is_not_an_object_is_named(tmp_path):
    from flywheel.pipelines.agent.rollout import read_tasks

    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"agent.tasks: .*tasks.jsonl:2: expected a JSON object"):
        read_tasks(str(bad), "agent.tasks")
    bad.write_text("\n")
    with pytest.raises(ValueError, match="holds no task"):
        read_tasks(str(bad), "agent.tasks")


def test_rewards_act_only_where_they_score_the_agents_answer(tmp_path):
    """agent.reward says who gives the reward: rewards: written under agent (the
    default) is refused; under rewards it acts, starts its reward workers, and a task no
    reward takes is refused when the tasks load, naming their key."""
    from flywheel.config.derived import started_roles
    from flywheel.config.kinds import scores_with_rewards
    from flywheel.pipelines.agent.rollout import load_tasks

    assert not scores_with_rewards(loaded())
    with pytest.raises(ConfigError) as error:
        loaded(rewards={"math_rule": {"reward_type": "math_rule"}})
    assert error.value.key_path == "rewards" and "set agent.reward: rewards" in str(error.value)
    math = {"reward_type": "math_rule", "tag_included": ["math"]}
    cfg = loaded(agent__reward="rewards", rewards={"math_rule": math})
    assert scores_with_rewards(cfg) and cfg.rewards["math_rule"].tag_included == ["math"]
    assert len(started_roles(cfg)) == len(started_roles(loaded())) + 1  # its reward worker
    with pytest.raises(ValueError, match=r"^agent.tasks: 2000 record\(s\) with no tag "
                                         r"would go to no reward"):
        load_tasks(cfg, None)
    tagged = tmp_path / "tasks.jsonl"
    tagged.write_text('{"prompt": "1+1=", "answer": "002", "tag": "math"}\n')
    assert len(load_tasks(loaded(agent__reward="rewards", rewards={"math_rule": math},
                                 agent__tasks=str(tagged), agent__val_tasks=""),
                          None).train) == 1
