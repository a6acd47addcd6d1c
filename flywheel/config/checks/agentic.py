"""Cross-field rules of the agentic keys (`train_env_manager`, `val_env_manager`,
`custom_envs`), run by `checks.check_config` for
`pipeline_type: agentic` only, so RLVR configs never pay for (or trip over) env settings.

Pure like the rest of `checks`: each rule raises `ConfigError` with the key path and the fix.
Env names and turn placeholders are checked against the `EnvCatalog` every caller hands in
(`catalogs.py`; platform imports nothing from `flywheel.envs`), so a misspelt `env_type`
fails at load with a did-you-mean, before any actor starts. A user env named by
`env_import_path` is only checked for shape and against the import_allowlist here
(checks/import_allowlist.py); importing it is the env workers' job (loading a config runs no
user code).
"""

from __future__ import annotations

import string

from flywheel.config.catalogs import EnvCatalog, ToolEntry, estimator_of
from flywheel.config.checks.import_allowlist import check_allowed_import
from flywheel.config.checks.tools import check_tool_use
from flywheel.config.kinds import kind_of
from flywheel.config.schema import CustomEnvConfig, EnvManagerArgs, PipelineConfig
from flywheel.platform.config.catalogs import Catalog
from flywheel.platform.config.errors import ConfigError, did_you_mean


def check_agentic(cfg: PipelineConfig, catalog: EnvCatalog,
                  tools: Catalog[ToolEntry]) -> None:
    if not kind_of(cfg).envs:  # only a kind playing episodes in envs reads them
        return
    for name, env in cfg.custom_envs.items():
        check_custom_env(f"custom_envs.{name}", env, cfg, catalog)
        if env.tool_use is not None:
            check_tool_use(f"custom_envs.{name}", env.tool_use, cfg, tools)
    for key, manager in (("train_env_manager", cfg.train_env_manager),
                         ("val_env_manager", cfg.val_env_manager)):
        check_env_manager(key, manager, cfg)
    if cfg.partial_rollout:
        raise ConfigError("", "partial_rollout",
                          "is RLVR only: agentic turns are already short requests that each "
                          "run on the newest weights; set partial_rollout: false")
    group = cfg.train_env_manager.group_size
    if cfg.num_return_sequences_in_group != 1:
        raise ConfigError("", "num_return_sequences_in_group",
                          f"is {cfg.num_return_sequences_in_group}, but agentic groups are "
                          f"envs sharing a seed: set train_env_manager.group_size instead and "
                          f"leave num_return_sequences_in_group at 1")
    if cfg.rollout_batch_size % group:
        raise ConfigError("", "rollout_batch_size",
                          f"agentic rollout_batch_size counts trajectories; "
                          f"{cfg.rollout_batch_size} does not split into groups of "
                          f"train_env_manager.group_size={group}")
    per_turn = [k for k in ("turn_level_returns", "step_level_samples") if getattr(cfg, k)]
    if per_turn and (cfg.init_kl_coef > 0 or estimator_of(cfg).rows == "token"):
        raise ConfigError("", per_turn[0],
                          "per-turn advantages are computed from discounted env returns; "
                          "they do not combine with a KL reward penalty (init_kl_coef > 0; "
                          "use use_kl_loss instead) or with adv_estimator: gae")
    if cfg.actor_train.loss_agg_mode == "seq-mean-token-sum-norm" and cfg.sequence_length is None:
        raise ConfigError("", "actor_train.loss_agg_mode",
                          "seq-mean-token-sum-norm (Dr. GRPO) divides every trajectory by one "
                          "constant budget, which agentic runs take from sequence_length: "
                          "set sequence_length")
    val_group = cfg.val_env_manager.group_size
    if cfg.val_batch_size % val_group:
        raise ConfigError("", "val_batch_size",
                          f"{cfg.val_batch_size} validation trajectories do not split into "
                          f"groups of val_env_manager.group_size={val_group}")


