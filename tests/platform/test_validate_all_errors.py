"""`platform validate` reports every error of a file at once (issue 44 item 5), and on a
file that looks like ROLL's says, whatever the error, that `platform convert --from roll`
writes a file that validates (issue 44 item 5, issue 52 item 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flywheel import cli
from flywheel.pipelines.config import config_errors, load_config
from flywheel.platform.config.errors import ConfigError

ROLL_RLVR = (Path(__file__).parents[1] / "data" / "configs" / "roll" / "mechanics"
             / "roll_rlvr.yaml")
THREE_ERRORS = """\
pipeline_type: rlvr
pretrain: builtin://tiny-qwen2-arith
max_stpes: 3
rollout_batch_size: 8
async_generation_ratio: -1
use_kl_loss: true
actor_train:
  training_args: {learning_rate: 1.0e-4, per_device_train_batch_size: 8}
  data_args: {file_name: [builtin://arithmetic/train]}
"""


def test_every_error_of_a_file_in_one_report(tmp_path, capsys):
    path = tmp_path / "three.yaml"
    path.write_text(THREE_ERRORS)
    assert cli.main(["validate", "--config", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4, lines
    assert "max_stpes: unknown key" in lines[0] and "did you mean 'max_steps'" in lines[0]
    keys = [line.split(": ")[2] for line in lines[:3]]
    assert sorted(keys) == ["async_generation_ratio", "max_stpes", "use_kl_loss"]
    assert lines[3] == f"{path}: 3 errors"


def test_an_error_that_the_taking_out_made_is_not_reported(tmp_path):
    """use_kl_loss taken out leaves kl_loss_coef inert: the file has one error, not two."""
    path = tmp_path / "kl.yaml"
    path.write_text(THREE_ERRORS.replace("max_stpes", "max_steps").replace(
        "async_generation_ratio: -1\n", "kl_loss_coef: 0.1\n"))
    _, errors, _ = config_errors(str(path))
    assert [e.key_path for e in errors] == ["use_kl_loss"]


def test_a_roll_file_names_the_converter_whatever_its_error(tmp_path, capsys):
    path = tmp_path / "roll.yaml"  # a key only ROLL has, and a value error
    path.write_text("system_envs: {USE_MODELSCOPE: '1'}\nrollout_batch_size: 0\n")
    with pytest.raises(ConfigError) as info:  # `platform run`'s one line
        load_config(path)
    assert f"platform convert --from roll {path}" in str(info.value)
    assert "writes a file that validates" in str(info.value)
    assert cli.main(["validate", "--config", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2] for line in err[:2]] == ["system_envs", "rollout_batch_size"]
    assert err[2].startswith("note: this looks like a ROLL config: `platform convert --from "
                             f"roll {path} -o flywheel.yaml`")
    assert "writes a file that validates" in err[2]
    assert not any("platform convert" in line for line in err if line.startswith("error: "))
    assert cli.main(["validate", "--config", str(ROLL_RLVR)]) == 2
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note")]
    assert len(notes) == 1


def test_a_flywheel_key_roll_has_too_is_no_sign_of_roll(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("track_with: tensorboard\nrollout_batch_size: 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "platform convert" not in str(info.value)
