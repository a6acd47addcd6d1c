"""ROLL's step-level agentic settings, and its env managers, in flywheel's terms.

ROLL picks how an agentic episode becomes training rows by each tag's `env_manager_cls`:
TrajEnvManager (one row per episode: flywheel's default) or StepEnvManager /
StepConcatEnvManager (one row per turn: flywheel's `step_level_samples: true`). Its step
estimators (adv_estimator `gigpo`, `step_reinforce`) read `step_reward_gamma` (the discount
of a turn's return: flywheel's `gamma`, which ROLL reads only for GAE, so nothing else
changes) and gigpo `episode_reward_weight` / `step_reward_weight` (flywheel's own keys).
ProxyEnvManager with GEMRunner plays a gym-like env turn by turn through an
OpenAI-compatible proxy with the whole message history: what flywheel's env manager does
in-process. `batch_adjust_mode` (ROLL's default copy) acts where a step's rows do not fill
whole optimizer steps: always on per-turn rows, and on episode rows when rollout_batch_size
is not a multiple of actor_train's global batch (ROLL accepts that file; flywheel refuses it
without the key); elsewhere it is a no-op and dropped, said.

What differs, said in the report: ROLL's StepEnvManager prompt re-renders the last
`history_length` turns into one message; flywheel's per-turn row has the whole episode as
played before the turn (both views cut from the same tokens, envs/trajectory.py).
"""

from __future__ import annotations

import copy
import string
from typing import TYPE_CHECKING, Any

from flywheel.algorithms.estimators import estimators_where
from flywheel.config.checks.config import check_batch_sizes
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.conversion import to_config
from flywheel.platform.config.errors import ConfigError

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

KEYS = ("step_reward_gamma", "batch_adjust_mode")  # converted here, not by roll_rules
# ROLL's per-turn estimators carry over by name: flywheel's catalog says which credit turns
STEP_ESTIMATORS = tuple(estimators_where(lambda spec: spec.per_turn))
TRAJ_MANAGERS = ("TrajEnvManager", "ProxyEnvManager")
STEP_MANAGERS = ("StepEnvManager", "StepConcatEnvManager", "AgentNativeStepEnvManager")
MANAGER_NOTES = {
    "ProxyEnvManager": "it plays the env through an OpenAI-compatible proxy; flywheel's env "
                       "manager plays it in-process, turn by turn with the whole history",
    **{name: "one row per turn: step_level_samples (see that line)"
       for name in STEP_MANAGERS},
}
RUNNERS = ("GEMRunner",)
ROLL_DEFAULTS = {"step_reward_gamma": 0.95, "batch_adjust_mode": "copy",
                 "adv_estimator": "gae"}
# ROLL step-template placeholders and what stands for them in a flywheel turn template
STEP_PLACEHOLDERS = {"{current_observation}": "{observation}", "{history}": ""}


def manager_name(value: Any) -> str:
    """The class name of a dotted env_manager_cls (TrajEnvManager when unset)."""
    return str(value or "TrajEnvManager").rsplit(".", 1)[-1]


def supported_manager(name: str) -> bool:
    return name in TRAJ_MANAGERS or name in STEP_MANAGERS


def fit_step_credit(data: dict[str, Any], out: Conversion) -> None:
    """Per-turn rows from the env managers, the step estimators' keys, the templates."""
    if out.pipeline_type != "agentic":
        for key in KEYS:
            if key in data:
                out.dropped.append(f"{key}: read by ROLL's agentic pipeline only")
        return
    estimator = data.get("adv_estimator", ROLL_DEFAULTS["adv_estimator"])
    managers = _played_managers(data)
    step_rows = {name for name in managers.values() if name in STEP_MANAGERS}
    if step_rows and len(step_rows) != len(set(managers.values())):
        out.missing.append(f"per-turn rows for some tags and episode rows for others "
                           f"(custom_envs.*.env_manager_cls: {sorted(set(managers.values()))})")
        return
    if step_rows and estimator not in STEP_ESTIMATORS:
        out.missing.append(f"the env manager {sorted(step_rows)[0]} with adv_estimator "
                           f"{estimator} (ROLL scores each turn row by that turn's reward "
                           f"alone)")
        return
    if estimator in STEP_ESTIMATORS and not step_rows:
        out.missing.append(f"adv_estimator {estimator} on episode rows (its turns need "
                           f"StepEnvManager)")
        return
    if step_rows:
        out.data["step_level_samples"] = True
        out.mapped.append(f"custom_envs.*.env_manager_cls {sorted(step_rows)[0]} -> "
                          f"step_level_samples: true (one row per turn; its prompt is the "
                          f"whole episode before the turn, where ROLL's StepEnvManager "
                          f"re-renders the last history_length turns)")
        _step_templates(out)
    _step_gamma(data, out, estimator)


def _played_managers(data: dict[str, Any]) -> dict[str, str]:
    """tag -> env manager class name, over the tags an env manager plays."""
    played = {t for m in ("train_env_manager", "val_env_manager")
              for t in ((data.get(m) or {}).get("tags") or [])}
    envs = data.get("custom_envs") or {}
    return {tag: manager_name((envs.get(tag) or {}).get("env_manager_cls"))
            for tag in played if tag in envs}


