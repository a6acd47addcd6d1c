"""From a YAML file (plus command-line overrides) to a checked `PipelineConfig`.

The stages, in order, each in its own module:

1. `yaml_source`: read the file with `yaml.safe_load`, merge its `defaults:` underneath;
2. `overrides`: apply `key.path=value` overrides on top;
3. `conversion.check_keys`: every key must be a schema field (so a misspelt key is reported
   as such, not as a reference that fails to resolve), except top-level helper variables
   that some `${...}` references (`helpers.py`);
4. `interpolation`: resolve `${key.path}` references (and the `oc.env` / `now` resolvers)
   in the merged data, then drop the helpers;
5. `conversion.to_config`: check every type against the schema, build dataclasses (dacite);
6. `checks`: cross-field rules, with the names of backends, rewards, loss variants,
   templates and envs checked against the `Catalogs` the caller passes (a required
   argument: `flywheel.pipelines.config` binds the project's own, `catalogs.py` says why);
7. `acts_when`: a key the user wrote (in a file or an override) that would do nothing in
   this config is refused (what was written is recorded before stage 4 fills anything in).

Every stage raises `ConfigError`; errors from stages that only see values get the name of
the layer that set the offending key (`layering.origin_of`). A caller's `hint` may add to an
error (`flywheel.pipelines.config` passes the ROLL converter's: any error in a file that
looks like one of ROLL's points at `platform convert --from roll`). Loading reads the YAML
files and, only where a config uses `${oc.env:...}` or `${now:...}`, the environment and the
clock (`resolvers.py`: why, and how a run records the values); no model or data access, no
derived fields filled in. Machine-dependent problems are warnings from
`environment_checks`, run separately.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from typing import Any

from flywheel.config.acts_when.check import check_written_keys, without_inert, written_paths
from flywheel.config.catalogs import Catalogs
from flywheel.config.checks.config import check_config
from flywheel.config.length_defaults import check_max_new_tokens, fill_max_new_tokens
from flywheel.config.schema import PipelineConfig
from flywheel.config.turn_budget import apply_turn_cap, take_turn_cap
from flywheel.platform.config.conversion import check_keys, to_config
from flywheel.platform.config.errors import ConfigError, parse_key_path
from flywheel.platform.config.helpers import helper_keys, without
from flywheel.platform.config.interpolation import resolve_references
from flywheel.platform.config.layering import Layered, copy_tree, merge_layer, origin_of
from flywheel.platform.config.overrides import apply_overrides
from flywheel.platform.config.resolvers import ResolverContext
from flywheel.platform.config.yaml_source import DEFAULTS_KEY, load_layers

# What a caller adds to a load error: the error and the merged data in, the error to raise out.
Hint = Callable[[ConfigError, dict[str, Any]], ConfigError]


def load_config(path: str | os.PathLike, overrides: Iterable[str] = (),
                context: ResolverContext | None = None, *,
                catalogs: Catalogs, hint: Hint | None = None) -> PipelineConfig:
    """Load, compose, override, interpolate, convert strictly and check one config file."""
    return _build(load_layers(path), overrides, catalogs, context, hint)


def load_config_with_section(path: str | os.PathLike, section: str,
                             overrides: Iterable[str] = (), *, catalogs: Catalogs,
                             hint: Hint | None = None) -> tuple[PipelineConfig, Any]:
    """`load_config` for a file that also holds one extra top-level block (`section`), which
    is taken out before the strict checks and returned as written (None when absent).

    For files that wrap a normal config with data for another tool, such as the regression
    expectations of `configs/ci/*.yaml`; everything else in the file is checked as usual."""
    layered = load_layers(path)
    extra = layered.data.pop(section, None)
    return _build(layered, overrides, catalogs, hint=hint), extra


def load_config_layers(layered: Layered, overrides: Iterable[str] = (), *,
                       catalogs: Catalogs, hint: Hint | None = None) -> PipelineConfig:
    """`load_config` for files already read and merged (`yaml_source.load_layers`), e.g. by
    a tool that edits the merged data before the strict checks (bench/roll_check.py)."""
    return _build(layered, overrides, catalogs, hint=hint)


def load_config_dict(data: dict[str, Any], source: str = "<dict>",
                     overrides: Iterable[str] = (), *, catalogs: Catalogs,
                     hint: Hint | None = None) -> PipelineConfig:
    """`load_config` for data already in memory (tests, programmatic use); no `defaults:`."""
    if not isinstance(data, dict):
        raise ConfigError(source, "", f"expected a mapping of keys, got {type(data).__name__}")
    if DEFAULTS_KEY in data:
        raise ConfigError(source, DEFAULTS_KEY, "defaults: needs a file to be relative to; "
                                                "use load_config on a YAML file")
    layered = Layered()
    merge_layer(layered, copy_tree(data, source), source)
    layered.origins[()] = source
    return _build(layered, overrides, catalogs, hint=hint)


def _build(layered: Layered, overrides: Iterable[str], catalogs: Catalogs,
           context: ResolverContext | None = None, hint: Hint | None = None) -> PipelineConfig:
    apply_overrides(layered, overrides, PipelineConfig)
    helpers = helper_keys(layered.data, PipelineConfig)
    try:
        check_keys(without(layered.data, helpers), PipelineConfig)
        as_written = copy_tree(without(layered.data, helpers), "")  # before any fill
        response_written = "response_length" in layered.data
        written = fill_max_new_tokens(layered.data)  # unset: ${response_length}
        resolved = without(resolve_references(layered.data, context, schema=PipelineConfig),
                           helpers)
        turn_cap = take_turn_cap(resolved)  # agentic: it caps the tags' turn budgets
        cfg = to_config(resolved, PipelineConfig)
        folded = apply_turn_cap(cfg, turn_cap)
        check_config(cfg, catalogs)
        check_max_new_tokens(cfg, written, response_written)
        check_written_keys(cfg, written_paths(as_written, resolved) - folded)  # acts_when/check.py
    except ConfigError as error:
        error = error.with_file(origin_of(layered.origins, parse_key_path(error.key_path)))
        raise (hint(error, layered.data) if hint else error) from None
    return cfg


def config_to_dict(cfg: PipelineConfig) -> dict[str, Any]:
    """Plain data for `cfg` (Literal values are plain strings) without the keys that do
    nothing in it (acts_when/check.py); loads back to an equal config."""
    return without_inert(dataclasses.asdict(cfg), cfg)
