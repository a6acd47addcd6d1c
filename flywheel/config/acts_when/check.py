"""Keys that act only under a condition: refused where the user wrote them and it is off.

A key a user writes either acts or is refused. Most keys act in every config; some are read
only under one loss variant, feature, role, backend or pipeline type (`pg_clip_high` only by
ppo's clip-higher range, `lambd` only by gae, a `reference:` block only by a KL term). Each
such key has a row in `acts_when_table.ROWS`: the key path, the condition it needs, what it
does where it acts and what to write instead. This module applies the table:

- `check_written_keys`: a key the user WROTE (in the file, its `defaults:` files or a
  command-line override, at any value, its default included) while its condition is off is
  a `ConfigError` naming the key and why. Keys the user did not write stay silent, whatever
  the schema's default. Whether a key was written is visible only in the merged YAML data
  (a default and a written default look alike in the dataclasses), so the loader records
  the written paths (`written_paths`) before anything is filled in.
- `inert_paths`: the same question for every key of some data, as if all were written:
  `config_to_dict` leaves those keys out (so show-config and a run's config.yaml hold only
  keys that act, and a saved config loads back), and `platform convert` drops the ROLL keys
  that would do nothing in the converted file, reporting why.

What it does not do: check values (checks.py, checks/keys.py) or fill anything in. To make
a new key conditional: one `ActsWhen` row (acts_when/rule.py) in acts_when/table.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import flywheel.config.acts_when.table as acts_when_table  # ROWS read when called
from flywheel.config.acts_when.rule import ActsWhen
from flywheel.config.kinds import kind_of
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError, KeyPath, format_key_path

ANY = "*"  # a key pattern segment standing for any one key (a reward's or an env tag's name)


def written_paths(as_written: dict[str, Any], resolved: dict[str, Any]) -> set[KeyPath]:
    """Every mapping key path of the data as the user wrote it (before any key is filled
    in), plus the paths inside a block written as a `${...}` reference to another block."""
    paths: set[KeyPath] = set()

    def walk(node: dict[str, Any], same: Any, prefix: KeyPath) -> None:
        for key, value in node.items():
            path = prefix + (key,)
            paths.add(path)
            other = same.get(key) if isinstance(same, dict) else None
            if isinstance(value, dict):
                walk(value, other, path)
            elif isinstance(other, dict):  # `key: ${a.block}` wrote that whole block
                walk(other, other, path)

    walk(as_written, resolved, ())
    return paths


def matches(pattern: tuple[str, ...], path: KeyPath) -> bool:
    return len(pattern) == len(path) and all(p in (ANY, k) for p, k in zip(pattern, path))


def value_at(cfg: Any, path: KeyPath) -> Any:
    """The loaded value at `path` (attributes of dataclasses, keys of mappings)."""
    node = cfg
    for key in path:
        node = node.get(key) if isinstance(node, dict) else getattr(node, str(key), None)
    return node


def inert(cfg: PipelineConfig, paths: Iterable[KeyPath],
          rows: Iterable[ActsWhen] | None = None) -> Iterator[tuple[KeyPath, ActsWhen]]:
    """(path, the first row it breaks) for each of `paths` that would do nothing in `cfg`,
    in row order."""

    paths = sorted(set(paths), key=format_key_path)
    for row in acts_when_table.ROWS if rows is None else rows:
        for path in paths:
            if not matches(row.pattern, path):
                continue
            if row.block and value_at(cfg, path) is None:
                continue  # `reference: null` declares no reference
            if not row.needs.holds(cfg, path):
                yield path, row


def check_written_keys(cfg: PipelineConfig, written: set[KeyPath]) -> None:
    """Refuse the first written key that would do nothing in `cfg` (ConfigError)."""
    for path, row in inert(cfg, written):
        raise ConfigError("", format_key_path(path), row.message(cfg))
    check_validation_schedule(cfg)


def check_validation_schedule(cfg: PipelineConfig) -> None:
    """RLVR validates only from a validation block, every eval_steps (the block without
    eval_steps is a `validation` row of the table)."""
    kind = kind_of(cfg)
    if kind.rl and kind.prompts and cfg.eval_steps and cfg.validation is None:
        raise ConfigError("", "eval_steps", f"is {cfg.eval_steps} but there is no validation "
                                            f"block to validate on: add "
                                            f"validation.data_args.file_name, or set "
                                            f"eval_steps: 0")


def data_paths(data: Any, prefix: KeyPath = ()) -> Iterator[KeyPath]:
    """Every mapping key path of plain data."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield prefix + (key,)
            yield from data_paths(value, prefix + (key,))


def without_inert(data: dict[str, Any], cfg: PipelineConfig) -> dict[str, Any]:
    """`data` (config_to_dict's plain data of `cfg`) without the keys that do nothing in
    `cfg`: in a config that loaded, each is at its default, so the result loads back to
    `cfg` (nothing the user wrote is lost: a written inert key was refused)."""
    gone = {path for path, _ in inert(cfg, data_paths(data))}
    return _prune(data, gone, ())


def _prune(node: Any, gone: set[KeyPath], prefix: KeyPath) -> Any:
    if not isinstance(node, dict):
        return node
    return {k: _prune(v, gone, prefix + (k,)) for k, v in node.items()
            if prefix + (k,) not in gone}


def table_markdown() -> list[str]:
    """The table as a Markdown section of the configuration reference (rows that share
    their condition and meaning on one line)."""

    merged: dict[tuple[str, str], list[str]] = {}
    for row in acts_when_table.ROWS:
        merged.setdefault((row.needs.says, row.does), []).append(f"`{row.key}`")
    out = ["## Keys that act only under a condition {#acts-when}", "",
           "Written where their condition is off (in the file, a `defaults:` file or an "
           "override, even at the default value), these keys are refused with the reason; "
           "left unwritten they are never refused (`flywheel/config/acts_when/table.py`). "
           "`*` stands for any name.", "",
           "| keys | act only | what they do there |", "|---|---|---|"]
    for (says, does), keys in merged.items():
        out.append(f"| {', '.join(keys)} | {says} | {does} |")
    return out + [""]
