"""Every error of a config file at once, for `platform validate`.

The loader stops at the first problem (a run needs no more), so fixing a file one error per
validate was a loop of edits. Like torchtune's `tune validate`, which gathers the problems of
every component before it reports, this keeps going: after each error it takes the key the
error names out of the merged data (the default then applies, or the block is left out) and
loads again, until the file loads or an error names no key that can be taken out (a problem
of the whole file, or of a value the user did not write), or the key's default breaks the
same rule again (then the first report stands). Each key is reported at most once, and an
error that names a key taken out ("acts only with use_kl_loss: true") is one the taking out
made: its key is taken out too, unreported.

An error found after a key was taken out is one the file has with that key fixed to its
default: a later error may go away with the fix of an earlier one, never the reverse.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from typing import Any

from flywheel.config.catalogs import Catalogs
from flywheel.config.loader import load_config_layers
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError, parse_key_path
from flywheel.platform.config.overrides import apply_overrides
from flywheel.platform.config.yaml_source import load_layers

MAX_ERRORS = 50  # a file with more is not the one the user meant to validate


def config_errors(path: str, overrides: Iterable[str] = (), *, catalogs: Catalogs,
                  convert_hint: Callable[[str, dict[str, Any]], str | None] | None = None
                  ) -> tuple[PipelineConfig | None, list[ConfigError], str | None]:
    """(the config or None, every error found, the caller's hint for the file or None:
    flywheel.pipelines.config passes the ROLL converter's, said once for all errors)."""
    layered = load_layers(path)  # a file that cannot be read is one error, raised
    apply_overrides(layered, overrides, PipelineConfig)
    hint = convert_hint(path, layered.data) if convert_hint else None
    errors: list[ConfigError] = []
    seen: set[str] = set()
    taken: set[str] = set()  # the names of the keys taken out
    while len(errors) < MAX_ERRORS:
        try:
            return (load_config_layers(copy.deepcopy(layered), catalogs=catalogs,
                                       hint=None), errors, hint)
        except ConfigError as error:
            if error.key_path in seen:  # its default breaks the same rule: said already
                break
            if not _follows_from(error, taken):
                errors.append(error)
            if not _take_out(layered.data, error.key_path):
                break
            seen.add(error.key_path)
            taken.add(str(parse_key_path(error.key_path)[-1]))
    return None, errors, hint


def _follows_from(error: ConfigError, taken: set[str]) -> bool:
    """The error names a key taken out ("acts only with use_kl_loss: true" once use_kl_loss
    is out): it comes from the taking out, not from the file, and is not reported."""
    return any(re.search(rf"\b{re.escape(name)}\b", error.message) for name in taken)


def _take_out(data: dict[str, Any], key_path: str) -> bool:
    """Remove the mapping key `key_path` ends in (a list item: the list's key) from
    `data`; False when it is not there."""
    parts = list(parse_key_path(key_path))
    while parts and isinstance(parts[-1], int):
        parts.pop()
    if not parts:
        return False
    node: Any = data
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else (
            node[part] if isinstance(node, list) and isinstance(part, int)
            and part < len(node) else None)
        if node is None:
            return False
    if not isinstance(node, dict) or parts[-1] not in node:
        return False
    del node[parts[-1]]
    return True
