"""The catalogs the run's config reads: what is implemented above the config, by name.

Eight keys name something the config does not implement: `strategy_args.strategy_name` (a
backend), `rewards.<name>.reward_type` (a reward), `actor_train.pg_variant` (a policy loss),
`data_args.template` (a prompt template), `custom_envs.<tag>.env_type` (an env),
`custom_envs.<tag>.tool_use.tools[i].tool_id` (a tool), `adv_estimator` (an advantage
estimator) and `pipeline_type` (a pipeline kind, config/kinds.py: the config's own).
Each concept has one catalog (a `flywheel.platform.config.catalogs.Catalog`), kept by the
layer that implements it:

    backends   flywheel/workers/strategies/registry.py   STRATEGIES     register_backend
    rewards    flywheel/workers/rewards/registry.py      REWARDS        register_reward
    losses     flywheel/algorithms/policy_loss/registry.py POLICY_LOSSES register_policy_loss
    estimators flywheel/algorithms/estimators.py         ESTIMATORS     register_estimator
    kinds      flywheel/config/kinds.py                  KINDS          register_kind
    templates  flywheel/pipelines/data/prompt_templates.py    TEMPLATES
    envs       flywheel/envs/registry.py                 (make, ...)    flywheel.envs.register
    tools      flywheel/tools/registry.py                TOOLS

Adding a backend, a reward or a loss variant is one file and one line in its catalog. A
reward or a loss variant may declare settings of its own (`rewards.<name>.reward_args` /
`actor_train.pg_variant_args`; platform/config/catalogs.py, "Settings"), so a new entry's
knobs are declared beside it and the schema does not grow. flywheel's own rewards and
variants keep the keys ROLL gives them (`code_sandbox:`, `tis_lower_bound`, ...) and declare
none.

The config checks read entries through the Protocols below (what they need of a spec, and
nothing more) and get every catalog as a required argument, `Catalogs`, assembled once above
both layers (`flywheel.pipelines.config`): no rule can be skipped because some module was not
imported first. A `Catalog` is a view of its owner's dict, so an entry registered after the
view was made is checked like a built-in one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from flywheel.algorithms.estimators import ESTIMATORS, EstimatorSpec
from flywheel.platform.config.catalogs import Catalog

# The adv_estimator catalog is pure data of algorithms/ (no torch, nothing above platform/),
# read directly: the acts-when rules ask it too, and they are handed no catalogs.
ESTIMATOR_CATALOG: Catalog[EstimatorSpec] = Catalog("adv_estimator", ESTIMATORS)


def estimator_of(cfg: object) -> EstimatorSpec:
    """The spec of `cfg.adv_estimator`; a ConfigError at adv_estimator listing the known
    estimators when it names none."""
    return ESTIMATOR_CATALOG.get(cfg.adv_estimator, "adv_estimator")


class BackendEntry(Protocol):
    """What the checks read of a backend (`BackendSpec` in workers/strategies/registry.py)."""

    kind: Literal["train", "infer"]
    roles: tuple[str, ...]  # role kinds it can run (derived.Role.kind)
    takes_strategy_config: bool  # false: any strategy_config key would do nothing
    streams: bool  # loads weights while requests run (no partial-rollout segments)
    needs_cuda: bool
    latency_only: bool  # no model: scheduling benchmarks and tests (latency_sim.py)
    requires: str | None  # module that must be importable to run it
    install_hint: str
    config_check: str | None  # "module:function" of its light refusals (registry.py)


class RewardEntry(Protocol):
    """What the checks read of a reward (`RewardSpec` in workers/rewards/registry.py)."""

    kind: Literal["rule", "model"]  # rule: scored in Python, loads no model, no backend
    settings: str | None  # its settings dataclass by import path (reward_args), if any


class LossEntry(Protocol):
    """What the checks read of a policy loss (`LossSpec` in algorithms/policy_loss/)."""

    fn: str  # "package.module:function"
    settings: str | None  # its settings dataclass by import path (pg_variant_args), if any


class ToolEntry(Protocol):
    """What the checks read of a tool (`ToolSpec` in flywheel/tools/registry.py)."""

    build: str  # "module:function" building it
    settings: str | None  # its settings dataclass by import path (tool_args), if any


@dataclass(frozen=True)
class EnvCatalog:
    """The env names the agentic checks accept (flywheel.envs keeps the registry)."""

    registered: Callable[[], list[str]]  # every env name known now (built-in and user)
    builtin: frozenset[str]  # the names the env package registers itself
    turn_placeholders: frozenset[str]  # the fields an agent_template may use


@dataclass(frozen=True)
class Catalogs:
    """Every catalog the config checks read; `flywheel.pipelines.config.CATALOGS`."""

    backends: Catalog[BackendEntry]
    rewards: Catalog[RewardEntry]
    losses: Catalog[LossEntry]
    templates: Catalog[Literal["native", "chat"]]  # how a template encodes prompts
    envs: EnvCatalog
    # Tools that agentic episodes call (flywheel/tools/registry.py TOOLS), read by the
    # agentic checks (config/checks/tools.py).
    tools: Catalog[ToolEntry]
