"""A run's saved config.yaml loads back: `platform run --resume RUN_DIR` reads it, so a
config that writes max_new_tokens without response_length (or the other way round) must
give a config.yaml the loader accepts, and the same config."""

from __future__ import annotations

import pytest
import yaml

from flywheel.config import config_to_dict
from flywheel.config.length_defaults import loadable_config_data
from flywheel.pipelines.config import load_config, load_config_dict

from .sim_config import sim_config


def only_response_length(raw: dict) -> dict:
    del raw["actor_infer"]["generating_args"]["max_new_tokens"]
    return {**raw, "response_length": 6}


def validation_max_new_tokens(raw: dict) -> dict:
    raw["validation"]["generating_args"] = {"max_new_tokens": 3}  # actor_infer's is 4
    return raw


@pytest.mark.parametrize("shape", [lambda raw: raw, only_response_length,
                                   validation_max_new_tokens],
                         ids=["max_new_tokens_only", "response_length_only",
                              "two_max_new_tokens"])
def test_saved_config_loads_back_to_the_same_config(tmp_path, shape):
    cfg = load_config_dict(shape(sim_config(tmp_path / "run", 0.0)))
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(loadable_config_data(config_to_dict(cfg)), sort_keys=False))
    assert load_config(str(saved)) == cfg


# The run itself (`platform run --resume RUN_DIR max_steps=5` of a config that wrote
# max_new_tokens only) is in tests/pipelines/test_chaos.py's SIGTERM test.
