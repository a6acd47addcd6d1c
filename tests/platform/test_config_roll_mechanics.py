"""ROLL's file mechanics load natively; `platform convert --from roll` maps the rest.

Each fixture under tests/data/configs/roll/mechanics/ exhibits one or more mechanisms of
the files ROLL ships (the whole-ROLL figures come from bench/roll_check.py)."""

import time
from pathlib import Path

import pytest
import yaml

from flywheel import cli
from flywheel.config import config_to_dict
from flywheel.pipelines.config import convert_roll, load_config, load_config_dict
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.resolvers import ResolverContext

MECHANICS = Path(__file__).parents[1] / "data" / "configs" / "roll" / "mechanics"
FROZEN_LAKE = MECHANICS / "agentic" / "frozen_lake.yaml"
ROLL_RLVR = MECHANICS / "roll_rlvr.yaml"
FIXED_TIME = time.struct_time((2026, 1, 2, 3, 4, 5, 4, 2, 0))


def test_roll_mechanics_load_natively():
    context = ResolverContext(environ={}, now=FIXED_TIME)
    cfg = load_config(FROZEN_LAKE, context=context)
    assert cfg.exp_name == "frozen_lake_20260102"  # ${now:...}
    assert cfg.output_dir == "runs/roll_mechanics"  # ${oc.env:...,default}, variable unset
    env = cfg.custom_envs["FrozenLake"]  # a whole tree from the @_here_ fragment
    assert env.max_steps == 6  # through the helper max_actions_per_traj
    assert env.env_config["grid_lookup"] == {0: "F", 1: "H"}  # integer keys kept
    assert "max_actions_per_traj" not in config_to_dict(cfg)  # helpers dropped


def test_oc_env_reads_the_variable_and_now_is_one_instant():
    context = ResolverContext(environ={"FLYWHEEL_TEST_ROLL_OUT": "/tmp/out"}, now=FIXED_TIME)
    cfg = load_config(FROZEN_LAKE, context=context)
    assert cfg.output_dir == "/tmp/out"


def test_unset_variable_without_default_names_the_key():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"exp_name": "${oc.env:FLYWHEEL_SURELY_UNSET}"}, source="c.yaml")
    assert str(info.value).startswith("c.yaml: exp_name: ${oc.env:FLYWHEEL_SURELY_UNSET}: "
                                      "environment variable FLYWHEEL_SURELY_UNSET is not set")


def test_resolved_values_survive_in_the_recorded_config(tmp_path):
    """The run's config.yaml is config_to_dict of the loaded config: loading it back (as a
    resumed run does) gives the same values, not a new time."""
    cfg = load_config(FROZEN_LAKE, context=ResolverContext(environ={}, now=FIXED_TIME))
    recorded = tmp_path / "config.yaml"
    recorded.write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
    assert load_config(recorded) == cfg


def test_unreferenced_unknown_top_level_key_is_still_an_error():
    with pytest.raises(ConfigError, match="unknown key 'max_step'"):
        load_config_dict({"max_step": 3})


def test_helper_can_be_overridden(tmp_path):
    cfg = load_config(FROZEN_LAKE, ["max_actions_per_traj=4"])
    assert cfg.custom_envs["FrozenLake"].max_steps == 4


@pytest.mark.parametrize("entry, message", [
    ("../fragments/envs@pkg", "only '@_here_' placement is supported"),
    ("../fragments/nothere@_here_", "default file '../fragments/nothere@_here_' not found"),
])
def test_bad_defaults_entries(tmp_path, entry, message):
    (tmp_path / "fragments").mkdir()
    (tmp_path / "fragments" / "envs.yaml").write_text("seed: 1\n")
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "main.yaml"
    path.write_text(f"defaults:\n  - {entry}\nmax_steps: 2\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_strict_loader_suggests_convert_for_a_roll_file():
    with pytest.raises(ConfigError) as info:
        load_config(ROLL_RLVR)
    assert "platform convert --from roll" in str(info.value)


def test_convert_maps_roll_names_and_reports_what_roll_ignored():
    conversion = convert_roll(ROLL_RLVR)
    assert conversion.missing == []
    assert set(conversion.ignored) == {"dataset_dir", "actor_train.model_args.flash_attn",
                                       "validation.eval_steps"}
    cfg = load_config_dict(conversion.data)
    assert cfg.actor_train.loss_agg_mode == "token-mean"
    assert cfg.actor_train.training_args.max_grad_norm == 0.5
    assert cfg.actor_train.data_args.file_name == ["builtin://arithmetic/train"]
    assert cfg.resume_from_checkpoint is None
    assert cfg.rewards["math_rule"].reward_type == "math_rule"
    assert any(d.startswith("system_envs:") for d in conversion.dropped)


def test_convert_refuses_a_config_that_needs_a_missing_feature(tmp_path, capsys):
    source = tmp_path / "error_max_len_clip.yaml"
    source.write_text(ROLL_RLVR.read_text() + "error_max_len_clip: true\n")
    out = tmp_path / "out.yaml"
    assert cli.main(["convert", "--from", "roll", str(source), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert "error_max_len_clip (error_max_len_clip = True)" in captured.out
    assert captured.err.count("\n") == 1 and "not converted" in captured.err
    assert not out.exists()


def test_convert_cli_writes_a_config_that_validates(tmp_path, capsys):
    out = tmp_path / "out.yaml"
    assert cli.main(["convert", "--from", "roll", str(ROLL_RLVR), "-o", str(out)]) == 0
    assert "ROLL ignores these keys too" in capsys.readouterr().out
    assert cli.main(["validate", "--config", str(out)]) == 0


@pytest.mark.parametrize("block,expected", [
    ("rollout_mock: {enable: true, mode: dump, dump_dir: ./dumps/v1}\n",
     {"mode": "dump", "dump_dir": "./dumps/v1"}),
    ("rollout_mock: {enable: false, mode: mock, dump_dir: ./dumps/v1}\n", None),
])
def test_rollout_mock_converts_without_its_switch(tmp_path, block, expected):
    source = tmp_path / "mock.yaml"
    source.write_text(ROLL_RLVR.read_text() + block)
    conversion = convert_roll(source)
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    got = cfg.rollout_mock
    assert (None if got is None else {"mode": got.mode, "dump_dir": got.dump_dir}) == expected
