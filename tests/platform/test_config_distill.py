"""On-policy distillation's config (schema/distill.py, checks/distill.py, its acts-when rows):
a teacher block loads, and each refusal names its key and why."""

import pytest

from flywheel.config.derived import roles
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError


def teacher(**extra):
    return {"model_args": {"model_name_or_path": "builtin://tiny-qwen2"},
            "device_mapping": [1], **extra}


def error_for(data):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data, source="f.yaml")
    return info.value


def test_teachers_load_with_their_coefficients_tags_and_devices():
    cfg = load_config_dict({"teacher": {"math": teacher(opd_kl_coef=0.5,
                                                        tag_included=["math"]),
                                        "rest": teacher(device_mapping=[2])},
                            "opd_mode": "mixed", "opd_gamma": 0.9})
    assert cfg.teacher["math"].opd_kl_coef == 0.5
    assert cfg.teacher["math"].tag_included == ["math"]
    assert cfg.teacher["rest"].device_mapping == [2]
    assert (cfg.opd_mode, cfg.opd_gamma) == ("mixed", 0.9)
    assert [(r.key_path, r.kind) for r in roles(cfg)][-2:] == [
        ("teacher.math", "reference"), ("teacher.rest", "reference")]


def test_a_teacher_on_a_generation_backend_is_refused():
    error = error_for({"teacher": {"t": teacher(strategy_args={"strategy_name": "vllm"})}})
    assert error.key_path == "teacher.t.strategy_args.strategy_name"
    assert "'vllm' is a generation backend; a teacher scores the student's tokens" in (
        error.message)
    assert "hf_train" in error.message


def test_a_teacher_on_a_kind_that_does_not_read_one_is_refused():
    error = error_for({"pipeline_type": "sft", "teacher": {"t": teacher()},
                       "actor_train": {"data_args": {"file_name": "f.jsonl"}}})
    assert error.key_path == "teacher"
    assert "SFT does not use it" in error.message and "remove it" in error.message
    assert load_config_dict({"pipeline_type": "agentic", "teacher": {}}).teacher == {}


def test_a_domain_no_teacher_takes_is_refused():
    data = {"teacher": {"m": teacher(tag_included=["math"])},
            "actor_train": {"data_args": {"domain_interleave_probs": {"math": 0.5,
                                                                      "code": 0.5}}}}
    error = error_for(data)
    assert error.key_path == "teacher"
    assert "no teacher takes tag(s) code" in error.message
    data["teacher"]["all"] = teacher()  # an empty tag_included takes every tag
    load_config_dict(data)


def test_a_domain_named_by_a_reward_is_its_tags():
    """ROLL's multi-teacher example keys the mix by reward (math_rule), whose tag_included
    (math_dapo) is what a teacher routes by."""
    data = {"teacher": {"m": teacher(tag_included=["math_dapo"])},
            "rewards": {"math_rule": {"reward_type": "math_rule", "tag_included": ["math_dapo"]},
                        "code": {"reward_type": "math_rule", "tag_included": ["KodCode"]}},
            "actor_train": {"data_args": {"domain_interleave_probs": {"math_rule": 0.5,
                                                                      "code": 0.5}}}}
    error = error_for(data)
    assert "no teacher takes tag(s) KodCode" in error.message
    data["teacher"]["c"] = teacher(tag_included=["KodCode"])
    load_config_dict(data)


def test_opd_keys_without_a_teacher_are_refused():
    for key, value in (("opd_mode", "mixed"), ("opd_gamma", 0.5)):
        error = error_for({key: value})
        assert error.key_path == key
        assert "acts only with a teacher: block" in error.message


def test_a_teachers_training_and_sampling_keys_are_refused():
    error = error_for({"teacher": {"t": teacher(training_args={"learning_rate": 1e-5})}})
    assert error.key_path == "teacher.t.training_args"
    assert "a teacher never trains" in error.message
    error = error_for({"teacher": {"t": teacher(model_args={"lora_target": "all"})}})
    assert error.key_path == "teacher.t.model_args.lora_target"


def test_bounds_name_and_pure_mode_critic():
    assert error_for({"teacher": {"t": teacher(opd_kl_coef=-1.0)}}).key_path == (
        "teacher.t.opd_kl_coef")
    assert error_for({"teacher": {"t": teacher()}, "opd_gamma": 1.5}).key_path == "opd_gamma"
    assert "metric names" in error_for({"teacher": {"a/b": teacher()}}).message
    error = error_for({"teacher": {"t": teacher()}, "adv_estimator": "gae",
                       "critic": {"device_mapping": [0]}})
    assert error.key_path == "critic"
    assert "opd_mode pure takes the advantage from the teachers alone" in error.message
