"""How a config problem is reported: one line that says where and what.

Every stage of loading (YAML, `defaults:`, overrides, `${...}`, strict conversion, cross-field
checks) raises the same `ConfigError(file, key_path, message)`, printed as
`<file>: <key.path>: <message>`. The CLI prints that line and exits 2; there is never a
traceback for a mistake in a config, so the message has to carry the fix: the full key path,
what was expected, what was found, and close candidates for a misspelt name.

Stages that work on values without knowing which file they came from (conversion, checks,
the device_mapping grammar) leave `file` empty; the loader fills it in from the layer that
last set that key (`layering.origin_of`), so a mistake in a `defaults:` file or on the
command line names that file, not the one the user ran.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

KeyPath = tuple[str | int, ...]

_NEWLINES = re.compile(r"\s*[\r\n]+\s*")


class ConfigError(Exception):
    """A config problem at one key; `str()` is `<file>: <key.path>: <message>`, one line."""

    def __init__(self, file: str, key_path: str, message: str) -> None:
        # All three go to Exception.args so the error pickles (it may cross a Ray boundary).
        super().__init__(file, key_path, message)
        self.file = file
        self.key_path = key_path
        self.message = message

    def __str__(self) -> str:
        parts = [part for part in (self.file, self.key_path) if part] + [self.message]
        return _NEWLINES.sub(" ", ": ".join(parts))

    def with_file(self, file: str) -> ConfigError:
        """The same error, naming `file` unless it already names one."""
        return self if self.file else ConfigError(file, self.key_path, self.message)


class StrategyConfigError(ConfigError, ValueError):
    """A strategy_config key the backend does not know, or a value it cannot use
    (workers/strategies/strategy_config.py); its key path is relative to the role (the
    config check prefixes the role's)."""


class MissingMemorySaving(StrategyConfigError):
    """A memory saving or speed-up the backend does not implement (megatron's interleaved
    pipeline schedule, its Transformer Engine RoPE fusion, sequence_parallel at TP 1, where
    it does nothing): the updates are the same without
    it, so a converted config may drop the key (config/roll_backends.py) where a user's own
    config is told to unset it."""


def format_key_path(path: Iterable[str | int]) -> str:
    """("actor_train", "data_args", "file_name", 0) -> "actor_train.data_args.file_name[0]"."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def parse_key_path(key_path: str) -> KeyPath:
    """The inverse of `format_key_path` (list indices become ints)."""
    parts: list[str | int] = []
    for segment in key_path.split(".") if key_path else []:
        name, *indices = segment.split("[")
        if name:
            parts.append(name)
        parts.extend(int(index.rstrip("]")) for index in indices if index.rstrip("]").isdigit())
    return tuple(parts)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """" (did you mean 'x'?)" for the closest candidates, or "" when none is close."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"'{c}'" for c in close) + "?)"


def describe_value(value: Any) -> str:
    """A value as the user wrote it in YAML terms: "str 'abc'", "int 3", "null", "mapping"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    kind = "mapping" if isinstance(value, dict) else type(value).__name__
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}"
