"""The reward catalog: `reward_type` -> `RewardSpec`.

A reward is built once from its `RewardConfig` (so a reward with settings, like
code_sandbox's limits, checks them and its environment when built) and then called per
sample. The spec names the builder by import path: the config checks read this catalog
without importing any reward, and a reward's scoring process (scoring_process.py, a fresh
interpreter) imports the builder from the path it is handed, so a reward registered in the
driver runs there too.

A new reward: one file with a `build(cfg) -> RewardFn`, one line in `REWARDS`. Outside the
project: `register_reward(name, RewardSpec(kind, "package.module:build"))` before the config
is loaded; the module must be importable where the reward workers run. A reward with knobs
of its own names their dataclass in `settings` (platform/config/catalogs.py, "Settings"):
the config gives them in `rewards.<name>.reward_args`, checked when it loads, and `build`
reads them with `settings_from(TheSettings, cfg.reward_args, "reward_args")`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flywheel.platform.config.catalogs import check_import_path, import_object, register_entry
from flywheel.platform.config.schema import RewardConfig
from flywheel.workers.rewards.format_pattern import with_format_pattern
from flywheel.workers.rewards.result import RewardResult

RewardFn = Callable[[str, str, str], RewardResult]  # (prompt, response, reference)


@dataclass(frozen=True)
class RewardSpec:
    # rule: scored in Python, loads no model (its strategy_args and model_args are refused);
    # model: the role loads a model on its devices (or calls a server, as llm_judge may).
    kind: Literal["rule", "model"]
    build: str  # "package.module:function", a function (RewardConfig) -> RewardFn
    settings: str | None = None  # "package.module:Class", the dataclass of its reward_args


REWARDS: dict[str, RewardSpec] = {
    "math_rule": RewardSpec("rule", "flywheel.workers.rewards.math_rule:build"),
    "code_sandbox": RewardSpec("rule", "flywheel.workers.rewards.code_sandbox:build"),
    "llm_judge": RewardSpec("model", "flywheel.workers.rewards.llm_judge:build"),
    # ROLL's GeneralRuleRewardWorker and CrossThinkQARuleRewardWorker
    "ifeval": RewardSpec("rule", "flywheel.workers.rewards.ifeval:build",
                         "flywheel.workers.rewards.ifeval:IfevalArgs"),
    "multiple_choice": RewardSpec("rule", "flywheel.workers.rewards.multiple_choice:build",
                                  "flywheel.workers.rewards.multiple_choice:MultipleChoiceArgs"),
}


def register_reward(name: str, spec: RewardSpec) -> None:
    """Make `name` a `reward_type` the config checks accept and reward workers can build."""
    if not isinstance(spec, RewardSpec) or spec.kind not in ("rule", "model"):
        raise TypeError(f"reward {name!r}: expected a RewardSpec of kind rule or model, got "
                        f"{spec!r}")
    check_import_path(spec.build, f"reward {name!r} build")
    if spec.settings is not None:
        check_import_path(spec.settings, f"reward {name!r} settings")
    register_entry(REWARDS, "reward_type", name, spec)


def reward_spec(name: str) -> RewardSpec:
    if name not in REWARDS:
        raise ValueError(f"unknown reward_type '{name}' (known: {', '.join(sorted(REWARDS))})")
    return REWARDS[name]


def reward_fn(name: str, cfg: RewardConfig | None = None, build: str | None = None) -> RewardFn:
    """The reward `name`, built with `cfg` (its defaults when unset) by `build` (an import
    path; unset: `name`'s in this process's catalog), with `cfg.format_pattern` applied to
    whatever it scores. Runs in the calling process: workers wrap it in
    time_limit.TimeLimitedScorer."""
    cfg = cfg or RewardConfig(reward_type=name)
    builder = import_object(build or reward_spec(name).build)
    return with_format_pattern(builder(cfg), cfg.format_pattern)
