"""`defaults:` composition: order, nesting, relative paths, and the errors."""

from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config
from flywheel.platform.config.errors import ConfigError

CONFIGS = Path(__file__).parents[1] / "data" / "configs" / "defaults"


def test_defaults_merge_in_order_with_the_file_on_top():
    cfg = load_config(CONFIGS / "top.yaml")
    assert cfg.exp_name == "top"  # the file itself wins
    assert cfg.max_steps == 50  # middle.yaml over base.yaml
    assert cfg.actor_train.training_args.learning_rate == 1.0e-4  # middle over base, deep
    assert cfg.actor_train.training_args.weight_decay == 0.1  # base, untouched by middle
    assert cfg.actor_train.device_mapping == [2]  # lists replace, never append
    assert cfg.seed == 7  # sub/extra.yaml's own default (../seed.yaml)
    assert cfg.save_steps == 5  # sub/extra.yaml over its default


def test_a_default_with_its_own_defaults_is_composed_first():
    cfg = load_config(CONFIGS / "middle.yaml")
    assert (cfg.exp_name, cfg.max_steps, cfg.seed) == ("middle", 50, 1)


def test_default_paths_are_relative_to_the_file_that_names_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the working directory plays no part
    cfg = load_config(CONFIGS / "sub" / "extra.yaml")
    assert (cfg.seed, cfg.save_steps) == (7, 5)


def test_missing_default_names_the_referencing_file():
    with pytest.raises(ConfigError) as info:
        load_config(CONFIGS / "missing_default.yaml")
    assert info.value.file.endswith("missing_default.yaml")
    assert info.value.key_path == "defaults[1]"
    assert "default file 'does_not_exist.yaml' not found" in info.value.message


def test_cycle_in_defaults_is_an_error():
    with pytest.raises(ConfigError, match="cycle: cycle_a.yaml -> cycle_b.yaml -> cycle_a.yaml"):
        load_config(CONFIGS / "cycle_a.yaml")


def test_error_in_a_default_names_the_default_file():
    with pytest.raises(ConfigError) as info:
        load_config(CONFIGS / "includes_bad.yaml")
    assert info.value.file.endswith("bad_type_in_base.yaml")
    assert str(info.value).endswith("max_steps: expected int, got str 'many'")


def test_missing_config_file():
    with pytest.raises(ConfigError, match="nope.yaml: file not found"):
        load_config(CONFIGS / "nope.yaml")


def test_yaml_aliases_become_independent_copies(tmp_path):
    path = tmp_path / "alias.yaml"
    path.write_text("adv_estimator: gae\n"
                    "actor_train:\n  training_args: &args {learning_rate: 0.5}\n"
                    "critic:\n  training_args: *args\n")
    cfg = load_config(path, ["critic.training_args.learning_rate=0.25"])
    assert cfg.actor_train.training_args.learning_rate == 0.5
    assert cfg.critic.training_args.learning_rate == 0.25


def test_recursive_alias_is_an_error_not_a_hang(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("actor_train:\n  strategy_args:\n    strategy_config: &a {x: *a}\n")
    with pytest.raises(ConfigError, match="recursive YAML alias"):
        load_config(path)


def test_empty_file_is_an_error_not_all_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="empty config file"):
        load_config(path)


def test_an_empty_defaults_fragment_is_an_empty_mapping(tmp_path):
    # Hydra and ROLL read an empty fragment so (ROLL's examples/config/envs.yaml)
    (tmp_path / "envs.yaml").write_text("# nothing yet\n")
    path = tmp_path / "run.yaml"
    path.write_text("defaults:\n  - envs@_here_\nmax_steps: 3\n")
    assert load_config(path).max_steps == 3


def test_self_in_defaults_places_the_files_own_keys(tmp_path):
    (tmp_path / "base.yaml").write_text("max_steps: 5\nseed: 1\n")
    path = tmp_path / "run.yaml"
    path.write_text("defaults:\n  - _self_\n  - base\nmax_steps: 3\nsave_steps: 2\n")
    cfg = load_config(path)  # base merges on top of the file's own keys, as in Hydra
    assert (cfg.max_steps, cfg.seed, cfg.save_steps) == (5, 1, 2)
    path.write_text("defaults:\n  - base\n  - _self_\nmax_steps: 3\n")
    assert load_config(path).max_steps == 3
