"""Agentic keys in the config: the ROLL seed's agentic YAML validates with
pipeline_type=agentic, the shipped examples load and agree with the warm start they rely
on, and mistakes in env settings are config errors naming the key."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from flywheel.config.loader import config_to_dict
from flywheel.pipelines.agentic.env_jobs import env_manager_config
from flywheel.pipelines.config import check_environment, load_config, load_config_dict
from flywheel.platform.config.errors import ConfigError
from flywheel.workshop.sft_recipes import RECIPES as BUILTIN_MODELS

ROOT = Path(__file__).parents[2]
ROLL_AGENTIC = ROOT / "tests" / "data" / "configs" / "roll" / "agent_val_frozen_lake_async.yaml"
EXAMPLES = [ROOT / "examples" / "agent_val_frozen_lake_async.yaml",
            ROOT / "examples" / "agent_val_frozen_lake_sync.yaml"]


# The seed's keys that do nothing in flywheel's agentic pipeline (issue 24: refused, one
# line each): RLVR's reward model and transformers-only model keys on megatron and vllm.
# Its max_new_tokens acts: it caps each turn (turn_budget.py).
ROLL_AGENTIC_INERT = ["reward_pretrain",
                      "actor_train.model_args.attn_implementation",
                      "actor_train.model_args.disable_gradient_checkpointing",
                      "actor_infer.model_args.disable_gradient_checkpointing"]


def test_roll_agentic_example_validates_as_agentic(monkeypatch, tmp_path):
    """The seed's agentic YAML: each key that would do nothing is refused, naming the key
    and the condition it needs; without them the rest validates as written."""
    monkeypatch.chdir(tmp_path)
    raw = yaml.safe_load(ROLL_AGENTIC.read_text())
    # megatron_train's distributed optimizer acts: no Megatron key is refused
    refused = []
    for _ in ROLL_AGENTIC_INERT:
        with pytest.raises(ConfigError) as info:
            load_config_dict(raw, overrides=["pipeline_type=agentic"])
        assert "acts only" in info.value.message and "\n" not in str(info.value)
        refused.append(info.value.key_path)
        *parents, key = info.value.key_path.split(".")
        node = raw
        for part in parents:
            node = node[part]
        del node[key]
    assert refused == ROLL_AGENTIC_INERT
    cfg = load_config_dict(raw, overrides=["pipeline_type=agentic"])
    assert cfg.pipeline_type == "agentic"
    assert cfg.async_generation_ratio == 1.0 and cfg.rollout_batch_size == 1024
    assert cfg.actor_train.strategy_args.strategy_name == "megatron_train"
    assert cfg.actor_infer.strategy_args.strategy_name == "vllm"
    assert cfg.train_env_manager.tags == ["FrozenLake"]  # the default pool plays FrozenLake
    assert cfg.custom_envs["FrozenLake"].max_tokens_per_step == 128  # min(128, its 128)
    warnings = check_environment(cfg)  # 8 GPUs and Qwen are absent here: warnings only
    assert not any(w.startswith("error") for w in warnings)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_load_and_match_the_warm_start_they_use(path):
    cfg = load_config(path)
    assert cfg.pipeline_type == "agentic"
    recipe = BUILTIN_MODELS[cfg.pretrain.removeprefix("builtin://")].warm_start
    env = cfg.custom_envs["FrozenLake"]
    trained_on = recipe.env_manager(1)  # what the SFT sequences looked like, token for token
    assert (env.agent_system_template, env.agent_template) == (trained_on.system_template,
                                                               trained_on.turn_template)
    assert {k: env.env_config[k] for k in trained_on.env_config} == trained_on.env_config
    assert (env.max_steps, env.max_tokens_per_step) == (trained_on.max_steps,
                                                        trained_on.max_tokens_per_step)
    assert asdict(cfg.train_env_manager)["group_size"] * 8 == cfg.rollout_batch_size


BASE = {"pipeline_type": "agentic", "rollout_batch_size": 8,
        "train_env_manager": {"num_env_groups": 2, "group_size": 4}}


@pytest.mark.parametrize("change, key_path, message", [
    ({"train_env_manager": {"tags": ["FrozenLak"]}}, "train_env_manager.tags[0]",
     "did you mean 'FrozenLake'"),
    ({"custom_envs": {"FrozenLake": {"env_type": "frozen_lak"}}},
     "custom_envs.FrozenLake.env_type", "did you mean 'frozen_lake'"),
    ({"custom_envs": {"Mine": {"env_type": "maze", "env_import_path": "my_envs.maze:Maze"}},
      "train_env_manager": {"tags": ["Mine"]}}, "custom_envs.Mine.env_import_path",
     "not under a prefix of import_allowlist"),
    ({"train_env_manager": {"num_env_groups": 2, "group_size": 3}}, "rollout_batch_size",
     "groups of train_env_manager.group_size=3"),
    ({"train_env_manager": {"num_env_groups": 2, "group_size": 4,
                            "num_groups_partition": [1]}},
     "train_env_manager.num_groups_partition", "one group count"),
    ({"train_env_manager": {"num_env_groups": 2, "group_size": 4,
                            "max_env_num_per_worker": 3}},
     "train_env_manager.max_env_num_per_worker", "less than group_size=4"),
    ({"custom_envs": {"FrozenLake": {"agent_template": "{state}"}}},
     "custom_envs.FrozenLake.agent_template", "unknown placeholder"),
    ({"num_return_sequences_in_group": 4}, "num_return_sequences_in_group", "group_size"),
    ({"turn_level_returns": True, "init_kl_coef": 0.1,
      "reference": {"device_mapping": [0]}}, "turn_level_returns", "use_kl_loss"),
    ({"adv_estimator": "gigpo"}, "adv_estimator", "step_level_samples: true"),
    ({"step_level_samples": True, "adv_estimator": "grpo", "step_reward_weight": 0.5},
     "step_reward_weight", "with adv_estimator gigpo"),
    ({"step_level_samples": True, "adv_estimator": "step_reinforce",
      "turn_level_returns": True}, "turn_level_returns", "with adv_estimator grpo or reinforce"),
    ({"rollout_batch_size": 4, "train_env_manager": {"num_env_groups": 1, "group_size": 4},
      "actor_train": {"training_args": {"per_device_train_batch_size": 8}}},
     "rollout_batch_size", "not a multiple of actor_train's global batch"),
])
def test_agentic_mistakes_name_the_key(change, key_path, message):
    raw = {**BASE, "actor_train": {"training_args": {"per_device_train_batch_size": 4}},
           **change}
    with pytest.raises(ConfigError) as info:
        load_config_dict(raw)
    assert info.value.key_path == key_path and message in str(info.value)


def test_step_credit_keys_load_and_batch_adjust_mode_lifts_the_batch_rule():
    raw = {**BASE, "rollout_batch_size": 4, "train_env_manager": {"num_env_groups": 1,
                                                                  "group_size": 4},
           "actor_train": {"training_args": {"per_device_train_batch_size": 8}},
           "step_level_samples": True, "adv_estimator": "gigpo", "norm_std_type": "none",
           "episode_reward_weight": 1.0, "step_reward_weight": 0.5, "gamma": 0.95}
    for mode in ("copy", "delete", "auto", "random_sample"):
        cfg = load_config_dict({**raw, "batch_adjust_mode": mode})
        assert (cfg.adv_estimator, cfg.batch_adjust_mode) == ("gigpo", mode)
    with pytest.raises(ConfigError) as info:
        load_config_dict({"rollout_batch_size": 8, "adv_estimator": "step_reinforce"})
    assert info.value.key_path == "adv_estimator"


def test_rlvr_configs_ignore_agentic_defaults():
    cfg = load_config_dict({"rollout_batch_size": 8, "num_return_sequences_in_group": 3,
                            "actor_train": {"training_args": {
                                "per_device_train_batch_size": 8}}})
    assert cfg.pipeline_type == "rlvr"  # group_size rules are not applied to RLVR


def test_max_new_tokens_caps_each_turn_the_smaller_winning_as_in_roll():
    envs = {"A": {"env_type": "frozen_lake", "max_tokens_per_step": 8},
            "B": {"env_type": "frozen_lake", "max_tokens_per_step": 4},
            "C": {"env_type": "frozen_lake", "max_tokens_per_step": 512}}
    raw = {**BASE, "actor_train": {"training_args": {"per_device_train_batch_size": 4}},
           "train_env_manager": {"num_env_groups": 2, "group_size": 4, "tags": ["A", "B"]},
           "val_env_manager": {"tags": ["C"]}, "custom_envs": envs}
    cfg = load_config_dict(raw)  # unset: it caps nothing (its default 128 is not read)
    assert [cfg.custom_envs[t].max_tokens_per_step for t in "ABC"] == [8, 4, 512]
    cfg = load_config_dict({**raw, "actor_infer": {"generating_args": {"max_new_tokens": 6}}})
    assert [cfg.custom_envs[t].max_tokens_per_step for t in "ABC"] == [6, 4, 6]
    assert config_to_dict(load_config_dict(config_to_dict(cfg))) == config_to_dict(cfg)
    assert env_manager_config("A", cfg.custom_envs["A"], cfg.train_env_manager,
                              1).max_tokens_per_step == 6  # what the env manager generates
    cfg = load_config_dict({**BASE, "actor_train": {"training_args": {
        "per_device_train_batch_size": 4}}, "actor_infer": {"generating_args": {
            "max_new_tokens": 16}}})  # the schema's default tags are capped too
    assert cfg.custom_envs["FrozenLake"].max_tokens_per_step == 16
    with pytest.raises(ConfigError, match="max_new_tokens: expected an int >= 1"):
        load_config_dict({**raw, "actor_infer": {"generating_args": {"max_new_tokens": 0}}})
