"""What of a config a run writes down (config.yaml, tracker params, resume's change lines):
never a value that came from the environment, never a value under a secret's name.

Why: `tracker_kwargs.api_key: ${oc.env:WANDB_API_KEY}` resolved into `<run>/config.yaml`
and into an mlflow param, which `platform ui` serves. So:
- a key whose value, as written in the config file (or a `defaults:` file), uses
  `${oc.env:...}` is recorded as that reference, not its value; a resumed run, loading
  config.yaml, reads the variable again. A value that is a bare `${helper}` whose helper
  uses one counts too;
- any other value under a key named like a secret (`SECRET_KEY`: api_key, token,
  password, ...) is recorded as `REDACTED` (a literal secret written in the YAML, or on
  the command line, stays where the user wrote it; a resumed run gets `REDACTED`).

The run itself still gets the values: this is only what is written down.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from flywheel.config.loader import config_to_dict
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import KeyPath
from flywheel.platform.config.yaml_source import load_layers

SECRET_KEY = re.compile(r"(^|_)(api_?key|secret|password|passwd|token|access_key|credentials?)$",
                        re.IGNORECASE)
REDACTED = "<redacted>"
_ENV = "${oc.env:"
_BARE_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


def env_references(config_path: str | Path | None) -> dict[KeyPath, str]:
    """Key path -> the text written there, for every value of the config file (its
    `defaults:` merged in) that reads the environment; {} without a readable file."""
    if config_path is None or not Path(config_path).is_file():
        return {}
    data = load_layers(str(config_path)).data
    found: dict[KeyPath, str] = {}
    _walk(data, (), found)
    for path, text in list(_strings(data, ())):  # `${helper}` of a helper that reads one
        bare = _BARE_REFERENCE.fullmatch(text.strip())
        if bare and path not in found:
            target = found.get(tuple(bare.group(1).split(".")))
            if target is not None:
                found[path] = target
    return found


def persisted(data: dict[str, Any], references: dict[KeyPath, str]) -> dict[str, Any]:
    """`data` (config_to_dict's) as a run writes it down (module doc)."""
    out = _redact(copy.deepcopy(data))
    for path, text in references.items():  # a reference is no secret: it loads back
        _replace(out, path, text)
    return out


def _walk(node: Any, path: KeyPath, found: dict[KeyPath, str]) -> None:
    for key_path, text in _strings(node, path):
        if _ENV in text:
            found[key_path] = text


def _strings(node: Any, path: KeyPath):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, path + (i,))
    elif isinstance(node, str):
        yield path, node


def _replace(node: Any, path: KeyPath, text: str) -> None:
    for key in path[:-1]:
        if not _holds(node, key):
            return  # a helper, or a key dropped as inert: not written down
        node = node[key]
    if path and _holds(node, path[-1]):
        node[path[-1]] = text


def _holds(node: Any, key: Any) -> bool:
    if isinstance(node, dict):
        return key in node
    return isinstance(node, list) and isinstance(key, int) and key < len(node)


def _redact(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: REDACTED if isinstance(key, str) and SECRET_KEY.search(key)
                and node[key] is not None else _redact(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_redact(value) for value in node]
    return node


def written_config(cfg: PipelineConfig, config_path: str | Path | None) -> dict[str, Any]:
    """`config_to_dict(cfg)` as a run writes it down, `config_path` the file it came from."""
    return persisted(config_to_dict(cfg), env_references(config_path))
