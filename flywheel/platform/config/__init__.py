"""Generic config machinery: YAML sources and `defaults:` layering, `${...}` interpolation
and its resolvers, `key.path=value` overrides, strict conversion into dataclasses, one-line
errors, the device_mapping grammar, and `Catalog` with its one checked import-path loader.

It knows no schema: the caller passes the root dataclass. The run's schema, its checks and
its loader are `flywheel.config`; `flywheel.pipelines.config` binds them to the project's
catalogs: load configs from there.
"""

from flywheel.platform.config.device_mapping import parse_device_mapping
from flywheel.platform.config.errors import ConfigError

__all__ = [
    "ConfigError",
    "parse_device_mapping",
]
