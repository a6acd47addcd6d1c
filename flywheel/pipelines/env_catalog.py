"""Hands `flywheel.envs`' registry to the config checks, which live in `platform/` and so
may not import it (`platform/config/agentic_checks.py`). Importing this module is the
hand-over: `launch.py` does, and the agentic pipeline re-checks a config with it at start.
"""

from __future__ import annotations

from flywheel.envs import registered_envs
from flywheel.envs.env_manager import TURN_PLACEHOLDERS
from flywheel.platform.config.agentic_checks import EnvCatalog, provide_env_catalog

# The names flywheel.envs registers on import, before any user env is registered by path.
ENV_CATALOG = EnvCatalog(registered=registered_envs, builtin=frozenset(registered_envs()),
                         turn_placeholders=frozenset(TURN_PLACEHOLDERS))
provide_env_catalog(ENV_CATALOG)