def _step_gamma(data: dict[str, Any], out: Conversion, estimator: str) -> None:
    given = "step_reward_gamma" in data
    value = data.get("step_reward_gamma", ROLL_DEFAULTS["step_reward_gamma"])
    if estimator not in STEP_ESTIMATORS:
        if given:
            out.dropped.append(f"step_reward_gamma: {value!r}: ROLL reads it only with "
                               f"adv_estimator gigpo or step_reinforce (this file: "
                               f"{estimator})")
        return
    out.data["gamma"] = value
    out.mapped.append(f"step_reward_gamma{'' if given else ' (unset, ROLL default)'} -> "
                      f"gamma: {value!r} (the discount of each turn's return; ROLL's "
                      f"gamma is GAE's only)")


def fit_batch_adjust(data: dict[str, Any], out: Conversion) -> None:
    """batch_adjust_mode where it acts (module docstring); run after the other passes."""
    if out.pipeline_type != "agentic":
        return
    mode = data.get("batch_adjust_mode", ROLL_DEFAULTS["batch_adjust_mode"])
    given = "" if "batch_adjust_mode" in data else " (unset, ROLL's default)"
    if out.data.get("step_level_samples"):
        reason = "per-turn rows vary in number"
    else:
        try:
            check_batch_sizes(to_config(copy.deepcopy(out.data), PipelineConfig))
            if "batch_adjust_mode" in data:
                out.dropped.append(f"batch_adjust_mode: {mode!r}: a no-op here, "
                                   f"rollout_batch_size fills whole optimizer steps")
            return
        except ConfigError as error:
            if error.key_path != "rollout_batch_size":
                return  # another wrong value: the strict loader names it
            reason = "rollout_batch_size is not a multiple of actor_train's global batch"
    out.data["batch_adjust_mode"] = mode
    out.mapped.append(f"batch_adjust_mode{given}: {mode} ({reason}: rows fitted to whole "
                      f"optimizer steps each step, as ROLL)")


def _step_templates(out: Conversion) -> None:
    """ROLL's step placeholders: {current_observation} is the turn's observation and
    {history} is empty (the row's prompt holds every earlier turn). A template that uses
    another of ROLL's step fields ({env_instruction}, {step_count}, {current_step},
    {history_length}) has no per-turn counterpart: flywheel's default turn template is used,
    said."""
    for tag, env in (out.data.get("custom_envs") or {}).items():
        text = env.get("agent_template")
        if not isinstance(text, str):
            continue
        for roll, ours in STEP_PLACEHOLDERS.items():
            text = text.replace(roll, ours)
        fields = {f for _, f, _, _ in string.Formatter().parse(text) if f}
        unknown = sorted(fields - out.catalogs.envs.turn_placeholders)
        if unknown:
            env.pop("agent_template")
            out.dropped.append(f"custom_envs.{tag}.agent_template: ROLL's step prompt uses "
                               f"{unknown}, which summarise earlier turns; flywheel's row "
                               f"has those turns in full, each under its default turn "
                               f"template")
        elif text != env["agent_template"]:
            env["agent_template"] = text
            out.mapped.append(f"custom_envs.{tag}.agent_template: {{current_observation}} "
                              f"-> {{observation}}, {{history}} -> '' (the row's prompt "
                              f"holds every earlier turn)")


SAMPLING_KEYS = ("do_sample", "temperature", "top_p", "top_k", "repetition_penalty",
                 "stop_strings")


def fit_rollout_only(data: dict[str, Any], out: Conversion) -> None:
    """ROLL's rollout-only agentic pipeline (agentic_rollout_pipeline.py: an agentic file
    without actor_train) plays rollout_batch_size episodes of the train pool per step for
    max_steps steps, logs their metrics and trains nothing. flywheel's equivalent: a run of
    0 training steps whose step-0 validation plays the same rollout_batch_size x max_steps
    episodes on that pool with the file's sampling, logged once under val/env/. The
    advantage estimator is inert (ROLL's default gae needs a critic only to train)."""
    if out.pipeline_type != "agentic" or data.get("actor_train") is not None:
        return
    steps = int(data.get("max_steps", 0) or 0)
    episodes = int(data.get("rollout_batch_size", 128)) * max(steps, 1)
    pool = copy.deepcopy(out.data.get("train_env_manager") or {})
    sampling = (out.data.get("actor_infer") or {}).get("generating_args") or {}
    out.data.update(max_steps=0, eval_steps=1, val_batch_size=episodes,
                    val_env_manager=pool, adv_estimator="grpo")
    out.data["validation"] = {"generating_args": {
        "do_sample": True, **{k: v for k, v in sampling.items() if k in SAMPLING_KEYS}}}
    out.mapped.append(f"rollout-only pipeline (no actor_train) -> max_steps: 0 with a "
                      f"step-0 validation of rollout_batch_size x max_steps = {episodes} "
                      f"episodes on train_env_manager's pool, sampled as actor_infer "
                      f"samples; nothing is trained, so adv_estimator "
                      f"{data.get('adv_estimator', ROLL_DEFAULTS['adv_estimator'])} is not "
                      f"read")
