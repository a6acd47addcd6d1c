"""Rules for the reward_model reward's role keys (`rewards.<name>` with reward_type
reward_model).

The reward model loads with transformers in the reward worker itself (workers/rewards/
reward_model.py), not through a backend: strategy_args and generating_args would do
nothing, and of model_args only the model and its dtype act. Its reward_args are checked
by the catalog (RewardModelArgs). Run by `checks.check_config`; raises `ConfigError`.
"""

from __future__ import annotations

from dataclasses import fields

from flywheel.config.checks.judge import check_world_size
from flywheel.config.schema import GeneratingArgs, ModelArgs, PipelineConfig, StrategyArgs
from flywheel.platform.config.errors import ConfigError

MODEL_KEYS_THAT_ACT = ("model_name_or_path", "dtype")


def check_reward_model(cfg: PipelineConfig) -> None:
    for name, reward in cfg.rewards.items():
        if reward.reward_type != "reward_model":
            continue
        key = f"rewards.{name}"
        if reward.strategy_args != StrategyArgs():
            raise ConfigError("", f"{key}.strategy_args", "a reward_model loads with "
                                                          "transformers in its worker, on no "
                                                          "backend; remove it")
        if reward.generating_args != GeneratingArgs():
            raise ConfigError("", f"{key}.generating_args", "a reward_model scores and "
                                                            "generates nothing; remove it")
        for field in fields(ModelArgs):
            if (field.name not in MODEL_KEYS_THAT_ACT
                    and getattr(reward.model_args, field.name)
                    != getattr(ModelArgs(), field.name)):
                raise ConfigError("", f"{key}.model_args.{field.name}",
                                  "a reward_model reads only model_name_or_path and dtype "
                                  "of model_args; remove it")
        if not (reward.model_args.model_name_or_path or cfg.reward_pretrain):
            raise ConfigError("", f"{key}.model_args.model_name_or_path",
                              "a reward_model needs a model: set it, or the top-level "
                              "reward_pretrain")
        check_world_size(reward, key, "a reward_model")
