"""Stacking config layers, remembering which layer set each key.

A config is built from layers: each `defaults:` file in order, the file itself, then the
command-line overrides. Mappings merge key by key, recursively; anything else (a scalar, a
list, null) replaces what was below it. Lists replace rather than append so that a layer can
always say exactly what it wants (`device_mapping`, `file_name`).

Beside the merged data we keep `origins`: for every mapping key path, the layer (a file name,
or "command line") that last set it. Errors found later, by stages that only see values,
name the file the user has to edit via `origin_of`.

YAML anchors and aliases make safe_load return one object shared by several keys; layers are
copied into fresh containers (`copy_tree`) so that overriding one key never changes another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flywheel.platform.config.errors import ConfigError, KeyPath, format_key_path

# Deeper than any real config; stops recursive aliases (`&a [*a]`) from recursing forever.
MAX_DEPTH = 64
# More values than any real config; stops nested aliases from expanding exponentially.
MAX_VALUES = 1_000_000


@dataclass
class Layered:
    """Merged config data plus, per mapping key path, the layer that set it."""

    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[KeyPath, str] = field(default_factory=dict)


def copy_tree(value: Any, source: str, path: KeyPath = ()) -> Any:
    """A copy of a YAML value with fresh dicts and lists (aliases become independent).

    Copying expands aliases, so nested aliases (a "billion laughs" file) could grow without
    bound; the copy stops at MAX_VALUES values, far beyond any real config."""
    budget = [MAX_VALUES]
    return _copy(value, source, path, budget)


def _copy(value: Any, source: str, path: KeyPath, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(source, "", f"more than {MAX_VALUES} values once YAML aliases are "
                                      f"expanded; a config is far smaller than that")
    if len(path) > MAX_DEPTH:
        raise ConfigError(source, format_key_path(path[:MAX_DEPTH]),
                          f"nested more than {MAX_DEPTH} levels deep (a recursive YAML alias?)")
    if isinstance(value, dict):
        return {k: _copy(v, source, path + (k,), budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v, source, path + (i,), budget) for i, v in enumerate(value)]
    return value


def set_origin(origins: dict[KeyPath, str], path: KeyPath, value: Any, source: str) -> None:
    """Record that `source` set `path` to `value`, forgetting older origins below `path`."""
    if path in origins:  # something was set here before: forget what it had below
        for old in [p for p in origins if len(p) > len(path) and p[: len(path)] == path]:
            del origins[old]
    origins[path] = source
    if isinstance(value, dict):
        for key, child in value.items():
            set_origin(origins, path + (key,), child, source)


def merge_layer(base: Layered, layer: dict[str, Any], source: str) -> None:
    """Merge `layer` (already a private copy) on top of `base`, in place."""
    base.origins.setdefault((), source)
    _merge_into(base, base.data, layer, (), source)


def _merge_into(base: Layered, target: dict, layer: dict, path: KeyPath, source: str) -> None:
    for key, value in layer.items():
        child = path + (key,)
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            base.origins.setdefault(child, source)
            _merge_into(base, target[key], value, child, source)
        else:
            target[key] = value
            set_origin(base.origins, child, value, source)


def origin_of(origins: dict[KeyPath, str], path: KeyPath) -> str:
    """The layer that set `path`, or its closest ancestor that some layer set."""
    for end in range(len(path), -1, -1):
        if path[:end] in origins:
            return origins[path[:end]]
    return ""
