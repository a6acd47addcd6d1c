"""Strict conversion: unknown keys, wrong types, Literals, and the float rule."""

import pytest

from flywheel.config import config_to_dict
from flywheel.config.schema import ActorTrainConfig, PipelineConfig
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError


def error_for(data):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data, source="f.yaml")
    return info.value


def test_defaults_alone_load():
    assert load_config_dict({}) == PipelineConfig()


def test_unknown_top_level_key_suggests():
    error = error_for({"max_step": 3})
    assert (error.file, error.key_path) == ("f.yaml", "max_step")
    assert "unknown key 'max_step' (did you mean 'max_steps'" in error.message


def test_unknown_nested_key_suggests_with_full_path():
    error = error_for({"actor_train": {"training_args": {"learnig_rate": 1e-5}}})
    assert str(error) == ("f.yaml: actor_train.training_args.learnig_rate: unknown key "
                          "'learnig_rate' (did you mean 'learning_rate'?)")


def test_unknown_key_in_a_named_reward_keeps_the_name_in_the_path():
    error = error_for({"rewards": {"math": {"reward_typ": "math_rule"}}})
    assert error.key_path == "rewards.math.reward_typ"
    assert "did you mean 'reward_type'" in error.message


def test_unknown_key_without_a_close_match_lists_small_blocks():
    error = error_for({"actor_train": {"strategy_args": {"backend": "x"}}})
    assert "valid keys: strategy_name, strategy_config" in error.message


def test_unknown_key_is_reported_before_references_resolve():
    error = error_for({"max_step": "${nothing}"})
    assert "unknown key 'max_step'" in error.message


@pytest.mark.parametrize("data, key_path, message", [
    ({"max_steps": "abc"}, "max_steps", "expected int, got str 'abc'"),
    ({"max_steps": True}, "max_steps", "expected int, got bool true"),
    ({"max_steps": 2.0}, "max_steps", "expected int, got float 2.0"),
    ({"max_steps": None}, "max_steps", "expected int, got null"),
    ({"exp_name": 7}, "exp_name", "expected str, got int 7"),
    ({"partial_rollout": "yes please"}, "partial_rollout", "expected bool, got str"),
    ({"reward_clip": "big"}, "reward_clip", "expected float or null, got str 'big'"),
    ({"gamma": False}, "gamma", "expected float, got bool false"),
    ({"actor_train": []}, "actor_train", "expected a mapping of ActorTrainConfig keys"),
    ({"rewards": ["math_rule"]}, "rewards", ("expected a mapping of str to a mapping of "
                                             "RewardConfig keys")),
    ({"actor_train": {"data_args": {"file_name": 7}}}, "actor_train.data_args.file_name",
     "expected a list of str, got int 7"),
    ({"actor_train": {"data_args": {"file_name": ["a", 3]}}},
     "actor_train.data_args.file_name[1]", "expected str, got int 3"),
    ({"actor_train": {"strategy_args": {"strategy_config": [1]}}},
     "actor_train.strategy_args.strategy_config", "expected a mapping of str to any value"),
])
def test_wrong_types_name_the_expected_type(data, key_path, message):
    error = error_for(data)
    assert error.key_path == key_path
    assert message in error.message


@pytest.mark.parametrize("data, key_path, allowed", [
    ({"actor_train": {"loss_agg_mode": "mean"}}, "actor_train.loss_agg_mode",
     "'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum', 'seq-mean-token-sum-norm'"),
    ({"actor_train": {"model_args": {"dtype": "float16"}}}, "actor_train.model_args.dtype",
     "'fp32', 'bf16', 'fp16'"),
])
def test_literal_violation_lists_allowed_values(data, key_path, allowed):
    error = error_for(data)
    assert error.key_path == key_path
    assert f"expected one of {allowed}" in error.message


def test_literal_suggests_close_value():
    assert "(did you mean 'grpo'?)" in error_for({"adv_estimator": "grp"}).message


@pytest.mark.parametrize("written, value", [
    (1, 1.0), (0, 0.0), ("1e-5", 1e-5), ("1E-5", 1e-5), ("-3e2", -300.0), (" 2.5 ", 2.5),
    (1.0e-6, 1e-6),
])
def test_float_fields_take_ints_and_float_text(written, value):
    cfg = load_config_dict({"actor_train": {"training_args": {"learning_rate": written}}})
    learning_rate = cfg.actor_train.training_args.learning_rate
    assert learning_rate == value and type(learning_rate) is float


@pytest.mark.parametrize("written", ["1e-5x", "fast", "0x10", "1_000", "inf", ""])
def test_float_fields_reject_other_text(written):
    error = error_for({"actor_train": {"training_args": {"learning_rate": written}}})
    assert "expected float, got str" in error.message


def test_strings_that_look_like_numbers_stay_strings_in_str_fields():
    assert load_config_dict({"exp_name": "1e-5"}).exp_name == "1e-5"


def test_roles_are_their_schema_classes():
    cfg = load_config_dict({"actor_train": {"pg_variant": "tis"}, "critic": {},
                            "adv_estimator": "gae"})
    assert isinstance(cfg.actor_train, ActorTrainConfig)
    assert cfg.actor_train.pg_variant == "tis"
    assert cfg.critic is not None and cfg.reference is None


def test_actor_infer_block_without_strategy_keeps_hf_infer():
    cfg = load_config_dict({"actor_infer": {"device_mapping": [1]}})
    assert cfg.actor_infer.strategy_args.strategy_name == "hf_infer"


def test_config_to_dict_round_trips():
    cfg = load_config_dict({"max_steps": 3, "critic": {"device_mapping": "[1]"},
                            "adv_estimator": "gae",
                            "rewards": {"a": {}, "b": {"tag_included": ["x"]}}})
    data = config_to_dict(cfg)
    assert data["adv_estimator"] == "gae" and type(data["adv_estimator"]) is str
    assert load_config_dict(data) == cfg


def test_input_data_is_not_modified():
    data = {"actor_train": {"device_mapping": "list(range(0,2))",
                            "training_args": {"learning_rate": "1e-5"}}}
    load_config_dict(data, overrides=["actor_train.training_args.weight_decay=0.5"])
    assert data == {"actor_train": {"device_mapping": "list(range(0,2))",
                                    "training_args": {"learning_rate": "1e-5"}}}


def test_load_config_dict_rejects_defaults():
    with pytest.raises(ConfigError, match="defaults: needs a file"):
        load_config_dict({"defaults": ["base.yaml"]})
