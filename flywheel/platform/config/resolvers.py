"""The two `${name:args}` resolvers a config may use: `oc.env` and `now`.

ROLL's files (through OmegaConf/Hydra) use exactly these two: `${oc.env:WANDB_API_KEY}` for
secrets and paths that differ per machine, `${now:%Y%m%d_%H%M%S}` for a fresh run directory.
They are the one place where loading a config looks at anything besides its YAML files: the
process environment and the clock. That is why they are resolved exactly once, when
`platform run` loads the config, and the run's `config.yaml` records the resolved `now`
values; a resumed run is started from that `config.yaml` and so sees the same values, not a
new time. An `oc.env` value is recorded as its reference (persisted.py: a secret read from
the environment is never written down), so a resumed run reads the variable again.

- `${oc.env:VAR}`: the variable's text; unset is an error naming the key.
  `${oc.env:VAR,default}`: the default when unset (`null` gives null; quotes are stripped).
- `${now:FORMAT}`: the load's start time through `time.strftime(FORMAT)`; every `${now:...}`
  of one load reads the same instant, so two keys naming the run directory agree.

Anything else (`${eval:...}`, `${oc.select:...}`) is an error: no resolver runs code.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from flywheel.platform.config.errors import ConfigError

RESOLVERS = ("oc.env", "now")


@dataclass(frozen=True)
class ResolverContext:
    """What the resolvers may read, captured once per load (tests pass their own)."""

    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    now: time.struct_time = field(default_factory=time.localtime)


def resolve_call(name: str, args: str, context: ResolverContext, where: str) -> Any:
    """The value of `${name:args}` at key path `where`."""
    if name == "oc.env":
        return _env(args, context, where)
    if name == "now":
        if not args.strip():
            raise ConfigError("", where, "${now:FORMAT} needs a strftime format, "
                                         "e.g. ${now:%Y%m%d_%H%M%S}")
        return time.strftime(args, context.now)
    raise ConfigError("", where, f"${{{name}:{args}}}: unknown resolver '{name}'; only "
                                 f"{', '.join(RESOLVERS)} are supported (no resolver runs code)")


def _env(args: str, context: ResolverContext, where: str) -> Any:
    variable, has_default, default = args.partition(",")
    variable = variable.strip()
    if not variable:
        raise ConfigError("", where, "${oc.env:VAR} needs a variable name")
    if variable in context.environ:
        return context.environ[variable]
    if not has_default:
        raise ConfigError("", where, f"${{oc.env:{variable}}}: environment variable "
                                     f"{variable} is not set (set it, or give a default: "
                                     f"${{oc.env:{variable},DEFAULT}})")
    default = default.strip()
    if default == "null":
        return None
    if len(default) >= 2 and default[0] == default[-1] and default[0] in "'\"":
        return default[1:-1]
    return default
