"""What a pipeline kind's entry (config/kinds.py) refuses: a name no kind has, its own
checks, and a role block it does not have. Run first by `checks.check_config`, so a key
another kind reads is refused as such before any shared rule trips over it."""

from __future__ import annotations

from flywheel.config.kinds import ROLE_BLOCKS, kind_of
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.catalogs import import_object
from flywheel.platform.config.errors import ConfigError


def check_kind(cfg: PipelineConfig) -> None:
    kind = kind_of(cfg)  # an unknown pipeline_type: one line listing the known kinds
    if kind.config_check is not None:
        import_object(kind.config_check)(cfg)
    for role in ROLE_BLOCKS:
        # actor_infer is always there (its defaults); an optional block written is refused
        if role != "actor_infer" and getattr(cfg, role, None) is not None and (
                not kind.has_role(role)):
            raise ConfigError("", role, f"pipeline_type {cfg.pipeline_type} has no {role} "
                                        f"role: remove it")
