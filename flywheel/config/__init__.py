"""The run's configuration: the schema of a flywheel YAML file, its checks, the keys that act
only under a condition, and the values derived from it.

    schema/      the fields, by concern, re-exported as one `PipelineConfig`
    loader.py    a YAML file (with `defaults:`, `${...}`, overrides) to a checked config
    checks/      cross-field rules (`checks/config.py` runs them all) and machine warnings
    acts_when/   which key acts under which condition; a written key that would not is refused
    derived.py   values read off a config (roles, devices, ...), never written back into it
    catalogs.py  what the checks read of the backends, rewards, losses, templates, envs, tools

The generic machinery it uses (YAML sources, layering, `${...}`, overrides, strict dataclass
conversion, errors, device mapping, `Catalog`) is `flywheel.platform.config`, which knows
nothing of this schema. `flywheel.pipelines.config` binds the loader to the project's
catalogs: load configs from there.
"""

from flywheel.config.loader import config_to_dict
from flywheel.config.schema import PipelineConfig

__all__ = ["PipelineConfig", "config_to_dict"]
