"""Tab completion of config key paths for `platform run/validate/show-config`.

argcomplete completes subcommands and options from the argparse parser by itself; the
`key.path=value` overrides need their candidates from the schema: every dataclass field
path (`actor_train.training_args.learning_rate=`), walked from `PipelineConfig`. Mapping
fields (`rewards.<name>`, `custom_envs.<tag>`) stop at their own name.
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache

from flywheel.config.schema import PipelineConfig


@cache
def config_key_paths() -> tuple[str, ...]:
    return tuple(_paths(PipelineConfig, ""))


def _paths(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        out.append(path)
        inner = _dataclass_in(hints[f.name])
        if inner is not None:
            out += _paths(inner, path + ".")
    return out


def _dataclass_in(hint) -> type | None:
    """The dataclass a field holds (also `X | None`), else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) is dict:
        return None  # keyed by the user's names: nothing to complete below
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def config_key_completer(prefix: str, **_) -> list[str]:
    """argcomplete's completer for the overrides: `key.path=` for paths starting so."""
    if "=" in prefix:
        return []
    return [f"{p}=" for p in config_key_paths() if p.startswith(prefix)]
