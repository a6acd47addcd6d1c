"""A reward and a policy-loss variant added through the public registration (the docs'
recipe, docs_site/docs/python-api.md), each with a setting of its own, and a pipeline kind
and an advantage estimator (docs_site/docs/extending/pipeline-kinds.md): `platform
validate` accepts a config naming all four, and a real step on the tiny model runs all
four, with the config's settings, in other processes than the one that registered them
(the training worker; the reward worker's scoring process); the kind's batch extras reach
its loss in the training worker."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from flywheel import cli
from flywheel.algorithms.estimators import ESTIMATORS, EstimatorSpec, register_estimator
from flywheel.algorithms.policy_loss.registry import (
    POLICY_LOSSES,
    LossSpec,
    register_policy_loss,
)
from flywheel.config.kinds import KINDS, register_kind
from flywheel.pipelines.config import load_config, load_config_dict
from flywheel.pipelines.run.launch import run
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.rewards.registry import REWARDS, RewardSpec, register_reward
from tests.pipelines import user_kind

REWARD = "odd_codes"
LOSS = "weighted_reinforce"
KIND = "marked_rlvr"
ESTIMATOR = "constant"
SCORE = 0.123  # what no 0/1 reward averages to (it is no multiple of 1/n for n <= 100)


def config_file(tmp_path, reward_type: str = REWARD, pg_variant: str = LOSS,
                pipeline_type: str = KIND, adv_estimator: str = ESTIMATOR):
    path = tmp_path / "registered.yaml"
    path.write_text(yaml.safe_dump({
        "pipeline_type": pipeline_type, "adv_estimator": adv_estimator,
        "exp_name": "registered", "output_dir": str(tmp_path / "run"),
        "pretrain": "builtin://tiny-qwen2",
        "max_steps": 1, "eval_steps": 0,           # one step is the point
        "rollout_batch_size": 4, "num_return_sequences_in_group": 2,  # 8 samples
        "prompt_length": 16, "response_length": 4,
        "tracking": {"mlflow": False},
        "actor_train": {"pg_variant": pg_variant, "pg_variant_args": {"weight": 0.5},
                        "training_args": {"per_device_train_batch_size": 8},
                        "data_args": {"file_name": ["builtin://arithmetic/train"]}},
        "rewards": {"mine": {"reward_type": reward_type, "reward_args": {"score": SCORE}}},
    }))
    return path


@pytest.fixture(scope="module")
def registered():
    """All four registered as a user would; afterwards the catalogs are as they were, so
    the tests that list every known name see only flywheel's own."""
    catalogs = (REWARDS, POLICY_LOSSES, KINDS, ESTIMATORS)
    before = [dict(c) for c in catalogs]
    register_reward(REWARD, RewardSpec("rule", "tests.pipelines.user_reward:build",
                                       settings="tests.pipelines.user_reward:OddCodesSettings"))
    register_policy_loss(LOSS, LossSpec(
        "tests.pipelines.user_loss:weighted_reinforce_loss",
        settings="tests.pipelines.user_loss:WeightedReinforceSettings"))
    register_kind(KIND, user_kind.marked_kind(KINDS["rlvr"]))
    register_estimator(ESTIMATOR, EstimatorSpec(
        "sample", "tests.pipelines.user_kind:constant_advantages", normalisation="configurable"))
    yield
    for catalog, entries in zip(catalogs, before, strict=True):
        catalog.clear()
        catalog.update(entries)


def test_validate_refuses_the_names_before_they_are_registered(tmp_path, capsys):
    assert cli.main(["validate", "--config", str(config_file(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert f"rewards.mine.reward_type: unknown reward_type '{REWARD}'" in err
    assert (f"pipeline_type: unknown pipeline_type '{KIND}'; known: rlvr, agentic, agent, "
            f"sft, evaluate, dpo, online_dpo, reward_model, distill") in err
    assert f"adv_estimator: unknown adv_estimator '{ESTIMATOR}'; known: grpo," in err


def test_a_registered_reward_and_loss_validate_and_run_one_rlvr_step(
        registered, tmp_path, capsys, ray_session, tiny_model_path):
    path = config_file(tmp_path)
    assert cli.main(["validate", "--config", str(path)]) == 0
    assert "ok:" in capsys.readouterr().out

    run_dir = run(load_config(path))
    (record,) = [json.loads(line) for line in
                 (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 1
    assert record["pg/user_loss_weight"] == 0.5  # the trainer ran the registered loss
    assert record["reward/parse_rate"] == 0.0  # every sample was scored by the registered reward
    odd = record["reward/mean"] * 8 / SCORE
    assert odd == pytest.approx(round(odd)), record["reward/mean"]
    assert record["advantages/mean"] == pytest.approx(user_kind.ADVANTAGE)  # the estimator
    assert record["user/row_mark"] == pytest.approx(user_kind.ROW_MARK)  # extras: the loss
    assert record["user/token_mark"] == pytest.approx(user_kind.TOKEN_MARK)


@pytest.mark.parametrize("block, key, value, message", [
    ("rewards.mine.reward_args", "score", 2.0, "score must be in (0, 1], got 2.0"),
    ("rewards.mine.reward_args", "scor", 0.5, "unknown key"),
    ("actor_train.pg_variant_args", "weight", "heavy", "expected float"),
    ("actor_train.pg_variant_args", "weight", 0, "weight must be > 0, got 0"),
])
def test_the_settings_an_entry_declares_are_checked_when_the_config_loads(
        registered, block, key, value, message):
    data = {"actor_train": {"pg_variant": LOSS}, "rewards": {"mine": {"reward_type": REWARD}}}
    *parents, last = block.split(".")
    target = data
    for part in parents:
        target = target[part]
    target[last] = {key: value}
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_config_dict(data)
    assert info.value.key_path.startswith(block)


def test_settings_for_an_entry_that_declares_none_are_refused():
    with pytest.raises(ConfigError, match="pg_variant ppo declares no settings of its own"):
        load_config_dict({"actor_train": {"pg_variant_args": {"weight": 0.5}}})


def test_registering_a_taken_name_or_a_malformed_path_is_refused():
    with pytest.raises(ValueError, match="'math_rule' is already registered"):
        register_reward("math_rule", RewardSpec("rule", "my_pkg.rewards:build"))
    with pytest.raises(ValueError, match="must look like 'package.module:attr'"):
        register_reward("mine", RewardSpec("rule", "my_pkg.rewards.build"))
    with pytest.raises(ValueError, match="'ppo' is already registered"):
        register_policy_loss("ppo", LossSpec("my_pkg.losses:ppo"))
    with pytest.raises(ValueError, match="expected a LossSpec"):
        register_policy_loss("mine", LossSpec("my_pkg.losses"))
    assert "mine" not in REWARDS and "mine" not in POLICY_LOSSES
