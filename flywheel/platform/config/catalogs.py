"""Catalogs: the names a config may write for what is implemented above platform/.

Six keys name something platform/ does not implement: `strategy_args.strategy_name` (a
backend), `rewards.<name>.reward_type` (a reward), `actor_train.pg_variant` (a policy loss),
`data_args.template` (a prompt template), `custom_envs.<tag>.env_type` (an env) and
`custom_envs.<tag>.tool_use.tools[i].tool_id` (a tool). Each concept has one catalog,
kept by the layer that implements it:

    backends   flywheel/workers/strategies/registry.py   STRATEGIES     register_backend
    rewards    flywheel/workers/rewards/registry.py      REWARDS        register_reward
    losses     flywheel/algorithms/policy_loss/registry.py POLICY_LOSSES register_policy_loss
    templates  flywheel/pipelines/data/prompt_templates.py    TEMPLATES
    envs       flywheel/envs/registry.py                 (make, ...)    flywheel.envs.register
    tools      flywheel/tools/registry.py                TOOLS

An entry is a name and a small spec of strings and flags that names its implementation by
import path ("package.module:attr"), so reading a catalog imports no torch, Ray or backend
package (`platform validate` runs without them), and a process that never ran a user's
registration (a Ray worker, a reward's scoring process) still finds the implementation.
Adding a backend, a reward or a loss variant is one file and one line in its catalog.

Settings. A reward or a loss variant may declare settings of its own: a dataclass named by
import path in its spec (`settings`), whose fields are its keys, types and defaults and whose
`__post_init__` raises ValueError for a bad value (pure, like every check). A config gives
them in `rewards.<name>.reward_args` / `actor_train.pg_variant_args`; `entry_settings` checks
them against the dataclass with the loader's strict conversion when the config loads, and
the implementation reads them through the same function. So a new entry's knobs are
declared beside it and schema.py does not grow. flywheel's own rewards and variants keep the
keys ROLL gives them (`code_sandbox:`, `tis_lower_bound`, ...) and declare none.

The config checks read entries through the Protocols below (what they need of a spec, and
nothing more) and get every catalog as a required argument, `Catalogs`, assembled once above
both layers (`flywheel.pipelines.config`): no rule can be skipped because some module was not
imported first. A `Catalog` is a view of its owner's dict, so an entry registered after the
view was made is checked like a built-in one.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import dacite

from flywheel.platform.config.conversion import normalize
from flywheel.platform.config.errors import ConfigError, did_you_mean, parse_key_path

S = TypeVar("S")
T = TypeVar("T")

IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


class Catalog(Generic[S]):
    """Read-only view of one owner's entries (name -> spec), in the owner's order."""

    def __init__(self, key: str, entries: Mapping[str, S]) -> None:
        self.key = key  # the config key these names are values of, e.g. "reward_type"
        self._entries = entries  # the owner's dict itself: later registrations show

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, S]]:
        return list(self._entries.items())

    def get(self, name: str, key_path: str, hint: str = "") -> S:
        """The spec of `name`; a ConfigError at `key_path` listing the known names if none."""
        if name not in self._entries:
            raise ConfigError("", key_path, f"unknown {self.key} '{name}'"
                                            f"{did_you_mean(name, self._entries)}; known: "
                                            f"{', '.join(self._entries)}{hint}")
        return self._entries[name]


def register_entry(entries: dict[str, S], key: str, name: str, spec: S) -> None:
    """Add `spec` as `name` to an owner's dict: the same spec again is a no-op, another spec
    under a taken name a ValueError (a user's entry never silently replaces a built-in)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a {key} name must be a non-empty string, got {name!r}")
    if name in entries and entries[name] != spec:
        raise ValueError(f"{key} '{name}' is already registered as {entries[name]!r}")
    entries[name] = spec


def check_import_path(path: str, what: str) -> str:
    """`path` if it is shaped "package.module:attr", else ValueError naming `what`."""
    if not isinstance(path, str) or not IMPORT_PATH.fullmatch(path):
        raise ValueError(f"{what}: {path!r} must look like 'package.module:attr'")
    return path


def import_object(path: str) -> Any:
    """The object a "package.module:attr" path names, imported with importlib (never eval)."""
    module, attr = check_import_path(path, "import path").split(":")
    found = getattr(importlib.import_module(module), attr, None)
    if found is None:
        raise ImportError(f"{path}: module {module} has no attribute {attr}")
    return found


def entry_settings(path: str | None, given: dict[str, Any], key_path: str, owner: str) -> Any:
    """The settings an entry declares (`path`: its dataclass by import path), built from the
    config's `given` dict at `key_path`, or a ConfigError there; None when the entry declares
    none, and then `given` must be empty. `owner` names the entry in errors."""
    if path is None:
        if given:
            raise ConfigError("", key_path, f"{owner} declares no settings of its own; remove "
                                            f"{', '.join(given)}")
        return None
    try:
        cls = import_object(path)
    except (ImportError, ValueError) as e:
        raise ConfigError("", key_path, f"{owner}'s settings {path} cannot be imported: "
                                        f"{e}") from None
    return settings_from(cls, given, key_path)


def settings_from(cls: type[T], given: dict[str, Any], key_path: str) -> T:
    """`given` as the settings dataclass `cls`, converted and checked as a config's blocks
    are (unknown keys, types, the dataclass's own checks), or a ConfigError at `key_path`.
    What an entry's implementation calls on the dict the config gave it."""
    data = normalize(given, cls, parse_key_path(key_path))  # unknown keys, wrong types
    try:
        return dacite.from_dict(cls, data, dacite.Config(strict=True))
    except dacite.DaciteError as e:  # a field without a default left out
        raise ConfigError("", key_path, str(e)) from None
    except ValueError as e:  # the dataclass's own checks
        raise ConfigError("", key_path, str(e)) from None


class BackendEntry(Protocol):
    """What the checks read of a backend (`BackendSpec` in workers/strategies/registry.py)."""

    kind: Literal["train", "infer"]
    roles: tuple[str, ...]  # role kinds it can run (derived.Role.kind)
    takes_strategy_config: bool  # false: any strategy_config key would do nothing
    streams: bool  # loads weights while requests run (no partial-rollout segments)
    needs_cuda: bool
    latency_only: bool  # no model: scheduling benchmarks and tests (latency_sim.py)
    requires: str | None  # module that must be importable to run it
    install_hint: str
    config_check: str | None  # "module:function" of its light refusals (registry.py)


class RewardEntry(Protocol):
    """What the checks read of a reward (`RewardSpec` in workers/rewards/registry.py)."""

    kind: Literal["rule", "model"]  # rule: scored in Python, loads no model, no backend
    settings: str | None  # its settings dataclass by import path (reward_args), if any


class LossEntry(Protocol):
    """What the checks read of a policy loss (`LossSpec` in algorithms/policy_loss/)."""

    fn: str  # "package.module:function"
    settings: str | None  # its settings dataclass by import path (pg_variant_args), if any


class ToolEntry(Protocol):
    """What the checks read of a tool (`ToolSpec` in flywheel/tools/registry.py)."""

    build: str  # "module:function" building it
    settings: str | None  # its settings dataclass by import path (tool_args), if any


@dataclass(frozen=True)
class EnvCatalog:
    """The env names the agentic checks accept (flywheel.envs keeps the registry)."""

    registered: Callable[[], list[str]]  # every env name known now (built-in and user)
    builtin: frozenset[str]  # the names the env package registers itself
    turn_placeholders: frozenset[str]  # the fields an agent_template may use


@dataclass(frozen=True)
class Catalogs:
    """Every catalog the config checks read; `flywheel.pipelines.config.CATALOGS`."""

    backends: Catalog[BackendEntry]
    rewards: Catalog[RewardEntry]
    losses: Catalog[LossEntry]
    templates: Catalog[Literal["native", "chat"]]  # how a template encodes prompts
    envs: EnvCatalog
    # Tools that agentic episodes call (flywheel/tools/registry.py TOOLS), read by the
    # agentic checks (config/checks/tools.py).
    tools: Catalog[ToolEntry]
