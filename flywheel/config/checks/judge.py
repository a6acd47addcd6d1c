"""Rules for the llm_judge reward's keys (`rewards.<name>.llm_judge`).

A judge is either local (a model this reward role loads on its own devices) or an
OpenAI-compatible endpoint; each backend's keys are refused on the other, and judge keys
are refused on every other reward type, so no written key is silently ignored. Pure
functions on a `PipelineConfig`, run by `checks.check_config`; each raises `ConfigError`.

The prompt template is read by `derived.template_parts`, as the reward itself
(workers/rewards/llm_judge.py) reads it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flywheel.config.catalogs import BackendEntry
from flywheel.config.derived import template_parts
from flywheel.config.schema import (
    GeneratingArgs,
    LlmJudgeArgs,
    ModelArgs,
    PipelineConfig,
    RewardConfig,
    StrategyArgs,
)
from flywheel.platform.config.catalogs import Catalog
from flywheel.platform.config.errors import ConfigError

ENDPOINT_KEYS = ("base_url", "model", "api_key_env")


def check_llm_judge(cfg: PipelineConfig, backends: Catalog[BackendEntry]) -> None:
    """Judge keys only on llm_judge rewards; each backend's keys complete and alone."""
    for name, reward in cfg.rewards.items():
        key = f"rewards.{name}"
        if reward.reward_type != "llm_judge":
            if reward.llm_judge != LlmJudgeArgs():
                raise ConfigError("", f"{key}.llm_judge", f"only the llm_judge reward reads "
                                                          f"it (reward_type is "
                                                          f"{reward.reward_type}); remove it")
            continue
        check_judge_args(reward.llm_judge, f"{key}.llm_judge")
        if reward.generating_args != GeneratingArgs():
            raise ConfigError("", f"{key}.generating_args", "the judge decodes greedily with "
                                                            "llm_judge.max_new_tokens; remove "
                                                            "generating_args")
        if reward.llm_judge.backend == "endpoint":
            check_endpoint_role(reward, key)
        else:
            check_local_role(cfg, reward, key, judge_backends(backends))


def check_judge_args(judge: LlmJudgeArgs, key: str) -> None:
    try:
        template_parts(judge.prompt_template)
    except ValueError as e:
        raise ConfigError("", f"{key}.prompt_template", str(e).removeprefix(
            "prompt_template ")) from None
    default = LlmJudgeArgs()
    if judge.score_parser == "yes_no" and (judge.score_min, judge.score_max) != (
            default.score_min, default.score_max):
        raise ConfigError("", f"{key}.score_min", "score_min / score_max are for "
                                                  "score_parser: number; the yes_no parser "
                                                  "scores 1 or 0")
    if judge.score_parser == "number" and not judge.score_min < judge.score_max:
        raise ConfigError("", f"{key}.score_min", f"must be below score_max (got "
                                                  f"{judge.score_min} and {judge.score_max})")
    if judge.max_new_tokens < 1:
        raise ConfigError("", f"{key}.max_new_tokens", f"must be at least 1, got "
                                                       f"{judge.max_new_tokens}")
    if judge.request_timeout_s <= 0:
        raise ConfigError("", f"{key}.request_timeout_s", f"must be > 0, got "
                                                          f"{judge.request_timeout_s}")


def check_endpoint_role(reward: RewardConfig, key: str) -> None:
    """An endpoint judge needs base_url and model, and loads nothing itself."""
    judge = reward.llm_judge
    for field in ("base_url", "model"):
        if not getattr(judge, field):
            raise ConfigError("", f"{key}.llm_judge.{field}", "backend endpoint needs it")
    url = urlsplit(judge.base_url)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ConfigError("", f"{key}.llm_judge.base_url", f"expected an http(s) URL such as "
                                                           f"http://127.0.0.1:8000/v1, got "
                                                           f"{judge.base_url!r}")
    if judge.api_key_env is not None and not judge.api_key_env.isidentifier():
        raise ConfigError("", f"{key}.llm_judge.api_key_env", "expected the NAME of an "
                                                              "environment variable (letters, "
                                                              "digits, _), never the key "
                                                              "itself")
    local = {"model_args": (reward.model_args, ModelArgs()),
             "strategy_args": (reward.strategy_args, StrategyArgs()),
             "device_mapping": (reward.device_mapping, None)}
    for field, (value, default) in local.items():
        if value != default:
            raise ConfigError("", f"{key}.{field}", "an endpoint judge runs on its server "
                                                    "and loads no model here; remove it (or "
                                                    "use llm_judge.backend: local)")


def judge_backends(backends: Catalog[BackendEntry]) -> list[str]:
    """Backends a local judge can generate with (a latency-only one produces no text)."""
    return [name for name, spec in backends.items()
            if spec.kind == "infer" and not spec.latency_only]


def check_local_role(cfg: PipelineConfig, reward: RewardConfig, key: str,
                     generators: list[str]) -> None:
    """A local judge generates with an infer backend and names a model."""
    judge = reward.llm_judge
    for field in ENDPOINT_KEYS + ("request_timeout_s",):
        if getattr(judge, field) != getattr(LlmJudgeArgs(), field):
            raise ConfigError("", f"{key}.llm_judge.{field}", "is for backend endpoint; "
                                                              "backend is local")
    strategy = reward.strategy_args.strategy_name
    if strategy not in generators:
        unset = (" (the default when strategy_name is not written)"
                 if strategy == StrategyArgs().strategy_name else "")
        raise ConfigError("", f"{key}.strategy_args.strategy_name",
                          f"a local llm_judge generates with {', '.join(generators)}; "
                          f"got '{strategy}'{unset}")
    if not (reward.model_args.model_name_or_path or cfg.reward_pretrain):
        raise ConfigError("", f"{key}.model_args.model_name_or_path",
                          "a local llm_judge needs a model: set it, or the top-level "
                          "reward_pretrain")
    check_world_size(reward, key, "a local judge")


def check_world_size(reward: RewardConfig, key: str, what: str) -> None:
    """A reward with a model runs one worker per num_gpus_per_worker devices."""
    workers = len(reward.device_mapping or [0]) // reward.num_gpus_per_worker
    if reward.world_size not in (1, workers):
        raise ConfigError("", f"{key}.world_size", f"{what} runs one worker per "
                                                   f"{reward.num_gpus_per_worker} device(s) of "
                                                   f"device_mapping ({workers}); world_size "
                                                   f"{reward.world_size} disagrees")
