"""Catalogs: names a config may write, each naming its implementation by import path.

A `Catalog` is a read-only view of one owner's dict (name -> a small spec of strings and
flags), kept by the layer that implements the concept; `register_entry` adds to such a dict
(the same spec again is a no-op, another spec under a taken name an error). A spec names its
implementation by import path ("package.module:attr"), so reading a catalog imports no
torch, Ray or backend package, and a process that never ran a user's registration still
finds the implementation: `import_object` is the one checked loader every extension point
uses (shape checked by `check_import_path`, imported with importlib, never eval).

Settings. An entry may declare settings of its own: a dataclass named by import path in its
spec, whose fields are its keys, types and defaults and whose `__post_init__` raises
ValueError for a bad value (pure, like every check). `entry_settings` checks what a config
gives against the dataclass with the loader's strict conversion when the config loads, and
the implementation reads them through the same function.

Which catalogs the run's config reads, and what it reads of each entry, is
`flywheel/config/catalogs.py`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

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


def register_entry(entries: dict[str, S], key: str, name: str, spec: S,
                   spec_type: type | None = None) -> None:
    """Add `spec` as `name` to an owner's dict: the same spec again is a no-op, another spec
    under a taken name a ValueError (a user's entry never silently replaces a built-in);
    with `spec_type`, a spec of another type is a ValueError too."""
    if spec_type is not None and not isinstance(spec, spec_type):
        raise ValueError(f"{key} {name!r}: expected a {spec_type.__name__}, got "
                         f"{type(spec).__name__}")
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


class MissingAttribute(ImportError):
    """The module of an import path imported, but has no such attribute."""


def import_object(path: str) -> Any:
    """The object a "package.module:attr" path names, imported with importlib (never eval):
    the one loader every extension point's import path goes through."""
    module, attr = check_import_path(path, "import path").split(":")
    found = getattr(importlib.import_module(module), attr, None)
    if found is None:
        raise MissingAttribute(f"{path}: module {module} has no attribute {attr}")
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
