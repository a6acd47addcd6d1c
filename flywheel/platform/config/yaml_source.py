"""Reading config files: `yaml.safe_load` and `defaults:` composition.

Only `yaml.safe_load` ever parses a config, so a file can build nothing but plain mappings,
lists, strings, numbers, booleans and nulls; no tag in a config can construct an object.
The one quirk of PyYAML's YAML 1.1 reading that users trip over, `1e-5` read as a string,
is handled where the schema knows a float is wanted (`conversion.py`), not by changing the
YAML reader.

`defaults:` (a list of paths, relative to the file that names them) composes files the way
Hydra's defaults list does, without Hydra: each default is read with its own defaults first,
the defaults are merged in order, and the file itself goes on top. A file that (indirectly)
includes itself is an error naming the chain.

Reading a config opens these files and nothing else.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.layering import Layered, copy_tree, merge_layer

DEFAULTS_KEY = "defaults"


def read_yaml_mapping(path: str) -> dict[str, Any]:
    """The top-level mapping of one YAML file (an empty file is an empty mapping)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(path, "", "is a directory, expected a YAML file") from None
    except UnicodeDecodeError as error:
        raise ConfigError(path, "", f"not UTF-8 text ({error.reason})") from None
    except OSError as error:
        raise ConfigError(path, "", f"cannot read ({error.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(path, "", _describe_yaml_error(error)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(path, "", f"the top level must be a mapping of keys, got "
                                    f"{type(data).__name__}")
    return copy_tree(data, path)


def _describe_yaml_error(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    text = f"invalid YAML: {problem}" if mark is None else (
        f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}")
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    if context and context_mark is not None:
        text += f" ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    return text


def load_layers(path: str) -> Layered:
    """`path` with its `defaults:` merged underneath it, recursively."""
    path = os.fspath(path)
    layered = Layered()
    _merge_file(layered, path, chain=())
    layered.origins[()] = path  # keys no file set are fixed in the file the user named
    return layered


def _merge_file(layered: Layered, path: str, chain: tuple[str, ...]) -> None:
    real = os.path.realpath(path)
    if real in chain:
        names = " -> ".join(os.path.basename(p) for p in chain + (real,))
        raise ConfigError(path, DEFAULTS_KEY, f"defaults include each other in a cycle: {names}")
    data = read_yaml_mapping(path)
    for index, default in enumerate(_defaults_list(data, path)):
        child = os.path.normpath(os.path.join(os.path.dirname(path), default))
        if not os.path.isfile(child):
            raise ConfigError(path, f"{DEFAULTS_KEY}[{index}]",
                              f"default file '{default}' not found (looked for {child})")
        _merge_file(layered, child, chain + (real,))
    data.pop(DEFAULTS_KEY, None)
    merge_layer(layered, data, path)


def _defaults_list(data: dict[str, Any], path: str) -> list[str]:
    defaults = data.get(DEFAULTS_KEY, [])
    if defaults is None:
        return []
    if not isinstance(defaults, list) or not all(isinstance(d, str) and d for d in defaults):
        raise ConfigError(path, DEFAULTS_KEY,
                          "expected a list of YAML file paths relative to this file, "
                          "e.g. defaults: [base.yaml]")
    return defaults
