"""Keys that are accepted but would do nothing in this config: refused, with the reason.

Why a module of its own: ROLL configs carry keys that only some roles, backends or
algorithms read. Each rule here names the key path, what it would have meant, and what to
write instead, so no written key is silently ignored. Pure functions on a
`PipelineConfig`, run by `checks.check_config`; each raises `ConfigError`. Template names
and backends are read from the catalogs the caller hands in (`catalogs.py`).
"""

from __future__ import annotations

from flywheel.config.catalogs import Catalogs, estimator_of
from flywheel.config.derived import is_rule_reward, roles
from flywheel.config.kinds import kind_of
from flywheel.config.schema import (
    DataArgs,
    GeneratingArgs,
    ModelArgs,
    PipelineConfig,
    RewardConfig,
    StrategyArgs,
)
from flywheel.platform.config.errors import ConfigError

# Roles whose data_args are read (RLVR prompts); the validation block has its own.
DATA_ROLES = ("actor_train",)


def check_keys_act(cfg: PipelineConfig, catalogs: Catalogs) -> None:
    """Every rule of this module, in order."""
    for role in roles(cfg):
        worker, key = role.worker, role.key_path
        own_name = key.rsplit(".", 1)[-1]
        if worker.name is not None and worker.name not in (own_name, key):
            raise ConfigError("", f"{key}.name", f"is '{worker.name}', but flywheel names "
                                                 f"this role by its key '{own_name}'; write "
                                                 f"'{own_name}' or leave name out")
        backend = catalogs.backends.get(worker.strategy_args.strategy_name, "")
        if not backend.takes_strategy_config and worker.strategy_args.strategy_config:
            unknown = ", ".join(sorted(worker.strategy_args.strategy_config))
            raise ConfigError("", f"{key}.strategy_args.strategy_config",
                              f"{worker.strategy_args.strategy_name} takes no "
                              f"strategy_config keys, got {unknown}")
        if role.kind not in DATA_ROLES and worker.data_args != DataArgs():
            raise ConfigError("", f"{key}.data_args", "this role reads no data: prompts come "
                                                      "from actor_train.data_args (and "
                                                      "validation.data_args)")
        if is_rule_reward(role, catalogs.rewards):
            check_rule_reward(cfg.rewards[own_name], key)
    check_data_args(cfg, catalogs)
    check_generating_args(cfg)
    check_lengths(cfg)
    if estimator_of(cfg).per_turn and not (
            (kind_of(cfg).envs and cfg.step_level_samples) or kind_of(cfg).agents):
        raise ConfigError("", "adv_estimator", f"{cfg.adv_estimator} credits each turn of an "
                                               f"agentic episode on its own row: it needs "
                                               f"pipeline_type: agentic with "
                                               f"step_level_samples: true (or an agent's "
                                               f"calls: pipeline_type: agent)")
    if estimator_of(cfg).normalisation == "group" and (
            cfg.norm_mean_type, cfg.norm_std_type) != ("group", "group"):
        raise ConfigError("", "norm_mean_type", f"{cfg.adv_estimator} always normalises by "
                                                f"the group mean and std, so norm_mean_type="
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


def check_data_args(cfg: PipelineConfig, catalogs: Catalogs) -> None:
    """Known templates; chat-only keys only with a chat template; validation prompts are
    encoded like actor_train's."""
    train = cfg.actor_train.data_args
    blocks = [("actor_train.data_args", train)]
    if cfg.validation is not None:
        blocks.append(("validation.data_args", cfg.validation.data_args))
    for key, args in blocks:
        check_image_bounds(key, args)
        native = "/".join(n for n, how in catalogs.templates.items() if how == "native")
        hint = f" (all but {native} apply the tokenizer's chat template)"
        encoding = catalogs.templates.get(args.template or "native", f"{key}.template",
                                          hint=hint)
        tagged = {catalogs.templates.get(name, f"{key}.tag_to_template.{tag}", hint=hint)
                  for tag, name in args.tag_to_template.items()}
        if encoding == "native" and "chat" not in tagged:
            for name in ("system_prompt", "chat_template_kwargs"):
                if getattr(args, name):
                    raise ConfigError("", f"{key}.{name}", f"is for chat templates, but "
                                                           f"template is "
                                                           f"{args.template or 'native'}")
    if cfg.validation is not None:
        val = cfg.validation.data_args
        for name in ("template", "system_prompt", "chat_template_kwargs", "tag_to_template"):
            mine, theirs = getattr(val, name), getattr(train, name)
            if mine not in (None, {}) and mine != theirs:
                raise ConfigError("", f"validation.data_args.{name}",
                                  f"is {mine!r} but actor_train.data_args.{name} is "
                                  f"{theirs!r}; validation prompts are encoded like training "
                                  f"prompts: leave it out or write the same value")


def check_image_bounds(key: str, args) -> None:
    """ROLL's pixel bounds: positive, and min no more than max (image_files.ImageArgs)."""
    for name in ("image_max_pixels", "image_min_pixels"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError("", f"{key}.{name}", f"must be a positive pixel count, got "
                                                   f"{value}")
    low, high = args.image_min_pixels, args.image_max_pixels
    if low is not None and high is not None and low > high:
        raise ConfigError("", f"{key}.image_min_pixels", f"is {low}, more than "
                                                         f"image_max_pixels {high}")


# Why a penalty is refused where responses are trained on (validation may keep it).
REPETITION_PENALTY_REFUSED = (
    "is not 1.0; the trainer's log-probs (and hf_infer's recorded ones) are of the "
    "distribution without the penalty while vllm's include it, so every penalised token's "
    "importance weight would be biased: write 1.0 (validation.generating_args may keep it)")


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
        if key == "actor_infer.generating_args" and args.repetition_penalty != 1.0:
            raise ConfigError("", f"{key}.repetition_penalty", REPETITION_PENALTY_REFUSED)
        if args.stop_strings is not None and not all(args.stop_strings):
            raise ConfigError("", f"{key}.stop_strings", "an empty string would stop at once")


def check_lengths(cfg: PipelineConfig) -> None:
    """RLVR sequences (prompt_length + response_length) fit in sequence_length."""
    total = cfg.prompt_length + cfg.response_length
    if kind_of(cfg).responses and cfg.sequence_length is not None and (
            total > cfg.sequence_length):
        raise ConfigError("", "sequence_length", f"is {cfg.sequence_length}, shorter than "
                                                 f"prompt_length + response_length = {total}")

