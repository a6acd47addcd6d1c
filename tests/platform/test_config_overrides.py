"""Command-line overrides: YAML-typed values, paths checked against the schema."""

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.overrides import parse_override


@pytest.mark.parametrize("text, path, value", [
    ("max_steps=20", ("max_steps",), 20),
    ("actor_train.training_args.learning_rate=1e-5", ("actor_train", "training_args",
                                                      "learning_rate"), 1e-5),
    ("x=1E3", ("x",), 1000.0),
    ("x=-2.5e-3", ("x",), -2.5e-3),
    ("x=1.0e-6", ("x",), 1e-6),
    ("x='1e-5'", ("x",), "1e-5"),  # quoted: stays a string
    ("x=true", ("x",), True),
    ("x=null", ("x",), None),
    ("x=", ("x",), None),
    ("x=[0, 1]", ("x",), [0, 1]),
    ("x={a: 1}", ("x",), {"a": 1}),
    ("x=list(range(0,4))", ("x",), "list(range(0,4))"),
    ("x=a=b", ("x",), "a=b"),
])
def test_values_are_read_as_yaml(text, path, value):
    parsed_path, parsed = parse_override(text)
    assert parsed_path == path
    assert parsed == value and type(parsed) is type(value)


def test_overrides_apply_to_typed_fields():
    cfg = load_config_dict({"max_steps": 5}, overrides=[
        "max_steps=20",
        "actor_train.training_args.learning_rate=1e-5",
        "actor_train.device_mapping=list(range(0,2))",
        "adv_estimator=reinforce",
        "pipeline_type=agentic",
    ])
    assert cfg.max_steps == 20
    assert cfg.actor_train.training_args.learning_rate == 1e-5
    assert cfg.actor_train.device_mapping == [0, 1]
    assert cfg.adv_estimator == "reinforce"
    assert cfg.pipeline_type == "agentic"


def test_later_override_wins():
    assert load_config_dict({}, overrides=["seed=1", "seed=2"]).seed == 2


def test_null_sets_none_and_removes_an_optional_block():
    cfg = load_config_dict({"output_dir": "out", "critic": {"name": "c"}},
                           overrides=["output_dir=null", "critic=null"])
    assert cfg.output_dir is None and cfg.critic is None


def test_override_creates_an_absent_block():
    cfg = load_config_dict({"reference": None, "use_kl_loss": True, "kl_loss_coef": 0.1},
                           overrides=["reference.device_mapping=[2]"])
    assert cfg.reference.device_mapping == [2]


def test_override_creates_keys_in_free_form_mappings():
    cfg = load_config_dict({}, overrides=[
        "actor_infer.strategy_args.strategy_name=vllm",  # its keys: checked where it runs
        "actor_infer.strategy_args.strategy_config.max_num_seqs=3",
        "actor_infer.strategy_args.strategy_config.compilation_config.level=0",
        "rewards.code.reward_type=math_rule",
    ])
    assert cfg.actor_infer.strategy_args.strategy_config == {"max_num_seqs": 3,
                                                             "compilation_config": {"level": 0}}
    # A rewards block written anywhere (file or command line) replaces the default one.
    assert set(cfg.rewards) == {"code"}


def test_unknown_key_is_a_strict_error_naming_the_command_line():
    with pytest.raises(ConfigError) as info:
        load_config_dict({}, overrides=["actor_train.training_args.learnig_rate=1e-5"])
    error = info.value
    assert error.file == "command line"
    assert error.key_path == "actor_train.training_args.learnig_rate"
    assert "did you mean 'learning_rate'" in error.message
    assert "actor_train.training_args.learnig_rate=1e-5" in error.message


def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        load_config_dict({}, overrides=["max_step=3"])


def test_cannot_descend_into_a_scalar():
    with pytest.raises(ConfigError, match="'max_steps' is int, it has no keys"):
        load_config_dict({}, overrides=["max_steps.value=3"])


def test_wrong_type_from_an_override_names_the_command_line():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"max_steps": 3}, source="f.yaml", overrides=["max_steps=many"])
    assert str(info.value) == "command line: max_steps: expected int, got str 'many'"


def test_file_keys_not_overridden_keep_naming_the_file():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"seed": "x"}, source="f.yaml", overrides=["max_steps=3"])
    assert info.value.file == "f.yaml"


@pytest.mark.parametrize("text, message", [
    ("max_steps", "is not key.path=value"),
    ("=3", "is not key.path=value"),
    ("a..b=3", "is not a dotted key path"),
    ("defaults=[x.yaml]", "defaults can only be listed in a config file"),
    ("seed=[1", "cannot read the value"),
])
def test_malformed_overrides(text, message):
    with pytest.raises(ConfigError, match=message):
        load_config_dict({}, overrides=[text])
