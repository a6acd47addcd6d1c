"""Configs as the project loads them: platform's loader and checks, handed every catalog.

This is the one place that assembles the catalogs (platform/config/catalogs.py says why they
are handed to the checks rather than imported by them): backends and rewards from workers/,
policy losses from algorithms/, prompt templates from pipelines/, env names from envs/,
tools from tools/. Every caller that loads or checks a config (the CLI, a run, regression
configs, tests, benches) uses the functions below: platform's own, with
`catalogs=CATALOGS`. An entry registered later (`register_reward`, `register_policy_loss`,
`flywheel.envs.register`) is checked too, since each catalog is a view of its owner's dict.

Importing this module imports no torch, Ray or backend package.
"""

from __future__ import annotations

from functools import partial

from flywheel.algorithms.policy_loss.registry import POLICY_LOSSES
from flywheel.config import all_errors, loader
from flywheel.config.catalogs import Catalogs, EnvCatalog
from flywheel.config.checks import config as checks
from flywheel.config.checks import environment as environment_checks
from flywheel.envs import registered_envs
from flywheel.envs.env_manager import TURN_PLACEHOLDERS
from flywheel.interop.roll import convert as roll_convert
from flywheel.interop.roll import report as roll_report
from flywheel.interop.roll.keys import convert_hint, roll_hint
from flywheel.pipelines.data.prompt_templates import TEMPLATES
from flywheel.platform.config.catalogs import Catalog
from flywheel.tools.registry import TOOLS
from flywheel.workers.rewards.registry import REWARDS
from flywheel.workers.strategies.registry import STRATEGIES

CATALOGS = Catalogs(
    backends=Catalog("strategy", STRATEGIES),
    rewards=Catalog("reward_type", REWARDS),
    losses=Catalog("pg_variant", POLICY_LOSSES),
    templates=Catalog("template", TEMPLATES),
    # builtin: the names flywheel.envs registers on import, before any user env
    envs=EnvCatalog(registered=registered_envs, builtin=frozenset(registered_envs()),
                    turn_placeholders=frozenset(TURN_PLACEHOLDERS)),
    tools=Catalog("tool_id", TOOLS),
)

load_config = partial(loader.load_config, catalogs=CATALOGS, hint=roll_hint)
load_config_dict = partial(loader.load_config_dict, catalogs=CATALOGS, hint=roll_hint)
load_config_with_section = partial(loader.load_config_with_section, catalogs=CATALOGS,
                                   hint=roll_hint)
load_config_layers = partial(loader.load_config_layers, catalogs=CATALOGS, hint=roll_hint)
config_errors = partial(all_errors.config_errors, catalogs=CATALOGS, convert_hint=convert_hint)
check_config = partial(checks.check_config, catalogs=CATALOGS)
check_environment = partial(environment_checks.check_environment, catalogs=CATALOGS)
convert_roll = partial(roll_convert.convert_roll, catalogs=CATALOGS)
convert_file = partial(roll_report.convert_file, catalogs=CATALOGS)
