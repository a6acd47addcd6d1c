"""ROLL's LLM judge, its rule rewards' model_args and its critic's model_type, converted
(interop/roll/fit/judge.py, interop/roll/convert.py): what the files of ROLL's RLVR examples
write, and what a converted file then judges with."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flywheel.interop.roll.fit.judge import RLVR_MATCH_PROMPT
from flywheel.pipelines.config import convert_roll, load_config_dict

JUDGE = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"
MATH = "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker"
# as ROLL's qwen2.5-7B-rlvr_megatron/rlvr_config.yaml writes its judge
ROLL_JUDGE = {
    "worker_cls": JUDGE, "judge_prompt": "Qwen2.5-7B-Instruct-RLVR-prompt",
    "judge_model_type": "inference", "tag_included": ["RLVR"],
    "model_args": {"model_name_or_path": "virtuoussy/Qwen2.5-7B-Instruct-RLVR",
                   "dtype": "bf16", "model_type": "trl"},
    "generating_args": {"max_new_tokens": 100, "top_p": 0.8, "top_k": 50, "num_beams": 1,
                        "temperature": 0.8, "num_return_sequences": 1},
    "strategy_args": {"strategy_name": "hf_infer", "strategy_config": None},
    "device_mapping": "list(range(1,2))",
}


def convert(tmp_path: Path, data: dict):
    path = tmp_path / "roll.yaml"
    path.write_text(yaml.safe_dump({"adv_estimator": "grpo", **data}))
    out = convert_roll(path)
    return out, "\n".join(out.mapped + out.dropped)


def test_a_named_judge_prompt_is_carried_over_and_the_value_head_dropped(tmp_path):
    out, report = convert(tmp_path, {"rewards": {"llm_judge": ROLL_JUDGE}})
    assert out.missing == []
    judge = load_config_dict(out.data).rewards["llm_judge"]
    assert judge.reward_type == "llm_judge"
    assert judge.llm_judge.prompt_template == RLVR_MATCH_PROMPT
    assert (judge.llm_judge.score_parser, judge.llm_judge.max_new_tokens) == ("yes_no", 100)
    assert judge.llm_judge.backend == "local"
    assert judge.model_args.model_name_or_path == "virtuoussy/Qwen2.5-7B-Instruct-RLVR"
    assert "model_args.model_type: trl: a judge generates" in report
    assert "flywheel's judge decodes greedily" in report


@pytest.mark.parametrize("prompt", ["my-prompt", None])
def test_a_judge_without_a_prompt_of_rolls_table_is_refused(tmp_path, prompt):
    """ROLL judges it with its default 0-10 prompt, which flywheel's judge does not have."""
    judge = {k: v for k, v in ROLL_JUDGE.items() if k != "judge_prompt"}
    out, _ = convert(tmp_path, {"rewards": {"llm_judge": {
        **judge, **({"judge_prompt": prompt} if prompt else {})}}})
    assert [m for m in out.missing if m.startswith("ROLL's default 0-10 judge prompt "
                                                   f"(rewards.llm_judge.judge_prompt = "
                                                   f"{prompt!r}")], out.missing


def test_an_api_judge_becomes_an_endpoint_and_its_key_stays_out_of_the_file(tmp_path):
    api = {k: v for k, v in ROLL_JUDGE.items()
           if k not in ("model_args", "strategy_args", "device_mapping")}
    out, report = convert(tmp_path, {"rewards": {"llm_judge": {
        **api, "judge_model_type": "api", "judge_api_url": "http://judge:8000/v1",
        "judge_model_name": "qwen-judge", "judge_api_key": "sk-secret"}}})
    assert out.missing == []
    judge = load_config_dict(out.data).rewards["llm_judge"].llm_judge
    assert (judge.backend, judge.base_url, judge.model) == (
        "endpoint", "http://judge:8000/v1", "qwen-judge")
    assert "sk-secret" not in yaml.safe_dump(out.data)
    assert "name that variable in rewards.llm_judge.llm_judge.api_key_env" in report


def test_a_classifier_judge_is_not_converted(tmp_path):
    out, _ = convert(tmp_path, {"rewards": {"llm_judge": {
        **ROLL_JUDGE, "model_args": {"model_type": "auto_sequence_classification"}}}})
    assert any("a reward model with a auto_sequence_classification head" in m
               for m in out.missing)


def test_a_rule_reward_s_tokenizer_model_and_a_trl_critic_are_dropped(tmp_path):
    out, report = convert(tmp_path, {
        "adv_estimator": "gae",
        "rewards": {"math_rule": {"worker_cls": MATH,
                                  "model_args": {"model_name_or_path": "Qwen/Qwen2.5-7B"}}},
        "critic": {"model_args": {"model_type": "trl"},
                   "strategy_args": {"strategy_name": "hf_train"}}})
    assert out.missing == []
    cfg = load_config_dict(out.data)
    assert cfg.rewards["math_rule"].model_args.model_name_or_path is None
    assert cfg.critic is not None
    assert "rewards.math_rule.model_args: ROLL's MathRuleRewardWorker loads only a tokenizer" \
        in report
    assert "critic.model_args.model_type: trl: flywheel's critic is a value head" in report


def test_a_judge_served_by_the_reward_model_role_loads_that_model_itself(tmp_path):
    """judge_model_type: cluster queries the model ROLL serves on its `reward_model` role
    (as ROLL's llm-as-judge server example writes it): that model, backend and devices
    become the judge's own."""
    served = {"name": "reward_llm", "worker_cls": "roll.pipeline.base_worker.InferWorker",
              "model_args": {"model_name_or_path": "Qwen/Qwen2.5-7B", "dtype": "bf16"},
              "generating_args": {"max_new_tokens": 512, "temperature": 0.3},
              "strategy_args": {"strategy_name": "vllm",
                                "strategy_config": {"gpu_memory_utilization": 0.85}},
              "device_mapping": "[6, 7]"}
    client = {**{k: v for k, v in ROLL_JUDGE.items() if k not in ("strategy_args",
                                                                  "device_mapping")},
              "judge_model_type": "cluster", "world_size": 32,
              "model_args": {"model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"}}
    out, report = convert(tmp_path, {"rewards": {"llm_judge": client}, "reward_model": served})
    assert out.missing == []
    judge = load_config_dict(out.data).rewards["llm_judge"]
    assert judge.model_args.model_name_or_path == "Qwen/Qwen2.5-7B"
    assert judge.strategy_args.strategy_name == "vllm"
    assert judge.device_mapping == [6, 7]
    assert (judge.llm_judge.backend, judge.llm_judge.max_new_tokens) == ("local", 512)
    assert "reward_model" not in out.data
    assert "rewards.llm_judge.world_size: ROLL's count of client workers" in report
