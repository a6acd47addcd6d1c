"""Config rules of `reward_type: reward_model` (issue 25, item 2): its reward_args are the
typed RewardModelArgs (unknown keys, bad values refused), and of the role only the model,
its dtype, device_mapping and num_threads act (strategy_args, generating_args and other
model_args keys are refused). Config only: no model loads."""

from __future__ import annotations

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError

MODEL = {"model_name_or_path": "builtin://smollm2-135m-times-rm"}


def rm(**reward) -> dict:
    return {"rewards": {"rm": {"reward_type": "reward_model",
                               "model_args": reward.pop("model_args", MODEL), **reward}}}


def test_a_reward_model_with_settings_and_devices_loads():
    cfg = load_config_dict(rm(reward_args={"max_length": 128, "batch_size": 4, "shift": 1.5,
                                           "scale": 2.0, "clip_min": -3, "clip_max": 3},
                              device_mapping=[0], num_threads=1))
    assert cfg.rewards["rm"].reward_args["batch_size"] == 4


@pytest.mark.parametrize("data, key_path, message", [
    (rm(reward_args={"batch_size": 0}), "rewards.rm.reward_args",
     "batch_size must be at least 1"),
    (rm(reward_args={"max_length": 1}), "rewards.rm.reward_args", "max_length must be"),
    (rm(reward_args={"scale": 0}), "rewards.rm.reward_args", "scale must be a finite number > 0"),
    (rm(reward_args={"clip_min": 2, "clip_max": 1}), "rewards.rm.reward_args",
     "clip_min (2"),
    (rm(reward_args={"normalise": True}), "rewards.rm.reward_args.normalise", ""),
    (rm(model_args={}), "rewards.rm.model_args.model_name_or_path", "needs a model"),
    (rm(strategy_args={"strategy_name": "vllm"}), "rewards.rm.strategy_args",
     "on no backend"),
    (rm(generating_args={"temperature": 0.5}), "rewards.rm.generating_args",
     "generates nothing"),
    (rm(model_args={**MODEL, "attn_implementation": "sdpa"}),
     "rewards.rm.model_args.attn_implementation", "reads only model_name_or_path and dtype"),
    (rm(llm_judge={"max_new_tokens": 4}), "rewards.rm.llm_judge", "only the llm_judge"),
])
def test_reward_model_mistakes_name_the_key(data, key_path, message):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data)
    assert info.value.key_path == key_path and message in str(info.value)
    assert "\n" not in str(info.value)


def test_device_mapping_is_refused_on_a_rule_reward_but_acts_on_a_reward_model():
    load_config_dict(rm(device_mapping=[0]))
    with pytest.raises(ConfigError) as info:
        load_config_dict({"rewards": {"m": {"reward_type": "math_rule",
                                            "device_mapping": [0]}}})
    assert info.value.key_path == "rewards.m.device_mapping"
