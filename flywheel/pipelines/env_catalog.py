"""The env catalog as pipelines/launch.py still imports it (`ENV_CATALOG`).

The config checks no longer learn the env names from an import side effect: every loader
call is handed them (`flywheel.pipelines.config.CATALOGS.envs`). Remove this module with
launch.py's `check_env_names(cfg, ENV_CATALOG)` call, which has nothing left to catch.
"""

from __future__ import annotations

from flywheel.pipelines.config import CATALOGS

ENV_CATALOG = CATALOGS.envs
