"""format_pattern and response_length_penalty_coef: ROLL's format and length rewards, on
any reward_type, and how `platform convert` carries ROLL's rule-reward keys over."""

from __future__ import annotations

import pytest

from flywheel.config.schema import RewardConfig
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import PromptRecord
from flywheel.pipelines.rlvr.generation import Group, ScoringJob
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.rewards.registry import Sample, reward_fn
from flywheel.workers.rewards.response_length import response_length_reward
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.strategies.base import Generation


def test_format_pattern_subtracts_one_on_a_mismatch_for_any_reward():
    cfg = RewardConfig(reward_type="math_rule", format_pattern=r"^<think>.*?</think>.*$")
    score = reward_fn("math_rule", cfg)
    good = score("1+1=", "<think>\nadd\n</think>\n\\boxed{2}", "2")  # DOTALL: across lines
    bad = score("1+1=", "\\boxed{2}", "2")
    assert (good.score, good.metadata["format_ok"]) == (1.0, True)
    assert (bad.score, bad.metadata["format_ok"]) == (0.0, False)
    assert "format_ok" not in reward_fn("math_rule").__call__("q", "2", "2").metadata


def test_format_pattern_acts_on_a_users_python_reward_too():
    cfg = RewardConfig(reward_type="python", format_pattern=r"^\d+$",
                       reward_import_path="tests.workers.user_rewards:verl_score")
    score = reward_fn("python", cfg).score
    record = {"data_source": "math", "extra_info": {"level": 2}}
    good, bad = score([Sample("q", "4", "4", record), Sample("q", "4!", "4", record)])
    assert (good.score, good.metadata["format_ok"]) == (1.0, True)
    assert (bad.score, bad.metadata["format_ok"]) == (-1.0, False)


def test_a_format_pattern_that_does_not_compile_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"rewards.m.format_pattern: is not a Python "
                                          r"regular expression"):
        load_config_dict({"rewards": {"m": {"format_pattern": "(<think>"}}})


@pytest.mark.parametrize("tokens, expected", [(0, -0.5), (99, -0.5), (100, -0.5),
                                              (250, -0.25), (400, 0.0), (401, 0.0)])
def test_rolls_length_reward(tokens, expected):
    assert response_length_reward(tokens) == pytest.approx(expected)


class OneResult:
    def __init__(self, results):
        self.results = results

    def get(self, ref, rank):
        return self.results


def test_the_length_penalty_is_added_per_response_by_its_token_count():
    lengths = [50, 250, 500]
    group = Group(0, PromptRecord("0", "p", "B", "mc"), [1],
                  [Generation(0, [1] * n, [0.0] * n, "stop") for n in lengths], version=0)
    group.texts = ["t"] * 3
    results = [RewardResult(1.0, {}) for _ in lengths]
    ScoringJob([group], [(OneResult(results), 0, "r", [0])], weights=[2.0],
               length_coefs=[0.5]).finish()
    assert group.scores == pytest.approx([2 * (1 - 0.25), 2 * (1 - 0.125), 2 * 1.0])


def roll_reward(worker: str, **keys) -> dict:
    return {"worker_cls": f"roll.pipeline.rlvr.rewards.x.{worker}", **keys}


def test_roll_rule_workers_convert(tmp_path):
    import yaml

    from flywheel.interop.roll.convert import convert_roll
    from flywheel.pipelines.config import CATALOGS

    path = tmp_path / "roll.yaml"
    path.write_text(yaml.safe_dump({"adv_estimator": "grpo", "rewards": {
        "crossthinkqa": roll_reward("CrossThinkQARuleRewardWorker", reward_type="strict",
                                    response_length_penalty_coef=0.1,
                                    tag_included=["crossthinkqa"]),
        "ifeval": roll_reward("GeneralRuleRewardWorker", reward_type="soft",
                              response_length_penalty_coef=0.3, tag_included=["ifeval"]),
        "math": roll_reward("MathRuleRewardWorker", format_pattern="^<think>.*$",
                            tag_included=["math"]),
    }}))
    out = convert_roll(path, CATALOGS)
    assert not out.missing, out.missing
    rewards = out.data["rewards"]
    assert rewards["crossthinkqa"]["reward_type"] == "multiple_choice"
    assert rewards["crossthinkqa"]["reward_args"] == {"scoring": "strict"}
    assert rewards["crossthinkqa"]["response_length_penalty_coef"] == 0.1
    assert rewards["ifeval"]["reward_type"] == "ifeval"
    assert "response_length_penalty_coef" not in rewards["ifeval"]
    assert "reward_args" not in rewards["ifeval"]
    assert rewards["math"]["format_pattern"] == "^<think>.*$"
    report = "\n".join(out.dropped + out.mapped)
    assert "rewards.ifeval.reward_type: ROLL's GeneralRuleRewardWorker does not read it" in report
    assert "rewards.ifeval.response_length_penalty_coef: ROLL's GeneralRuleRewardWorker" in report
    assert "leaves it out of the score" in report
