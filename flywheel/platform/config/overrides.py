"""Command-line overrides: `key.path=value`, the last layer on top of the files.

The value is read by `yaml.safe_load`, so it means what it would mean in the file: `20` is an
int, `true` a bool, `null` (or nothing after `=`) is None, `[0, 1]` a list, `{a: 1}` a mapping
and `list(range(0,4))` a string for the device_mapping grammar. One exception to YAML 1.1:
an unquoted `1e-5` is a float here (PyYAML would read a string), since nobody types that on
a command line meaning text; quote it (`'"1e-5"'`) to keep a string.

The path is checked against the schema before anything is set, with the same unknown-key
error and suggestions as the file gets, naming "command line" and the override. Inside a
free-form mapping (`strategy_config`, and `rewards.<name>`, whose names are the user's) an
override may create new keys, and so may one of a top-level helper variable the files
reference (`max_actions_per_traj=5`; `helpers.py`). Intermediate mappings are created as
needed, so
`reference.device_mapping=[2]` adds a reference role that was not in the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from flywheel.platform.config.conversion import FLOAT_TEXT, field_type_at
from flywheel.platform.config.errors import ConfigError, KeyPath, parse_key_path
from flywheel.platform.config.helpers import helper_keys
from flywheel.platform.config.layering import Layered, copy_tree, set_origin
from flywheel.platform.config.yaml_source import DEFAULTS_KEY

SOURCE = "command line"


def parse_override(text: str) -> tuple[KeyPath, Any]:
    """"a.b=1e-5" -> (("a", "b"), 1e-05)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(SOURCE, "", f"override {text!r} is not key.path=value "
                                      f"(e.g. max_steps=20)")
    path = parse_key_path(key)
    if not path or any(part == "" for part in key.split(".")):
        raise ConfigError(SOURCE, key, f"override {text!r}: '{key}' is not a dotted key path")
    if path[0] == DEFAULTS_KEY:
        raise ConfigError(SOURCE, key, "defaults can only be listed in a config file")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(SOURCE, key, f"override {text!r}: cannot read the value: "
                                       f"{problem}") from None
    if isinstance(value, str) and FLOAT_TEXT.fullmatch(raw.strip()):
        value = float(value)
    return path, copy_tree(value, SOURCE, path)


def apply_overrides(layered: Layered, overrides: Iterable[str], schema: type) -> None:
    """Set each override in `layered`, in order, after checking its path against the root
    dataclass `schema`."""
    helpers = helper_keys(layered.data, schema)
    for text in overrides:
        path, value = parse_override(text)
        try:
            if path[0] not in helpers:
                field_type_at(path, schema)
        except ConfigError as error:
            raise ConfigError(SOURCE, error.key_path,
                              f"override {text!r}: {error.message}") from None
        _set(layered.data, path, value)
        set_origin(layered.origins, path, value, SOURCE)


def _set(data: dict[str, Any], path: KeyPath, value: Any) -> None:
    node = data
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}  # also replaces a null block (`reference: null`) being filled in
        node = node[key]
    node[path[-1]] = value
