"""Pipeline configuration: the YAML schema, its loader, and its checks.

`schema.py` declares the fields; `loader.load_config` turns a YAML file (with `defaults:`,
`${...}` references and command-line overrides) into a checked `PipelineConfig`, raising
`ConfigError` (one line: file, key path, what was expected) for anything wrong;
`check_environment` lists warnings about what this machine lacks for a config.
"""

from flywheel.platform.config.device_mapping import parse_device_mapping
from flywheel.platform.config.environment_checks import check_environment
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.loader import config_to_dict, load_config, load_config_dict
from flywheel.platform.config.schema import PipelineConfig

__all__ = [
    "ConfigError",
    "PipelineConfig",
    "check_environment",
    "config_to_dict",
    "load_config",
    "load_config_dict",
    "parse_device_mapping",
]
