"""Issue 54 items 1, 4 and 10 at the config boundary, in process: a fresh run is refused in
a folder that holds a run, exp_name is a bounded name, declared bounds fail at validate,
and no environment value or secret-named value is written down."""

from __future__ import annotations

import json

import pytest
import yaml

from flywheel.config.persisted import REDACTED, written_config
from flywheel.pipelines.config import load_config, load_config_dict
from flywheel.pipelines.run.launch import run
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.run_folder import unused_folder

SECRET = "sk-FAKE-0123456789abcdef"


def error_for(data):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data, source="f.yaml")
    return info.value


# ---- item 4: a run's folder, exp_name -------------------------------------------------
@pytest.mark.parametrize("marker", ["config.yaml", "metrics.jsonl", "status.json",
                                    "checkpoint-2"])
def test_a_fresh_run_into_a_folder_that_holds_a_run_is_refused(tmp_path, marker):
    (tmp_path / marker).mkdir() if marker.startswith("checkpoint") else \
        (tmp_path / marker).write_text("{}")
    before = sorted(p.name for p in tmp_path.iterdir())
    cfg = load_config_dict({"output_dir": str(tmp_path), "max_steps": 1})
    with pytest.raises(ConfigError, match=r"output_dir: .* already holds a run .*"
                                          r"platform run --resume"):
        run(cfg, config_path="f.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_the_default_layout_takes_a_free_folder(tmp_path):
    taken = tmp_path / "20260101-000000"
    taken.mkdir()
    assert unused_folder(taken) == taken  # empty: no run there
    (taken / "status.json").write_text("{}")
    assert unused_folder(taken) == tmp_path / "20260101-000000-2"


@pytest.mark.parametrize("name, why", [
    ("../../../x", "not a path"), ("a/b", "not a path"), ("a\\b", "not a path"),
    ("..", "folder name"), ("", "folder name"), (" x", "folder name"),
    ("x" * 101, "at most 100 bytes"), ("tab\there", "not a path")])
def test_exp_name_is_a_bounded_name(name, why):
    error = error_for({"exp_name": name})
    assert error.key_path == "exp_name" and why in error.message
    assert len(str(error)) < 300


def test_a_50_mb_exp_name_is_refused_with_a_short_line():
    error = error_for({"exp_name": "x" * (50 << 20)})
    assert "at most 100 bytes" in str(error) and len(str(error)) < 300


# ---- item 10: bounds where the fields are declared ------------------------------------
@pytest.mark.parametrize("key, value, expected", [
    ("seed", 99999999999999999999, "in [0, 4294967295]"),
    ("seed", -1, "in [0, 4294967295]"),
    ("actor_infer.generating_args.temperature", -1, ">= 0"),
    ("validation.generating_args.temperature", -0.5, ">= 0"),
    ("actor_infer.generating_args.top_p", 0, "in (0, 1]"),
    ("actor_infer.generating_args.top_p", 1.5, "in (0, 1]"),
    ("actor_infer.generating_args.top_k", -2, ">= -1"),
    ("prompt_length", 0, ">= 1"),
    ("actor_train.data_args.max_record_bytes", -1, ">= 0")])
def test_out_of_range_values_fail_at_validate_naming_the_key(key, value, expected):
    with pytest.raises(ConfigError) as info:
        load_config_dict({}, source="f.yaml", overrides=[f"{key}={value}"])
    assert info.value.key_path == key and expected in info.value.message
    assert len(str(info.value)) < 200


def test_values_at_the_bounds_pass():
    load_config_dict({"seed": 2**32 - 1, "actor_infer": {"generating_args": {
        "temperature": 0, "top_p": 1.0, "top_k": -1}}, "prompt_length": 1})


# ---- item 1: no environment value or secret is written down ---------------------------
def test_env_values_and_secret_keys_are_recorded_as_references(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_WANDB_API_KEY", SECRET)
    monkeypatch.setenv("FAKE_RUN_NOTE", "note-from-env")
    base = tmp_path / "base.yaml"
    base.write_text("tracker_kwargs:\n  notes: ${oc.env:FAKE_RUN_NOTE}\n")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": ["base.yaml"], "secret_helper": "${oc.env:FAKE_WANDB_API_KEY}",
        "track_with": "wandb",
        "tracker_kwargs": {"api_key": "${secret_helper}", "project": "p"},
        "actor_train": {"data_args": {"template": "chat",
                                      "chat_template_kwargs": {"token": "literal-token"}}}}))
    cfg = load_config(path)
    assert cfg.tracker_kwargs["api_key"] == SECRET  # the run itself gets the value
    written = written_config(cfg, path)
    text = json.dumps(written)
    assert SECRET not in text and "note-from-env" not in text and "literal-token" not in text
    assert written["tracker_kwargs"]["api_key"] == "${oc.env:FAKE_WANDB_API_KEY}"
    assert written["tracker_kwargs"]["notes"] == "${oc.env:FAKE_RUN_NOTE}"
    assert written["actor_train"]["data_args"]["chat_template_kwargs"]["token"] == REDACTED
    # what a run writes loads back, reading the environment again
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(written))
    assert load_config(saved).tracker_kwargs["api_key"] == SECRET
    assert written_config(load_config(saved), saved) == written  # resume: no change
