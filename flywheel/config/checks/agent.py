"""Cross-field rules of `pipeline_type: agent` (the user's agent behind the endpoint), its
kind's `config_check`. Pure: each rule raises `ConfigError` with the key path and the fix.

What is refused, and why:
- adv_estimator gae: a value per call would need a critic over the agent's calls, which
  has no state of its own between calls; gigpo: its anchor states are env states, which
  an agent's calls do not have. The estimators that act are the catalog's per-sample ones
  (algorithms/estimators.py: rows "sample", no critic; today grpo and reinforce), each an
  episode's reward normalised over the episodes of its task, and the per-turn ones
  without anchors (step_reinforce), each call credited with its discounted return (the
  episode's reward at its last call), which needs each call on its own row (agent.rows:
  call).
- num_return_sequences > 1 in actor_infer.generating_args: the agent's request says `n`.
- step_level_samples / turn_level_returns: agentic's views of env episodes; an agent's
  rows are its calls already.
"""

from __future__ import annotations

from pathlib import Path

from flywheel.algorithms.estimators import estimator_spec, estimators_where
from flywheel.config.checks.import_allowlist import check_allowed_import
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError


def _acts(spec) -> bool:
    """What an agent's calls can be given: one advantage per episode from its reward, or
    one per call from its discounted return (no critic, no anchor states)."""
    return (spec.rows == "sample" or (spec.per_turn and not spec.needs_anchors)) \
        and not spec.needs_critic


def check_agent(cfg: PipelineConfig) -> None:
    agent = cfg.agent
    if bool(agent.import_path) == bool(agent.command):
        raise ConfigError("", "agent.import_path", "write exactly one of agent.import_path "
                          "(an async function) and agent.command (argv of a program)")
    if agent.import_path:
        check_allowed_import("agent.import_path", agent.import_path, cfg)
    if not agent.tasks:
        raise ConfigError("", "agent.tasks", "required: a .jsonl file of task objects")
    for key, path in (("agent.tasks", agent.tasks), ("agent.val_tasks", agent.val_tasks),
                      ("agent.chat_template", agent.chat_template)):
        if path and not Path(path).is_file():
            raise ConfigError("", key, f"no file {path}")
    if agent.group_size < 2:
        raise ConfigError("", "agent.group_size", "must be >= 2 (GRPO compares the episodes "
                          "of one task)")
    if cfg.rollout_batch_size % agent.group_size:
        raise ConfigError("", "rollout_batch_size", f"{cfg.rollout_batch_size} episodes is "
                          f"not a multiple of agent.group_size {agent.group_size}")
    for key, value, least in (("wall_clock_s", agent.wall_clock_s, 1e-9),
                              ("max_calls", agent.max_calls, 1),
                              ("max_episode_tokens", agent.max_episode_tokens, 1),
                              ("max_body_bytes", agent.max_body_bytes, 1024),
                              ("max_tokens_per_call", agent.max_tokens_per_call, 1)):
        if value < least:
            raise ConfigError("", f"agent.{key}", f"must be >= {least:g}, got {value}")
    spec = estimator_spec(cfg.adv_estimator)
    if not _acts(spec):
        known = " or ".join(estimators_where(_acts))
        raise ConfigError("", "adv_estimator", f"pipeline_type agent trains with {known} (an "
                          f"episode's reward, or a call's discounted return, over a task's "
                          f"episodes); {cfg.adv_estimator} needs values or anchor states "
                          "that an agent's calls do not have")
    if spec.per_turn and agent.rows != "call":
        raise ConfigError("", "agent.rows", f"adv_estimator {cfg.adv_estimator} credits each "
                          "call its own return: set agent.rows: call (one row per call)")
    if cfg.actor_infer.generating_args.num_return_sequences != 1:
        raise ConfigError("", "actor_infer.generating_args.num_return_sequences",
                          "the agent's request says n; leave it 1")
    for key in ("step_level_samples", "turn_level_returns"):
        if getattr(cfg, key):
            raise ConfigError("", key, "agentic's episode views: an agent's rows are its "
                              "calls already; remove it")
