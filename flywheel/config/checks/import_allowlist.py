"""The one allowlist of module prefixes that every import path in a config must lie under.

A config may name user code by "package.module:attr": an env (`custom_envs.*.
env_import_path`), a reward function (`rewards.*.reward_import_path`), and later tools.
Each is checked here against the top-level `import_allowlist` when the config loads, so a
path outside it never reaches a worker; `env_import_allowlist`, its former name, is read
as an alias, and both written with different values is refused. The check is on the
path's text only: nothing is imported here (loading a config runs no code of the user's).
Pure functions on a `PipelineConfig`, run by `checks.check_config`; each raises
`ConfigError`.
"""

from __future__ import annotations

from flywheel.config.kinds import scores_with_rewards
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.catalogs import IMPORT_PATH
from flywheel.platform.config.errors import ConfigError

KEY = "import_allowlist"
ALIAS = "env_import_allowlist"


def allowed_prefixes(cfg: PipelineConfig) -> list[str]:
    """The allowlist in force: import_allowlist, else its alias env_import_allowlist."""
    return list(cfg.import_allowlist or cfg.env_import_allowlist)


def check_import_allowlist(cfg: PipelineConfig) -> None:
    """The two spellings agree when both are written; every entry is a module prefix."""
    if (cfg.import_allowlist and cfg.env_import_allowlist
            and cfg.import_allowlist != cfg.env_import_allowlist):
        raise ConfigError("", ALIAS, f"is the former name of {KEY} and names other prefixes "
                                     f"({cfg.env_import_allowlist} against "
                                     f"{cfg.import_allowlist}); write {KEY} alone")
    for i, prefix in enumerate(allowed_prefixes(cfg)):
        key = KEY if cfg.import_allowlist else ALIAS
        if not (isinstance(prefix, str) and IMPORT_PATH.fullmatch(f"{prefix}:x")):
            raise ConfigError("", f"{key}[{i}]", f"'{prefix}' is not a module prefix "
                                                 f"(e.g. my_rewards or my_pkg.rewards)")


def check_allowed_import(key_path: str, path: str | None, cfg: PipelineConfig) -> None:
    """`path` is "package.module:attr" and its module lies under an allowed prefix."""
    if not isinstance(path, str) or not IMPORT_PATH.fullmatch(path):
        raise ConfigError("", key_path, f"'{path}' must look like 'package.module:name'")
    module = path.split(":")[0]
    allowed = allowed_prefixes(cfg)
    if not any(module == p or module.startswith(p + ".") for p in allowed):
        raise ConfigError("", key_path, f"module '{module}' is not under a prefix of {KEY} "
                                        f"({', '.join(allowed) or 'empty'}); add its package "
                                        f"there to allow importing it")


def check_import_paths(cfg: PipelineConfig) -> None:
    """The allowlist's two spellings, and every reward function's path (an env's path is
    checked with the other agentic keys, checks/agentic.py)."""
    check_import_allowlist(cfg)
    if not scores_with_rewards(cfg):  # the rewards: block acts only where it scores
        return
    for name, reward in cfg.rewards.items():
        key = f"rewards.{name}.reward_import_path"
        if reward.reward_type == "python":
            if reward.reward_import_path is None:
                raise ConfigError("", key, "is required with reward_type python: the "
                                           "function as 'package.module:function'")
            check_allowed_import(key, reward.reward_import_path, cfg)
