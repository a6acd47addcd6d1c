"""The reward catalog: `reward_type` -> `RewardSpec`.

A reward is built once from its `RewardConfig` (so a reward with settings, like
code_sandbox's limits, checks them and its environment when built) and then called per
sample. The spec names the builder by import path: the config checks read this catalog
without importing any reward, and a reward's scoring process (scoring_process.py, a fresh
interpreter) imports the builder from the path it is handed, so a reward registered in the
driver runs there too.

A new reward: one file with a `build(cfg) -> RewardFn`, one line in `REWARDS`. A reward that
reads the whole data record, or scores many samples in one call, builds a `SampleReward`
instead (python_reward.py, `reward_type: python`, builds one from a user's function). Outside the
project: `register_reward(name, RewardSpec(kind, "package.module:build"))` before the config
is loaded; the module must be importable where the reward workers run. A reward with knobs
of its own names their dataclass in `settings` (platform/config/catalogs.py, "Settings"):
the config gives them in `rewards.<name>.reward_args`, checked when it loads, and `build`
reads them with `settings_from(TheSettings, cfg.reward_args, "reward_args")`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.catalogs import check_import_path, import_object, register_entry
from flywheel.platform.models.catalog import BuiltinModel, register_builtin_model
from flywheel.workers.rewards.format_pattern import format_check, plus_format, with_format_pattern
from flywheel.workers.rewards.result import RewardResult

RewardFn = Callable[[str, str, str], RewardResult]  # (prompt, response, reference)


class Sample(NamedTuple):
    """One scoring request. `record` is the data record the prompt came from, every column
    of its row (prompt_data.PromptRecord.row); a built-in RewardFn reads the first three."""

    prompt: str
    response: str
    reference: str
    record: dict[str, Any] | None = None
    # The prompt as chat messages, before the policy's template (the record's messages, or
    # its text as one user turn): what a reward with its own chat template renders
    # (reward_model.py), so it never wraps the policy's rendered template in its own.
    messages: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class SampleReward:
    """What a builder returns when its reward reads whole `Sample`s (records included):
    `score` takes samples and returns one result each, in order. `batched` False: it is
    handed one sample at a time, under the per-sample limit; True: the samples of one
    request at once (a batch), under the per-sample limit times their number
    (time_limit.py)."""

    score: Callable[[list[Sample]], list[RewardResult]]
    batched: bool = False


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
    "python": RewardSpec("rule", "flywheel.workers.rewards.python_reward:build"),
    # ROLL's DetectionRewardWorker (its IoU terms): boxes in <answer>[{"bbox_2d": ...}]</answer>
    "detection": RewardSpec("rule", "flywheel.workers.rewards.detection:build",
                            "flywheel.workers.rewards.detection:DetectionArgs"),
    # each reasoning-gym task's own score_answer (records of data_args.reasoning_gym)
    "reasoning_gym": RewardSpec(
        "rule", "flywheel.workers.rewards.reasoning_gym_reward:build",
        "flywheel.workers.rewards.reasoning_gym_reward:ReasoningGymRewardArgs"),
    # a sequence-classification model's scalar score (Skywork-style reward models)
    "reward_model": RewardSpec("model", "flywheel.workers.rewards.reward_model:build",
                               "flywheel.workers.rewards.reward_model:RewardModelArgs"),
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


def reward_fn(name: str, cfg: RewardConfig | None = None,
              build: str | None = None) -> RewardFn | SampleReward:
    """The reward `name`, built with `cfg` (its defaults when unset) by `build` (an import
    path; unset: `name`'s in this process's catalog), with `cfg.format_pattern` applied to
    whatever it scores. Runs in the calling process: workers wrap it in
    time_limit.TimeLimitedScorer."""
    cfg = cfg or RewardConfig(reward_type=name)
    builder = import_object(build or reward_spec(name).build)
    built = builder(cfg)
    if isinstance(built, SampleReward):
        return _format_pattern_on_samples(built, cfg.format_pattern)
    return with_format_pattern(built, cfg.format_pattern)


def sample_reward(name: str, cfg: RewardConfig | None = None,
                  build: str | None = None) -> SampleReward:
    """`reward_fn`'s reward as a SampleReward: a built-in RewardFn is handed one sample at a
    time and reads its prompt, response and reference (the scoring process calls this)."""
    built = reward_fn(name, cfg, build)
    if isinstance(built, SampleReward):
        return built

    def score(samples: list[Sample]) -> list[RewardResult]:
        return [built(s.prompt, s.response, s.reference) for s in samples]

    return SampleReward(score)


def _format_pattern_on_samples(reward: SampleReward, pattern: str | None) -> SampleReward:
    """`reward` with `format_pattern` applied to each sample it scores, as
    `with_format_pattern` does for a RewardFn (a user function's failures included: a
    failed sample that also misses the format gets both)."""
    if pattern is None:
        return reward
    check = format_check(pattern)

    def score(samples: list[Sample]) -> list[RewardResult]:
        return [plus_format(result, check(sample.response))
                for sample, result in zip(samples, reward.score(samples))]

    return SampleReward(score, reward.batched)


# The reward model reward_type reward_model's examples score with, `builtin://NAME`: trained
# on first use by the workshop (too large to ship). Registered here, the module both the
# driver (through the reward catalog) and every reward worker import, so each resolves it.
register_builtin_model("smollm2-135m-times-rm", BuiltinModel(
    description="SmolLM2-135M-Instruct with a scalar head (sequence classification) "
    "trained on synthetic times-table preferences, a reward model for reward_type "
    "reward_model; trained on first use (minutes): "
    "flywheel/workshop/times_reward_model.py.",
    trained=("flywheel.workshop.times_reward_model:build_times_reward_model",
             "flywheel.workshop.times_reward_model:recipe_key"),
))
