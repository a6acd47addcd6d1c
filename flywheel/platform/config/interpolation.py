"""`${key.path}` references between config values.

A value that is exactly one reference takes the referenced value itself, type included:
`num_return_sequences: ${num_return_sequences_in_group}` stays an int and `${actor_train}`
copies a whole block. A reference inside a longer string is replaced by the value's text
(YAML spelling: true, false, null). A referenced value that itself holds references is
resolved first; a chain that comes back to where it started is an error naming the chain.

References resolve after `defaults:` and overrides are merged, so `max_steps=20` on the
command line changes every `${max_steps}`. A key nobody set resolves to the schema's default
for it (the same default dacite would fill in), so `${response_length}` works without
writing response_length down.

Deliberately small: a path is dotted keys and list indices (`a.b`, `a.b[0]` or `a.b.0`).
Two resolvers exist, `${oc.env:VAR[,default]}` and `${now:FORMAT}` (`resolvers.py`, which
says why they are the one exception to "loading reads only YAML files"); anything else
after a colon is an error, and no resolver runs code. A literal `${` cannot be written; no
config needs one yet.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

from flywheel.platform.config.conversion import field_type_at
from flywheel.platform.config.errors import (
    ConfigError,
    KeyPath,
    did_you_mean,
    format_key_path,
    parse_key_path,
)
from flywheel.platform.config.resolvers import ResolverContext, resolve_call

_REFERENCE = re.compile(r"\$\{([^${}]*)\}")
_SEGMENT = r"(?:[A-Za-z_][\w-]*|\d+)(?:\[\d+\])*"
_PATH = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
_MISSING = object()


def resolve_references(data: dict[str, Any], context: ResolverContext | None = None, *,
                       schema: type) -> dict[str, Any]:
    """A copy of `data` with every `${...}` replaced; ConfigError naming the key otherwise.
    A reference to a key the data leaves out reads the default of the root dataclass
    `schema`."""
    return _Resolver(data, context or ResolverContext(), schema).resolve(data, ())


class _Resolver:
    def __init__(self, data: dict[str, Any], context: ResolverContext, schema: type) -> None:
        self.data = data
        self.context = context
        self.schema = schema
        self.done: dict[KeyPath, Any] = {}  # fully resolved values by key path
        self.stack: list[KeyPath] = []  # paths being resolved, outermost first

    def resolve(self, value: Any, path: KeyPath) -> Any:
        if path in self.done:
            return self.done[path]
        self.stack.append(path)
        try:
            if isinstance(value, dict):
                out: Any = {k: self.resolve(v, path + (k,)) for k, v in value.items()}
            elif isinstance(value, list):
                out = [self.resolve(v, path + (i,)) for i, v in enumerate(value)]
            elif isinstance(value, str) and "${" in value:
                out = self._resolve_string(value, path)
            else:
                out = value
        finally:
            self.stack.pop()
        self.done[path] = out
        return out

    def _resolve_string(self, text: str, path: KeyPath) -> Any:
        whole = _REFERENCE.fullmatch(text)
        if whole:
            return copy.deepcopy(self._follow(whole.group(1), path))
        resolved = _REFERENCE.sub(lambda m: _as_text(self._follow(m.group(1), path), m, path),
                                  text)
        if "${" in resolved:
            raise ConfigError("", format_key_path(path),
                              f"cannot read {text!r}: a '${{' without its '}}', or a reference "
                              f"inside a reference; write ${{key.path}}")
        return resolved

    def _follow(self, reference: str, path: KeyPath) -> Any:
        where = format_key_path(path)
        ref = reference.strip()
        if not _PATH.fullmatch(ref):
            name, colon, args = ref.partition(":")
            if colon:
                return resolve_call(name.strip(), args, self.context, where)
            raise ConfigError("", where, f"${{{reference}}} is not a key path like ${{a.b}}")
        target = tuple(int(p) if isinstance(p, str) and p.isdigit() else p
                       for p in parse_key_path(ref))
        if target in self.stack:
            start = self.stack.index(target)
            chain = [p for p in self.stack[start:] if isinstance(self._raw(p), str)]
            names = " -> ".join(format_key_path(p) for p in chain + [target])
            raise ConfigError("", where,
                              f"${{{reference}}} is part of a reference cycle: {names}")
        value = self._raw(target)
        if value is _MISSING:
            return self._default(target, reference, where)
        return self.resolve(value, target)

    def _raw(self, path: KeyPath) -> Any:
        node: Any = self.data
        for key in path:
            in_dict = isinstance(node, dict) and key in node
            in_list = isinstance(node, list) and isinstance(key, int) and key < len(node)
            if not (in_dict or in_list):
                return _MISSING
            node = node[key]
        return node

    def _default(self, target: KeyPath, reference: str, where: str) -> Any:
        """The schema default at `target` where the data stops short of it."""
        depth = 0
        while self._raw(target[: depth + 1]) is not _MISSING:
            depth += 1
        node = self._raw(target[:depth])
        try:
            parent_type = (field_type_at(target[:depth], self.schema) if isinstance(node, dict)
                           else None)
        except ConfigError:
            parent_type = None
        candidates = list(node) if isinstance(node, dict) else []
        if isinstance(parent_type, type) and dataclasses.is_dataclass(parent_type):
            node, data_depth = dataclasses.asdict(parent_type()), depth  # what dacite fills in
            while depth < len(target) and isinstance(node, dict) and target[depth] in node:
                node, depth = node[target[depth]], depth + 1
            if depth == len(target):
                return node
            defaults = list(node) if isinstance(node, dict) else []
            candidates = candidates + defaults if depth == data_depth else defaults
        missing = format_key_path(target[: depth + 1])
        hint = did_you_mean(str(target[depth]), candidates)
        raise ConfigError("", where, f"${{{reference}}} refers to '{missing}', which is "
                                     f"not set{hint}")


def _as_text(value: Any, match: re.Match, path: KeyPath) -> str:
    if isinstance(value, (dict, list)):
        kind = "mapping" if isinstance(value, dict) else "list"
        raise ConfigError("", format_key_path(path),
                          f"{match.group(0)} is a {kind} and cannot be part of a longer string")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
