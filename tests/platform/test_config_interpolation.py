"""`${key.path}` references: typed, embedded, chained, and their errors."""

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError


def test_whole_value_reference_keeps_the_type():
    cfg = load_config_dict({
        "num_return_sequences_in_group": 4,
        "actor_infer": {"generating_args": {"num_return_sequences":
                                            "${num_return_sequences_in_group}"}},
    })
    assert cfg.actor_infer.generating_args.num_return_sequences == 4
    assert isinstance(cfg.actor_infer.generating_args.num_return_sequences, int)


def test_reference_to_a_mapping_copies_it():
    cfg = load_config_dict({
        "actor_train": {"strategy_args": {"strategy_name": "deepspeed_train",
                                          "strategy_config": {"zero_stage": 1}}},
        "reference": {"strategy_args": "${actor_train.strategy_args}"},
        "use_kl_loss": True, "kl_loss_coef": 0.1,
    })
    assert cfg.reference.strategy_args == cfg.actor_train.strategy_args
    cfg.reference.strategy_args.strategy_config["zero_stage"] = 2  # a copy, not the same dict
    assert cfg.actor_train.strategy_args.strategy_config == {"zero_stage": 1}


def test_embedded_reference_is_stringified_in_yaml_spelling():
    cfg = load_config_dict({"exp_name": "lr${actor_train.training_args.learning_rate}"
                                        "-async${partial_rollout}-seed${seed}",
                            "actor_train": {"training_args": {"learning_rate": 3.0e-4}}})
    assert cfg.exp_name == "lr0.0003-asyncfalse-seed42"


def test_chained_references_resolve():
    cfg = load_config_dict({
        "prompt_length": 64,
        "response_length": "${prompt_length}",
        "actor_infer": {"generating_args": {"max_new_tokens": "${response_length}"}},
    })
    assert cfg.response_length == 64
    assert cfg.actor_infer.generating_args.max_new_tokens == 64


def test_reference_to_an_unset_key_takes_the_schema_default():
    cfg = load_config_dict({"actor_infer": {"generating_args": {
        "max_new_tokens": "${response_length}"}}})
    assert cfg.actor_infer.generating_args.max_new_tokens == 128  # schema default


def test_reference_into_a_user_named_block_uses_that_blocks_defaults():
    cfg = load_config_dict({"rewards": {"code": {"reward_type": "math_rule"}},
                            "seed": "${rewards.code.world_size}"})
    assert cfg.seed == 1


def test_reference_into_a_list_by_index():
    cfg = load_config_dict({"actor_train": {"device_mapping": [3, 4]},
                            "seed": "${actor_train.device_mapping[1]}"})
    assert cfg.seed == 4


def test_overrides_are_merged_before_resolution():
    cfg = load_config_dict({"actor_infer": {"generating_args": {
        "max_new_tokens": "${response_length}"}}}, overrides=["response_length=7"])
    assert cfg.actor_infer.generating_args.max_new_tokens == 7


def test_cycle_names_the_key_and_the_chain():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"prompt_length": "${response_length}",
                          "response_length": "${prompt_length}"}, source="c.yaml")
    assert str(info.value) == (
        "c.yaml: response_length: ${prompt_length} is part of a reference cycle: "
        "prompt_length -> response_length -> prompt_length")


def test_self_reference_through_a_parent_is_a_cycle():
    with pytest.raises(ConfigError, match="reference cycle"):
        load_config_dict({"actor_train": {"name": "${actor_train}"}})


def test_missing_key_names_the_reference_and_suggests():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"actor_infer": {"generating_args": {
            "max_new_tokens": "${response_lenght}"}}}, source="c.yaml")
    error = info.value
    assert error.file == "c.yaml"
    assert error.key_path == "actor_infer.generating_args.max_new_tokens"
    assert "${response_lenght}" in error.message
    assert "did you mean 'response_length'" in error.message


def test_missing_key_inside_a_free_form_mapping():
    with pytest.raises(ConfigError, match="refers to 'actor_train.strategy_args.strategy_config"
                                          r"\.tp', which is not set"):
        load_config_dict({"seed": "${actor_train.strategy_args.strategy_config.tp}"})


@pytest.mark.parametrize("text, message", [
    ("${eval:1+1}", "unknown resolver 'eval'"),
    ("${a b}", "is not a key path"),
    ("${}", "is not a key path"),
    ("x-${seed", "a '${' without its '}'"),
])
def test_malformed_references(text, message):
    with pytest.raises(ConfigError, match=message.replace("$", r"\$").replace("{", r"\{")):
        load_config_dict({"exp_name": text})


def test_a_mapping_cannot_be_embedded_in_a_string():
    with pytest.raises(ConfigError, match="is a mapping and cannot be part of a longer string"):
        load_config_dict({"exp_name": "x-${actor_train.model_args}"})


def test_resolved_value_is_type_checked_at_the_referring_key():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"exp_name": "${seed}"}, source="c.yaml")
    assert str(info.value) == "c.yaml: exp_name: expected str, got int 42"