def check_env_manager(key: str, manager: EnvManagerArgs, cfg: PipelineConfig) -> None:
    for name in ("num_env_groups", "group_size"):
        if getattr(manager, name) < 1:
            raise ConfigError("", f"{key}.{name}", f"must be at least 1, got "
                                                   f"{getattr(manager, name)}")
    envs = manager.num_env_groups * manager.group_size
    per_worker = manager.max_env_num_per_worker
    if per_worker < 0:
        raise ConfigError("", f"{key}.max_env_num_per_worker", f"must be >= 0, got {per_worker}")
    if per_worker and per_worker < manager.group_size:
        raise ConfigError("", f"{key}.max_env_num_per_worker",
                          f"{per_worker} envs per worker is less than group_size="
                          f"{manager.group_size}: a group lives in one worker (the pool of "
                          f"{envs} envs needs at least group_size per worker)")
    if not manager.tags:
        raise ConfigError("", f"{key}.tags", "needs at least one tag (a key of custom_envs)")
    for i, tag in enumerate(manager.tags):
        if tag not in cfg.custom_envs:
            raise ConfigError("", f"{key}.tags[{i}]",
                              f"unknown tag '{tag}'{did_you_mean(tag, cfg.custom_envs)}; "
                              f"declared in custom_envs: {', '.join(cfg.custom_envs) or 'none'}")
    partition = manager.num_groups_partition
    if partition and (len(partition) != len(manager.tags) or sum(partition) !=
                      manager.num_env_groups or min(partition) < 0):
        raise ConfigError("", f"{key}.num_groups_partition",
                          f"{partition} must give one group count >= 0 per tag "
                          f"({len(manager.tags)} tags) summing to num_env_groups="
                          f"{manager.num_env_groups}, or be left empty (equal split)")
    if manager.format_penalty is not None and manager.format_penalty > 0:
        raise ConfigError("", f"{key}.format_penalty",
                          f"must be <= 0 (a positive penalty pays for garbage), got "
                          f"{manager.format_penalty}")
    if manager.max_consecutive_env_failures < 1:
        raise ConfigError("", f"{key}.max_consecutive_env_failures",
                          f"must be >= 1, got {manager.max_consecutive_env_failures}")
    if manager.step_timeout_s <= 0:
        raise ConfigError("", f"{key}.step_timeout_s",
                          f"must be > 0 seconds, got {manager.step_timeout_s}")


def check_custom_env(key: str, env: CustomEnvConfig, cfg: PipelineConfig,
                     catalog: EnvCatalog) -> None:
    for name in ("max_steps", "max_tokens_per_step", "max_observation_chars"):
        if getattr(env, name) < 1:
            raise ConfigError("", f"{key}.{name}", f"must be at least 1, got "
                                                   f"{getattr(env, name)}")
    if env.env_import_path is not None:
        check_allowed_import(f"{key}.env_import_path", env.env_import_path, cfg)
    check_env_against(key, env, catalog)


def check_env_against(key: str, env: CustomEnvConfig, catalog: EnvCatalog) -> None:
    known = catalog.registered()
    if env.env_import_path is None:
        if env.env_type not in known:
            raise ConfigError("", f"{key}.env_type",
                              f"unknown env_type '{env.env_type}'"
                              f"{did_you_mean(env.env_type, known)}; known: {', '.join(known)}"
                              f" (or register your own with env_import_path)")
    elif env.env_type in catalog.builtin:
        raise ConfigError("", f"{key}.env_type",
                          f"'{env.env_type}' is a built-in env; give the imported env a name "
                          f"of its own")
    if env.agent_template is not None:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(env.agent_template) if f}
        except ValueError as error:
            raise ConfigError("", f"{key}.agent_template",
                              f"is not a valid template: {error}") from None
        unknown = sorted(fields - catalog.turn_placeholders)
        if unknown:
            raise ConfigError("", f"{key}.agent_template",
                              f"unknown placeholder(s) {unknown}; allowed: "
                              f"{sorted(catalog.turn_placeholders)} (write literal braces as "
                              f"{{{{ }}}})")
