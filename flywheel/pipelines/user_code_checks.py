"""The user code a config names, imported and checked before a run starts.

Loading a config runs no code of the user's (config/checks/import_allowlist.py), so an
env module that does not import, or a misspelt `env_config` key, used to validate and then
fail some 40 s into the run, in the env check at its start. `platform validate` and
`platform run` call `check_user_code` after loading: it imports every module the config
names by import path, from the same folders a run's workers use (platform/user_code.py),
and checks what can be checked without building anything of the user's:

- an env (custom_envs.<tag>.env_import_path): the class imports and is a TextEnv, and the
  tag's env_config keys are its constructor's (a did-you-mean otherwise); a built-in env's
  env_config is checked the same way;
- a tool (custom_envs.<tag>.tool_use.tools[i].tool_import_path): the object imports and can
  be called;
- a reward function (rewards.<name>.reward_import_path): it imports and has one of the
  forms workers/rewards/user_function.py reads.

Each problem is a ConfigError at the key to change. Nothing is constructed or called, and
the imports run in a child process (`check_user_code_isolated`): a module that exits,
crashes or hangs while it imports is one line naming its key, not the end of the command.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from flywheel.config.checks.import_allowlist import allowed_prefixes
from flywheel.config.kinds import kind_of, scores_with_rewards
from flywheel.config.schema import PipelineConfig
from flywheel.envs import check_env_config, register_from_import_path
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.user_code import import_user_object
from flywheel.workers.rewards.user_function import user_function

IMPORT_TIMEOUT_S = 120.0  # a module still importing after this is reported as hanging


def check_user_code_isolated(cfg: PipelineConfig, timeout_s: float = IMPORT_TIMEOUT_S
                             ) -> None:
    """`check_user_code` in a forked child process. Its ConfigError comes back as one; a
    child that dies or hangs is a ConfigError at the key whose import it was doing."""
    context = multiprocessing.get_context("fork")  # before Ray and torch: nothing to break
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_check_in_child, args=(cfg, sender), daemon=True)
    child.start()
    sender.close()
    at, deadline = "", time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not receiver.poll(0.2):
                if child.is_alive():
                    continue
                if not receiver.poll(0):  # exited without a last word
                    break
            try:
                kind, key, message = receiver.recv()
            except EOFError:
                break
            if kind == "at":
                at = key
            elif kind == "error":
                raise ConfigError("", key, message)
            else:
                return
        else:
            raise ConfigError("", at, f"still importing after {timeout_s:g}s (a module that "
                                      f"hangs on import)")
        child.join(5)
        raise ConfigError("", at, f"importing it ended the process (exit code "
                                  f"{child.exitcode})")
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
        receiver.close()


def _check_in_child(cfg: PipelineConfig, sender: Any) -> None:
    try:
        check_user_code(cfg, lambda key: sender.send(("at", key, "")))
    except ConfigError as error:
        sender.send(("error", error.key_path, error.message))
    except BaseException as error:  # noqa: BLE001 (user code: reported as one line)
        sender.send(("error", "", f"{type(error).__name__}: {error}"))
    else:
        sender.send(("ok", "", ""))
    sender.close()


def check_user_code(cfg: PipelineConfig,
                    announce: Callable[[str], None] = lambda key: None) -> None:
    """Import and check the user code `cfg` names (see the module docstring); `announce`
    hears each key before its import."""
    def _imports(key_path: str, load: Callable[..., Any], *args: Any) -> Any:
        announce(key_path)
        return _import_at(key_path, load, *args)

    kind = kind_of(cfg)
    if kind.envs:
        for tag, env in cfg.custom_envs.items():
            key = f"custom_envs.{tag}"
            if env.env_import_path:
                _imports(f"{key}.env_import_path", register_from_import_path,
                         env.env_type, env.env_import_path, allowed_prefixes(cfg))
            try:
                check_env_config(env.env_type, env.env_config)
            except (TypeError, ValueError) as error:
                raise ConfigError("", f"{key}.env_config", str(error)) from None
            for i, tool in enumerate(env.tool_use.tools if env.tool_use else ()):
                if tool.tool_import_path:
                    at = f"{key}.tool_use.tools[{i}].tool_import_path"
                    built = _imports(at, import_user_object, tool.tool_import_path)
                    if not callable(built):
                        raise ConfigError("", at, f"names a {type(built).__name__}, not a "
                                                  f"class or function that builds the tool")
    if scores_with_rewards(cfg):
        for name, reward in cfg.rewards.items():
            if reward.reward_type == "python" and reward.reward_import_path:
                at = f"rewards.{name}.reward_import_path"
                path = reward.reward_import_path
                fn = _imports(at, import_user_object, path)
                try:
                    user_function(fn, path)
                except TypeError as error:
                    raise ConfigError("", at, str(error)) from None


def _import_at(key_path: str, load: Callable[..., Any], *args: Any) -> Any:
    """`load(*args)`, its failure (any: a module's own import may raise anything) a
    ConfigError at `key_path`."""
    try:
        return load(*args)
    except Exception as error:  # noqa: BLE001 (user code: one line naming the key)
        raise ConfigError("", key_path, f"cannot be imported: {type(error).__name__}: "
                                        f"{error}") from None
