"""Top-level helper variables: keys that exist only to be `${...}`-referenced elsewhere.

ROLL's files (and Hydra users generally) write shared values once at the top level and
reference them: `max_actions_per_traj: 10` then `max_steps: ${max_actions_per_traj}`, or a
whole `custom_env:` tree copied into `custom_envs.FrozenLake: ${custom_env.FrozenLake}`.
Such a key is not a schema field, but it is not a mistake either.

The rule keeps the strict loader strict: a top-level key that is not a schema field is a
helper only if some value in the merged config references it (`${name}` or `${name.x}`).
A misspelt field is referenced by nothing, so it is still "unknown key 'max_step' (did you
mean 'max_steps'?)". Helpers take part in `${...}` resolution, then are dropped before the
typed conversion: they never reach the config, `show-config` or the run's config.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from flywheel.platform.config.conversion import field_types

# The first key of a `${a.b}` / `${a[0]}` reference; resolver calls (`${oc.env:X}`) have
# a colon after the name and are no reference to a key.
_REFERENCED_ROOT = re.compile(r"\$\{\s*([A-Za-z_][\w-]*)(?=\s*[.\[}])")


def helper_keys(data: dict[str, Any], schema: type) -> set[str]:
    """Top-level keys of `data` that are not fields of the root dataclass `schema` and are
    referenced somewhere."""
    unknown = {k for k in data if isinstance(k, str)} - set(field_types(schema))
    if not unknown:
        return set()
    referenced = {m.group(1) for text in _strings(data) for m in _REFERENCED_ROOT.finditer(text)}
    return unknown & referenced


def without(data: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """`data` minus the top-level `keys` (a shallow copy)."""
    return {k: v for k, v in data.items() if k not in keys}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if "${" in value:
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
