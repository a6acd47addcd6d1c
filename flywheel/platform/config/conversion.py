"""Strict conversion of merged config data into a schema's root dataclass.

Two passes. `normalize` walks the data beside the schema's type hints and either returns
data that matches them exactly or raises a `ConfigError` naming the full key path; then
`dacite.from_dict(..., Config(strict=True))` builds the dataclasses (and is a second check:
any mismatch it still finds is reported the same way).

Why the walk before dacite: dacite's errors lose the key of a `dict[str, Dataclass]` entry
(`rewards.<name>.x` is reported as `rewards.x`), an unknown key carries no path and no
suggestion, `True` passes as an int, and an int stays an int in a float field. The walk
fixes exactly those, and does the two conversions the schema asks for:

- float fields take ints and float-looking strings (`1e-5`, which PyYAML reads as a string;
  `1.0e-6` it reads as a float already); bools are never numbers;
- `device_mapping` fields go through the grammar in `device_mapping.py`;
- a string where `file_name` wants a list is a one-file list (ROLL writes one file so);
- `false` in `resume_from_checkpoint` is null (ROLL writes it so for "no resume").

A field declared with `field_bounds.bounded` is checked against its range here.

Nothing else is coerced: "8" is not an int and 8.0 is not an int. Literal fields list their
allowed values. `field_type_at` answers "what type lives at this key path" for overrides.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from typing import Any, Literal, TypeVar

import dacite

from flywheel.platform.config.device_mapping import parse_device_mapping
from flywheel.platform.config.errors import (
    ConfigError,
    KeyPath,
    describe_value,
    did_you_mean,
    format_key_path,
)
from flywheel.platform.config.field_bounds import check_bounds

T = TypeVar("T")

FLOAT_TEXT = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
# Fields parsed by the device_mapping grammar rather than by their declared type alone.
DEVICE_MAPPING_FIELDS = frozenset({"device_mapping"})
# list[str] fields where a single string means a one-item list.
ONE_OR_MORE_FIELDS = frozenset({"file_name"})
# `X | None` fields where `false` means null: ROLL writes `resume_from_checkpoint: false`
# for "no resume", and its files load as written; `true` there means "latest" (the run
# directory's newest complete checkpoint).
FALSE_MEANS_NULL = frozenset({"resume_from_checkpoint"})
TRUE_MEANS_LATEST = frozenset({"resume_from_checkpoint"})
# Unknown-key messages list every valid key when a dataclass has at most this many.
_LIST_KEYS_UP_TO = 12


def to_config(data: dict[str, Any], schema: type[T]) -> T:
    """The root dataclass `schema` (the run's: `flywheel.config.PipelineConfig`) from
    merged, interpolated data, checked strictly."""
    normalized = normalize(data, schema, ())
    try:
        return dacite.from_dict(schema, normalized, dacite.Config(strict=True))
    except dacite.DaciteFieldError as error:  # the walk should have caught it first
        raise ConfigError("", error.field_path or "", str(error)) from None
    except dacite.DaciteError as error:
        raise ConfigError("", "", str(error)) from None


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type hint for a schema dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def field_type_at(path: KeyPath, schema: type) -> Any:
    """The type at a key path of the root dataclass `schema`, or ConfigError for a path
    through an unknown key."""
    type_: Any = schema
    for depth, key in enumerate(path):
        inner = _strip_optional(type_)
        if inner is Any:
            return Any
        if dataclasses.is_dataclass(inner):
            type_ = _field_or_error(inner, key, path[:depth])
        elif typing.get_origin(inner) is dict:
            type_ = typing.get_args(inner)[1]
        else:
            raise ConfigError("", format_key_path(path[: depth + 1]),
                              f"'{format_key_path(path[:depth])}' is {type_name(type_)}, "
                              f"it has no keys")
    return type_


def _field_or_error(cls: type, key: Any, parent: KeyPath) -> Any:
    fields = field_types(cls)
    if key in fields:
        return fields[key]
    where = format_key_path(parent + (str(key),))
    hint = did_you_mean(str(key), fields)
    if not hint and len(fields) <= _LIST_KEYS_UP_TO:
        hint = f"; valid keys: {', '.join(fields)}"
    elif not hint:
        hint = "; `platform show-config` prints every key"
    raise ConfigError("", where, f"unknown key '{key}'{hint}")


def check_keys(value: Any, type_: Any, path: KeyPath = ()) -> None:
    """Raise for the first unknown key in `value`, before any value is interpreted.

    Run before `${...}` resolution, so a misspelt key is reported as such rather than as a
    reference that does not resolve."""
    inner = _strip_optional(type_)
    if not isinstance(value, dict):
        return
    if dataclasses.is_dataclass(inner):
        for key, item in value.items():
            check_keys(item, _field_or_error(inner, key, path), path + (key,))
    elif typing.get_origin(inner) is dict:
        for key, item in value.items():
            check_keys(item, typing.get_args(inner)[1], path + (key,))


def normalize(value: Any, type_: Any, path: KeyPath) -> Any:
    """`value` checked against `type_` (and converted where the docstring says)."""
    inner = _strip_optional(type_)
    if value is False and path and path[-1] in FALSE_MEANS_NULL and inner is not type_:
        value = None
    if value is True and path and path[-1] in TRUE_MEANS_LATEST:
        value = "latest"
    if value is None:
        if inner is not type_ or type_ is Any or type(None) in typing.get_args(type_):
            return None
        raise _wrong_type(type_, value, path)
    if path and path[-1] in DEVICE_MAPPING_FIELDS and inner == list[int]:
        return parse_device_mapping(value, format_key_path(path))
    if inner is Any:
        return value
    if dataclasses.is_dataclass(inner):
        return _normalize_dataclass(value, inner, type_, path)
    origin = typing.get_origin(inner)
    if origin is Literal:
        return _normalize_literal(value, inner, path)
    if origin is list:
        if isinstance(value, str) and path and path[-1] in ONE_OR_MORE_FIELDS:
            value = [value]
        if not isinstance(value, list):
            raise _wrong_type(type_, value, path)
        item_type = typing.get_args(inner)[0]
        return [normalize(item, item_type, path + (i,)) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong_type(type_, value, path)
        value_type = typing.get_args(inner)[1]
        for key in value:
            if not isinstance(key, str):
                raise ConfigError("", format_key_path(path + (str(key),)),
                                  f"keys must be strings, got {describe_value(key)}")
        return {k: normalize(v, value_type, path + (k,)) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):  # `float | Literal["model"]`: first fit
        for member in typing.get_args(inner):
            try:
                return normalize(value, member, path)
            except ConfigError:
                continue
        raise _wrong_type(type_, value, path)
    return _normalize_scalar(value, inner, type_, path)


def _normalize_dataclass(value: Any, cls: type, type_: Any, path: KeyPath) -> dict:
    if not isinstance(value, dict):
        raise _wrong_type(type_, value, path)
    out = {}
    for key, item in value.items():
        out[key] = normalize(item, _field_or_error(cls, key, path), path + (key,))
        check_bounds(cls, key, out[key], format_key_path(path + (key,)))
    return out


def _normalize_literal(value: Any, literal: Any, path: KeyPath) -> Any:
    allowed = typing.get_args(literal)
    if any(value == a and type(value) is type(a) for a in allowed):
        return value
    hint = did_you_mean(value, [str(a) for a in allowed]) if isinstance(value, str) else ""
    raise ConfigError("", format_key_path(path),
                      f"expected one of {', '.join(repr(a) for a in allowed)}, "
                      f"got {describe_value(value)}{hint}")


def _normalize_scalar(value: Any, inner: Any, type_: Any, path: KeyPath) -> Any:
    if inner is bool:
        ok = isinstance(value, bool)
    elif inner is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif inner is float:
        number = isinstance(value, int) and not isinstance(value, bool)
        if number or (isinstance(value, str) and FLOAT_TEXT.fullmatch(value.strip())):
            value = float(value)
        ok = isinstance(value, float)
    elif inner is str:
        ok = isinstance(value, str)
    else:
        raise ConfigError("", format_key_path(path), f"schema type {inner!r} is not supported")
    if not ok:
        raise _wrong_type(type_, value, path)
    return value


def _strip_optional(type_: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if typing.get_origin(type_) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(type_) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return type_


def type_name(type_: Any) -> str:
    """A schema type as a user reads it: "int", "list of str", "float or null"."""
    inner = _strip_optional(type_)
    if inner is not type_:
        return f"{type_name(inner)} or null"
    if dataclasses.is_dataclass(type_):
        return f"a mapping of {type_.__name__} keys"
    origin = typing.get_origin(type_)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else type_name(a)
                           for a in typing.get_args(type_))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(type_))
    if origin is list:
        return f"a list of {type_name(typing.get_args(type_)[0])}"
    if origin is dict:
        return f"a mapping of str to {type_name(typing.get_args(type_)[1])}"
    if type_ is Any:
        return "any value"
    return getattr(type_, "__name__", str(type_))


def _wrong_type(type_: Any, value: Any, path: KeyPath) -> ConfigError:
    return ConfigError("", format_key_path(path),
                       f"expected {type_name(type_)}, got {describe_value(value)}")
