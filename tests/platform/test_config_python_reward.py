"""Config rules of `reward_type: python` and the one `import_allowlist` (issue 25, item 1):
a reward function's path must lie under the allowlist, `env_import_allowlist` is read as
its alias (both written differently is refused), `reward_import_path` acts only on a
python reward, and an allowlist with nothing to allow is refused. Config only: nothing is
imported when a config loads."""

from __future__ import annotations

import pytest

from flywheel.config.checks.import_allowlist import allowed_prefixes
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError

PATH = "my_rewards.scoring:by_tag"


def python_reward(**reward) -> dict:
    return {"rewards": {"mine": {"reward_type": "python", "reward_import_path": PATH,
                                 **reward}}}


@pytest.mark.parametrize("allowlist", [
    {"import_allowlist": ["my_rewards"]},
    {"env_import_allowlist": ["my_rewards"]},  # the former name, read as an alias
    {"import_allowlist": ["my_rewards"], "env_import_allowlist": ["my_rewards"]},
    {"import_allowlist": ["my_rewards.scoring"]},
])
def test_a_reward_function_under_the_allowlist_loads(allowlist):
    cfg = load_config_dict({**python_reward(), **allowlist})
    assert cfg.rewards["mine"].reward_import_path == PATH
    assert allowed_prefixes(cfg)[0].startswith("my_rewards")


@pytest.mark.parametrize("data, key_path, message", [
    (python_reward(), "rewards.mine.reward_import_path",
     "module 'my_rewards.scoring' is not under a prefix of import_allowlist (empty)"),
    ({**python_reward(), "import_allowlist": ["my_rewards_extra", "my"]},
     "rewards.mine.reward_import_path", "not under a prefix of import_allowlist "
                                        "(my_rewards_extra, my)"),
    ({**python_reward(reward_import_path="my_rewards.scoring.by_tag"),
      "import_allowlist": ["my_rewards"]},
     "rewards.mine.reward_import_path", "must look like 'package.module:name'"),
    ({"rewards": {"mine": {"reward_type": "python"}}, "import_allowlist": ["my_rewards"]},
     "rewards.mine.reward_import_path", "is required with reward_type python"),
    ({**python_reward(), "import_allowlist": ["my_rewards"],
      "env_import_allowlist": ["other"]},
     "env_import_allowlist", "is the former name of import_allowlist"),
    ({**python_reward(), "import_allowlist": ["my rewards"]},
     "import_allowlist[0]", "is not a module prefix"),
    ({**python_reward(reward_args={"batch_size": 4}), "import_allowlist": ["my_rewards"]},
     "rewards.mine.reward_args", "declares no settings of its own"),
])
def test_python_reward_mistakes_name_the_key(data, key_path, message):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data)
    assert info.value.key_path == key_path and message in str(info.value)
    assert "\n" not in str(info.value)


def test_an_unknown_reward_type_is_still_refused_by_the_catalog():
    with pytest.raises(ConfigError, match="unknown reward_type 'pyton'"):
        load_config_dict({"rewards": {"mine": {"reward_type": "pyton"}}})


@pytest.mark.parametrize("data, key_path, message", [
    ({"rewards": {"m": {"reward_type": "math_rule", "reward_import_path": PATH}}},
     "rewards.m.reward_import_path", "acts only with reward_type python"),
    ({"import_allowlist": ["my_rewards"]}, "import_allowlist",
     "acts only when the config names user code by import path"),
    ({"env_import_allowlist": ["my_envs"]}, "env_import_allowlist",
     "acts only when the config names user code by import path"),
])
def test_keys_that_would_do_nothing_are_refused(data, key_path, message):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data)
    assert info.value.key_path == key_path and message in str(info.value)


@pytest.mark.parametrize("key", ["import_allowlist", "env_import_allowlist"])
def test_a_user_env_is_allowed_by_either_spelling(key):
    cfg = load_config_dict({
        "pipeline_type": "agentic", "rollout_batch_size": 8, key: ["my_envs"],
        "train_env_manager": {"num_env_groups": 2, "group_size": 4, "tags": ["Mine"]},
        "val_env_manager": {"tags": ["Mine"]},
        "custom_envs": {"Mine": {"env_type": "maze", "env_import_path": "my_envs.maze:Maze"}},
        "actor_train": {"training_args": {"per_device_train_batch_size": 4}}})
    assert allowed_prefixes(cfg) == ["my_envs"]
