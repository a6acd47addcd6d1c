"""Pipeline configuration: the YAML schema, its loader, and its checks.

`schema.py` declares the fields; `loader.load_config` turns a YAML file (with `defaults:`,
`${...}` references and command-line overrides) into a checked `PipelineConfig`, raising
`ConfigError` (one line: file, key path, what was expected) for anything wrong;
`environment_checks.check_environment` lists warnings about what this machine lacks for a
config. Both read the names of backends, rewards, losses, templates and envs from the
catalogs their caller hands in (`catalogs.py`); `flywheel.pipelines.config` holds the
project's catalogs and these functions with them bound: load configs from there.
"""

from flywheel.platform.config.device_mapping import parse_device_mapping
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.loader import config_to_dict
from flywheel.platform.config.schema import PipelineConfig

__all__ = [
    "ConfigError",
    "PipelineConfig",
    "config_to_dict",
    "parse_device_mapping",
]
