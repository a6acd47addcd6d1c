"""Reading config files: `yaml.safe_load` and `defaults:` composition.

Only `yaml.safe_load` ever parses a config, so a file can build nothing but plain mappings,
lists, strings, numbers, booleans and nulls; no tag in a config can construct an object.
The one quirk of PyYAML's YAML 1.1 reading that users trip over, `1e-5` read as a string,
is handled where the schema knows a float is wanted (`conversion.py`), not by changing the
YAML reader.

`defaults:` (a list of paths, relative to the file that names them) composes files the way
Hydra's defaults list does, without Hydra: each default is read with its own defaults first,
the defaults are merged in order, and the file itself goes on top. A file that (indirectly)
includes itself is an error naming the chain. ROLL's spelling of an entry works as written:
`../config/traj_envs@_here_` (Hydra's "merge at the top level", the only placement flywheel
has, so `@_here_` is accepted and any other `@package` is an error) and a path without
`.yaml` (looked up as `.yaml`, then `.yml`).

A top-level `hydra:` block (Hydra's own run-directory settings, in nearly every ROLL file)
is accepted and ignored: it configures Hydra, which flywheel does not use, not the run.

Hydra's `_self_` entry says where the file's own keys go in that order: entries after it
merge on top of the file. Without one the file goes last (Hydra 1.1's default).

An empty file (nothing, or only comments) given as the config is an error rather than
"every default": it is almost always a wrong path or an unsaved editor buffer, and running
100 default steps on the built-in model is not what its author meant. An empty `defaults:`
fragment is an empty mapping, as Hydra reads it (ROLL's examples/config/envs.yaml is one).

Reading a config opens these files and nothing else.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.layering import Layered, copy_tree, merge_layer

DEFAULTS_KEY = "defaults"
# Hydra's own settings block: accepted in any file, dropped when the file is read.
HYDRA_KEY = "hydra"
# A defaults entry `path@_here_` merges at the top level, like every entry here.
HERE_PACKAGE = "@_here_"
# Hydra's defaults entry for the file's own keys.
SELF_ENTRY = "_self_"
YAML_SUFFIXES = (".yaml", ".yml")


def read_yaml_mapping(path: str, *, fragment: bool = False) -> dict[str, Any]:
    """The top-level mapping of one YAML file. An empty file is an error, or an empty
    mapping when it is a `defaults:` fragment (`fragment`)."""
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
    except RecursionError:  # 10,000 nested `[` or mappings: PyYAML recurses per level
        raise ConfigError(path, "", "nested too deeply to read (a config is a few levels "
                                    "of mappings and lists)") from None
    if data is None and fragment:
        return {}
    if data is None:
        raise ConfigError(path, "", "empty config file (nothing but comments or whitespace); "
                                    "a config sets at least one key, e.g. pipeline_type: rlvr")
    if not isinstance(data, dict):
        raise ConfigError(path, "", f"the top level must be a mapping of keys, got "
                                    f"{type(data).__name__}")
    try:
        return copy_tree(data, path)
    except RecursionError:
        raise ConfigError(path, "", "nested too deeply to read (a config is a few levels "
                                    "of mappings and lists)") from None


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
    data = read_yaml_mapping(path, fragment=bool(chain))
    defaults = _defaults_list(data, path)
    data.pop(DEFAULTS_KEY, None)
    data.pop(HYDRA_KEY, None)
    if SELF_ENTRY not in defaults:
        defaults = [*defaults, SELF_ENTRY]
    for index, default in enumerate(defaults):
        if default == SELF_ENTRY:
            merge_layer(layered, data, path)
            continue
        child = _default_path(path, default, f"{DEFAULTS_KEY}[{index}]")
        _merge_file(layered, child, chain + (real,))


def _default_path(path: str, default: str, key: str) -> str:
    """The file a defaults entry names: relative to `path`, `@_here_` and `.yaml` optional."""
    name, at, package = default.partition("@")
    if at and f"@{package}" != HERE_PACKAGE:
        raise ConfigError(path, key, f"'{default}': only '{HERE_PACKAGE}' placement is "
                                     f"supported (a default always merges at the top level)")
    base = os.path.normpath(os.path.join(os.path.dirname(path), name.strip()))
    candidates = [base] if base.endswith(YAML_SUFFIXES) else [
        base] + [base + suffix for suffix in YAML_SUFFIXES]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    looked = " or ".join(candidates)
    raise ConfigError(path, key, f"default file '{default}' not found (looked for {looked})")


def _defaults_list(data: dict[str, Any], path: str) -> list[str]:
    defaults = data.get(DEFAULTS_KEY, [])
    if defaults is None:
        return []
    if not isinstance(defaults, list) or not all(isinstance(d, str) and d for d in defaults):
        raise ConfigError(path, DEFAULTS_KEY,
                          "expected a list of YAML file paths relative to this file, "
                          "e.g. defaults: [base.yaml]")
    if defaults.count(SELF_ENTRY) > 1:
        raise ConfigError(path, DEFAULTS_KEY, f"'{SELF_ENTRY}' (where this file's own keys "
                                              f"go) may appear once")
    return defaults
