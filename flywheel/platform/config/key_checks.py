"""Keys that are accepted but would do nothing in this config: refused, with the reason.

Why a module of its own: ROLL configs carry keys that only some roles, backends or
algorithms read. Each rule here names the key path, what it would have meant, and what to
write instead, so no written key is silently ignored. Pure functions on a
`PipelineConfig`, run by `checks.check_config`; each raises `ConfigError`.

The template names live in `flywheel.pipelines.prompt_data.TEMPLATES`; they are listed
again here because platform/ imports nothing above it (a test holds the two equal).
"""

from __future__ import annotations

from flywheel.platform.config.errors import ConfigError, did_you_mean
from flywheel.platform.config.schema import (
    DataArgs,
    GeneratingArgs,
    ModelArgs,
    PipelineConfig,
    RewardConfig,
    StrategyArgs,
)

TEMPLATE_NAMES = ("native", "none", "raw", "chat", "qwen2_5", "qwen2_5_vl", "qwen3", "chatml",
                  "llama3", "deepseek", "default")
NATIVE_NAMES = ("native", "none", "raw")
# Backends with no strategy_config keys at all (a key there would do nothing).
KEYLESS_STRATEGIES = ("hf_train", "hf_infer")
# Roles whose data_args are read (RLVR prompts); the validation block has its own.
DATA_ROLES = ("actor_train",)


def check_keys_act(cfg: PipelineConfig) -> None:
    """Every rule of this module, in order."""
    from flywheel.platform.config.checks import is_rule_reward, roles  # checks imports us

    for role in roles(cfg):
        worker, key = role.worker, role.key_path
        own_name = key.rsplit(".", 1)[-1]
        if worker.name is not None and worker.name not in (own_name, key):
            raise ConfigError("", f"{key}.name", f"is '{worker.name}', but flywheel names "
                                                 f"this role by its key '{own_name}'; write "
                                                 f"'{own_name}' or leave name out")
        if (worker.strategy_args.strategy_name in KEYLESS_STRATEGIES
                and worker.strategy_args.strategy_config):
            unknown = ", ".join(sorted(worker.strategy_args.strategy_config))
            raise ConfigError("", f"{key}.strategy_args.strategy_config",
                              f"{worker.strategy_args.strategy_name} takes no "
                              f"strategy_config keys, got {unknown}")
        if role.kind not in DATA_ROLES and worker.data_args != DataArgs():
            raise ConfigError("", f"{key}.data_args", "this role reads no data: prompts come "
                                                      "from actor_train.data_args (and "
                                                      "validation.data_args)")
        if is_rule_reward(role):
            check_rule_reward(cfg.rewards[own_name], key)
    check_data_args(cfg)
    check_generating_args(cfg)
    check_lengths(cfg)
    if cfg.adv_estimator == "grpo" and (cfg.norm_mean_type, cfg.norm_std_type) != (
            "group", "group"):
        raise ConfigError("", "norm_mean_type", f"grpo always normalises by the group mean "
                                                f"and std, so norm_mean_type="
                                                f"{cfg.norm_mean_type} / norm_std_type="
                                                f"{cfg.norm_std_type} would do nothing; use "
                                                f"adv_estimator: reinforce")


def check_rule_reward(reward: RewardConfig, key: str) -> None:
    """A rule reward loads no model and runs no backend."""
    if reward.model_args != ModelArgs():
        raise ConfigError("", f"{key}.model_args", f"reward_type {reward.reward_type} is a "
                                                   f"rule and loads no model; remove model_args")
    if reward.strategy_args != StrategyArgs():
        raise ConfigError("", f"{key}.strategy_args", f"reward_type {reward.reward_type} is a "
                                                      f"rule and runs no backend; remove "
                                                      f"strategy_args")


def check_data_args(cfg: PipelineConfig) -> None:
    """Known templates; chat-only keys only with a chat template; validation prompts are
    encoded like actor_train's."""
    train = cfg.actor_train.data_args
    blocks = [("actor_train.data_args", train)]
    if cfg.validation is not None:
        blocks.append(("validation.data_args", cfg.validation.data_args))
    for key, args in blocks:
        if args.template is not None and args.template not in TEMPLATE_NAMES:
            raise ConfigError("", f"{key}.template",
                              f"unknown template '{args.template}'"
                              f"{did_you_mean(args.template, TEMPLATE_NAMES)}; known: "
                              f"{', '.join(TEMPLATE_NAMES)} (all but native/none/raw apply "
                              f"the tokenizer's chat template)")
        if (args.template or "native") in NATIVE_NAMES:
            for name in ("system_prompt", "chat_template_kwargs"):
                if getattr(args, name):
                    raise ConfigError("", f"{key}.{name}", f"is for chat templates, but "
                                                           f"template is "
                                                           f"{args.template or 'native'}")
    if cfg.validation is not None:
        val = cfg.validation.data_args
        for name in ("template", "system_prompt", "chat_template_kwargs"):
            mine, theirs = getattr(val, name), getattr(train, name)
            if mine not in (None, {}) and mine != theirs:
                raise ConfigError("", f"validation.data_args.{name}",
                                  f"is {mine!r} but actor_train.data_args.{name} is "
                                  f"{theirs!r}; validation prompts are encoded like training "
                                  f"prompts: leave it out or write the same value")


def check_generating_args(cfg: PipelineConfig) -> None:
    blocks: list[tuple[str, GeneratingArgs]] = [
        ("actor_infer.generating_args", cfg.actor_infer.generating_args)]
    if cfg.validation is not None:
        blocks.append(("validation.generating_args", cfg.validation.generating_args))
        if cfg.validation.generating_args.num_return_sequences != 1:
            raise ConfigError("", "validation.generating_args.num_return_sequences",
                              f"is {cfg.validation.generating_args.num_return_sequences}; "
                              f"validation scores one response per prompt: write 1")
    for key, args in blocks:
        if args.num_beams != 1:
            raise ConfigError("", f"{key}.num_beams", f"is {args.num_beams}; RL trains on "
                                                      f"sampled responses with their "
                                                      f"sampling log-probs: write 1")
        if args.repetition_penalty <= 0:
            raise ConfigError("", f"{key}.repetition_penalty",
                              f"must be > 0 (1.0 is off), got {args.repetition_penalty}")
        if args.stop_strings is not None and not all(args.stop_strings):
            raise ConfigError("", f"{key}.stop_strings", "an empty string would stop at once")


def check_lengths(cfg: PipelineConfig) -> None:
    """RLVR sequences (prompt_length + response_length) fit in sequence_length."""
    total = cfg.prompt_length + cfg.response_length
    if cfg.pipeline_type == "rlvr" and cfg.sequence_length is not None and (
            total > cfg.sequence_length):
        raise ConfigError("", "sequence_length", f"is {cfg.sequence_length}, shorter than "
                                                 f"prompt_length + response_length = {total}")


def context_length(cfg: PipelineConfig) -> int | None:
    """Tokens a generation engine must hold per sequence: RLVR prompt_length +
    response_length; agentic sequence_length (None when unset: the engine's default)."""
    if cfg.pipeline_type == "rlvr":
        return cfg.prompt_length + cfg.response_length
    return cfg.sequence_length
