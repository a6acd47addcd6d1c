"""`platform convert --from roll` on ROLL's step-level agentic settings
(interop/roll/fit/step_credit.py): env managers, step estimators, batch_adjust_mode, GEM env ids,
ROLL's Sokoban variants, the rollout-only pipeline. Each case is a small ROLL-format file written
here."""

from __future__ import annotations

import copy

import pytest
import yaml

from flywheel.pipelines.config import convert_roll, load_config_dict

GUESS_TEMPLATE = "Observation:\n{history}\n{current_observation}\nAnswer in \\boxed{{}}.\n"
BASE = {
    "exp_name": "gem", "seed": 1, "pretrain": "builtin://tiny-qwen2", "max_steps": 3,
    "rollout_batch_size": 8, "sequence_length": 512,
    "adv_estimator": "step_reinforce", "batch_adjust_mode": "delete", "step_reward_gamma": 1.0,
    "reward_normalization": {"grouping": "batch", "method": "mean_std"},
    "actor_train": {"training_args": {"per_device_train_batch_size": 4,
                                      "gradient_accumulation_steps": 1},
                    "strategy_args": {"strategy_name": "hf_train"}, "device_mapping": [0]},
    "actor_infer": {"strategy_args": {"strategy_name": "hf_infer"}, "device_mapping": [0]},
    "train_env_manager": {"num_env_groups": 8, "group_size": 1, "tags": ["Guess"],
                          "max_env_num_per_worker": 16},
    "val_env_manager": {"num_env_groups": 4, "group_size": 1, "tags": ["Guess"]},
    "custom_envs": {"Guess": {
        "env_type": "game:GuessTheNumber-v0", "max_steps": 5, "max_tokens_per_step": 32,
        "env_manager_cls": "roll.pipeline.agentic.env_manager.step_concat_env_manager."
                           "StepConcatEnvManager",
        "history_length": 5, "agent_template": GUESS_TEMPLATE,
        "env_config": {"min_number": 1, "max_number": 20, "max_turns": 5}}},
}


def convert(tmp_path, change=None, drop=()):
    data = copy.deepcopy(BASE)
    for key in drop:
        data.pop(key)
    for key, value in (change or {}).items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "roll.yaml"
    path.write_text(yaml.safe_dump(data))
    return convert_roll(path)


def test_gem_step_reinforce_file_converts_to_step_rows(tmp_path):
    conversion = convert(tmp_path)
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert cfg.step_level_samples and cfg.adv_estimator == "step_reinforce"
    assert cfg.gamma == 1.0 and cfg.batch_adjust_mode == "delete"
    assert (cfg.norm_mean_type, cfg.norm_std_type) == ("batch", "batch")
    env = cfg.custom_envs["Guess"]
    assert env.env_type == "game:GuessTheNumber-v0"
    assert env.agent_template == "Observation:\n\n{observation}\nAnswer in \\boxed{{}}.\n"
    assert any("step_reward_gamma -> gamma: 1.0" in m for m in conversion.mapped)
    assert any("StepConcatEnvManager -> step_level_samples" in m for m in conversion.mapped)


def test_gigpo_file_keeps_its_weights_and_rolls_default_gamma(tmp_path):
    custom = copy.deepcopy(BASE["custom_envs"])
    custom["Guess"].update(env_manager_cls="roll.x.StepEnvManager",
                           agent_template="{env_instruction} step {current_step}: "
                                          "{current_observation}")
    conversion = convert(tmp_path, {"adv_estimator": "gigpo", "step_reward_weight": 0.5,
                                    "custom_envs": custom,
                                    "reward_normalization": {"grouping": "traj_group_id",
                                                             "method": "mean"}},
                         drop=("step_reward_gamma",))
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert cfg.adv_estimator == "gigpo" and cfg.step_reward_weight == 0.5
    assert cfg.gamma == 0.95  # ROLL's default step_reward_gamma
    assert cfg.custom_envs["Guess"].agent_template is None  # ROLL's step summary: dropped
    assert any("agent_template: ROLL's step prompt uses" in d for d in conversion.dropped)


def test_episode_rows_drop_the_step_keys_with_the_reason(tmp_path):
    custom = copy.deepcopy(BASE["custom_envs"])
    custom["Guess"]["env_manager_cls"] = "roll.x.TrajEnvManager"
    custom["Guess"]["agent_template"] = "{observation}"
    conversion = convert(tmp_path, {"adv_estimator": "grpo", "step_reward_weight": 0.5,
                                    "custom_envs": custom, "reward_normalization": None,
                                    "step_reward_gamma": 0.5})
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert not cfg.step_level_samples and cfg.gamma == 1.0
    assert cfg.batch_adjust_mode == "none"  # 8 episodes fill optimizer steps of 4
    dropped = "\n".join(conversion.dropped)
    assert "step_reward_gamma: 0.5: ROLL reads it only with adv_estimator gigpo" in dropped
    assert "step_reward_weight" in dropped and "batch_adjust_mode: 'delete': a no-op" in dropped


