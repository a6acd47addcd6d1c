"""Env registry: `env_type` names from YAML map to factories here, and only here.

Why a registry and not dotted paths everywhere: a name is checkable (an unknown one fails
with a did-you-mean list before anything runs), and a config can never make us import an
arbitrary module. The one escape hatch is `register_from_import_path`, for a user's own env
declared in YAML as "package.module:ClassName": the module must sit under a prefix the
caller allow-lists, it is loaded with importlib (never eval), and the class must subclass
`TextEnv`.

Unknown `env_config` keys are an error naming the key, checked against the factory's
signature before the env is built. Factories that take `**kwargs` are refused at
registration, because they could swallow a misspelt key silently.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from flywheel.envs.base import TextEnv
from flywheel.platform.config.catalogs import IMPORT_PATH, MissingAttribute, import_object
from flywheel.platform.user_code import make_user_code_importable

EnvFactory = Callable[..., TextEnv]

_REGISTRY: dict[str, EnvFactory] = {}


def register(name: str, factory: EnvFactory) -> None:
    """Make `make(name, ...)` build envs with `factory` (a TextEnv subclass or a function
    returning one). Registering the same factory twice is a no-op; another one under a
    taken name is a ValueError."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"env name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"env factory for {name!r} must be callable, got {factory!r}")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in _parameters(factory)):
        raise TypeError(
            f"env factory for {name!r} takes **kwargs, which would hide misspelt env_config "
            "keys; list its arguments explicitly"
        )
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not factory:
        raise ValueError(f"env name {name!r} is already registered to {existing!r}")
    _REGISTRY[name] = factory


def registered_envs() -> list[str]:
    """Names `make` accepts, sorted."""
    return sorted(_REGISTRY)


def make(env_type: str, **env_config: Any) -> TextEnv:
    """Build the env registered as `env_type` with `env_config` as keyword arguments."""
    factory = _REGISTRY.get(env_type)
    if factory is None:
        close = difflib.get_close_matches(str(env_type), _REGISTRY, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown env_type {env_type!r}.{hint} Known env types: "
            f"{', '.join(registered_envs()) or '(none)'}"
        )
    _check_config_keys(env_type, factory, env_config)
    env = factory(**env_config)
    if not isinstance(env, TextEnv):
        raise TypeError(
            f"env factory for {env_type!r} returned {type(env).__name__}, not a TextEnv"
        )
    return env


def register_from_import_path(
    name: str, import_path: str, allowed_prefixes: Sequence[str]
) -> type[TextEnv]:
    """Import "package.module:ClassName" and register the class as `name`.

    The module must equal one of `allowed_prefixes` or lie below it ("my_envs" allows
    "my_envs.maze" but not "my_envs_extra"). Returns the class.
    """
    if isinstance(allowed_prefixes, str):
        raise TypeError("allowed_prefixes must be a sequence of module prefixes, not one str")
    # the shape and the loading are platform's one checked import-path loader (catalogs.py)
    if not (isinstance(import_path, str) and IMPORT_PATH.fullmatch(import_path)):
        raise ValueError(
            f"env import path {import_path!r} must look like 'package.module:ClassName'"
        )
    module_name, _, attr = import_path.partition(":")
    if not any(module_name == p or module_name.startswith(p + ".") for p in allowed_prefixes):
        raise ValueError(
            f"env import path {import_path!r} is not allowed: module {module_name!r} is not "
            f"under an allowed prefix ({', '.join(allowed_prefixes) or 'none allowed'})"
        )
    make_user_code_importable()  # the run's working folder, as for every import path
    try:
        cls = import_object(import_path)
    except MissingAttribute:
        raise ImportError(
            f"env import path {import_path!r}: module has no attribute {attr!r}") from None
    except ImportError as exc:
        raise ImportError(f"env import path {import_path!r}: cannot import: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, TextEnv)):
        raise TypeError(
            f"env import path {import_path!r} names {cls!r}, which does not subclass "
            "flywheel.envs.TextEnv (reset(seed) -> (str, info), step(str) -> 5-tuple)"
        )
    register(name, cls)
    return cls


def check_env_config(env_type: str, env_config: dict[str, Any]) -> None:
    """What `make` checks before building: the name is registered and every env_config key
    is one of its factory's arguments (ValueError / TypeError with a did-you-mean). Builds
    nothing, so `platform validate` can run it."""
    if env_type not in _REGISTRY:
        make(env_type, **env_config)  # raises the same unknown-env_type error as a run
    _check_config_keys(env_type, _REGISTRY[env_type], env_config)


def _parameters(factory: EnvFactory) -> list[inspect.Parameter]:
    return list(inspect.signature(factory).parameters.values())


def _check_config_keys(env_type: str, factory: EnvFactory, env_config: dict[str, Any]) -> None:
    accepted = [
        p.name
        for p in _parameters(factory)
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    for key in env_config:
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"unknown env_config key {key!r} for env_type {env_type!r}.{hint} "
                f"Accepted keys: {', '.join(accepted) or '(none)'}"
            )