@pytest.mark.parametrize("change, feature", [
    ({"adv_estimator": "grpo", "reward_normalization": None},
     "StepConcatEnvManager with adv_estimator grpo"),
    ({"custom_envs": {"Guess": {**BASE["custom_envs"]["Guess"],
                                "env_manager_cls": "roll.x.TrajEnvManager"}}},
     "adv_estimator step_reinforce on episode rows"),
    ({"custom_envs": {"Guess": {**BASE["custom_envs"]["Guess"], "env_type": "math:Math12K"}}},
     "the math:Math12K environment (custom_envs.Guess.env_type = math:Math12K)"),
])
def test_what_does_not_carry_over_is_named(tmp_path, change, feature):
    conversion = convert(tmp_path, change)
    assert any(feature in m for m in conversion.missing), conversion.missing


def test_batch_not_a_multiple_of_the_global_batch_gets_rolls_default_copy(tmp_path):
    custom = copy.deepcopy(BASE["custom_envs"])
    custom["Guess"].update(env_manager_cls=None, agent_template="{observation}")
    conversion = convert(tmp_path, {"adv_estimator": "reinforce", "rollout_batch_size": 6,
                                    "train_env_manager": {"num_env_groups": 6},
                                    "custom_envs": custom},
                         drop=("batch_adjust_mode",))
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert cfg.batch_adjust_mode == "copy" and not cfg.step_level_samples
    assert any("not a multiple of actor_train's global batch" in m for m in conversion.mapped)


def test_sokoban_sandbox_and_agent_runner_play_the_local_sokoban(tmp_path):
    sandbox = {"env_type": "sokoban_sandbox", "max_steps": 5, "max_tokens_per_step": 16,
               "env_manager_cls": "roll.x.ProxyEnvManager",
               "agent_runner_cls": "roll.pipeline.agentic.agent_runner.gem_runner.GEMRunner",
               "agent_template": "{observation}\nTurn {turn_idx}: {suffix}",
               "env_config": {"base_url": "http://localhost:8080"}}
    conversion = convert(tmp_path, {"adv_estimator": "grpo", "reward_normalization": None,
                                    "custom_envs": {"Guess": sandbox}},
                         drop=("batch_adjust_mode", "step_reward_gamma"))
    assert conversion.missing == []
    env = load_config_dict(conversion.data).custom_envs["Guess"]
    assert env.env_type == "sokoban" and env.env_config == {"step_penalty": -0.1}
    assert env.agent_template == "{observation}\nTurn {turn_idx}: "
    report = "\n".join(conversion.mapped + conversion.dropped)
    assert "sokoban_sandbox -> sokoban (ROLL plays Sokoban in its remote sandbox" in report
    assert "env_config.base_url" in report and "GEMRunner plays" in report


def test_rollout_only_file_becomes_a_step_zero_validation(tmp_path):
    custom = copy.deepcopy(BASE["custom_envs"])
    custom["Guess"].update(env_manager_cls=None, agent_template="{observation}")
    conversion = convert(tmp_path, {"actor_infer": {"generating_args": {"temperature": 0.9,
                                                                        "top_p": 0.99}},
                                    "custom_envs": custom},
                         drop=("actor_train", "adv_estimator", "batch_adjust_mode",
                               "step_reward_gamma", "reward_normalization"))
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert (cfg.max_steps, cfg.eval_steps, cfg.val_batch_size) == (0, 1, 24)
    assert cfg.val_env_manager.tags == ["Guess"] and cfg.val_env_manager.num_env_groups == 8
    gen = cfg.validation.generating_args
    assert gen.do_sample and gen.temperature == 0.9 and gen.top_p == 0.99
    assert cfg.adv_estimator == "grpo"  # ROLL's default gae is not read: nothing trains


def test_rolls_sokoban_env_config_becomes_the_local_envs(tmp_path):
    from flywheel.envs import make
    sokoban = {"env_type": "sokoban", "max_steps": 5, "max_tokens_per_step": 16,
               "agent_template": "{observation}",
               "env_config": {"dim_room": [6, 6], "num_boxes": 1, "search_depth": 30,
                              "max_steps": 5,
                              "grid_lookup": {0: "W", 1: ".", 2: "G", 3: "C", 4: "B",
                                              5: "A", 6: "@"}}}
    conversion = convert(tmp_path, {"adv_estimator": "grpo", "reward_normalization": None,
                                    "custom_envs": {"Guess": sokoban}},
                         drop=("batch_adjust_mode", "step_reward_gamma"))
    assert conversion.missing == []
    config = load_config_dict(conversion.data).custom_envs["Guess"].env_config
    assert config["size"] == 6 and config["step_penalty"] == -0.1
    assert "dim_room" not in config and "search_depth" not in config
    observation, _ = make("sokoban", **config).reset(seed=0)  # builds: every key accepted
    assert "W" in observation and "#" not in observation.splitlines()[-1]
    square = {**sokoban, "env_config": {"dim_room": [6, 8]}}
    assert any("not square" in m for m in convert(
        tmp_path, {"adv_estimator": "grpo", "reward_normalization": None,
                   "custom_envs": {"Guess": square}},
        drop=("batch_adjust_mode", "step_reward_gamma")).missing)
