"""The text-environment contract every env in flywheel follows.

An environment speaks text both ways: `reset(seed)` returns the first observation (which
carries the game's instruction, so the env manager never needs env-specific prompt code)
and `step(action_text)` takes the model's raw reply. Everything else is gymnasium's
five-tuple, so a text env is a `gymnasium.Env[str, str]` and the usual mental model holds.

Parsing the model's reply lives here, once, because every env must treat a malformed reply
the same way (a policy-gradient run notices when format errors are rewarded differently
across envs):

- The action is the first match of `action_pattern` (default `<answer>(.*?)</answer>`),
  compiled with DOTALL and IGNORECASE; its first group (or the whole match when the pattern
  has no group) is stripped and compared case-insensitively with the env's action names.
- An unparseable or unknown action leaves the state unchanged, returns reward
  `format_penalty` (default `DEFAULT_FORMAT_PENALTY` = -0.1, i.e. slightly worse than a
  harmless legal move, which earns 0 in the built-in envs), never terminates the episode,
  and reports `info["action_is_valid"] = False`.

Info contract (what the env manager reads; see `trajectory.episode_metrics`):

- `action_is_valid` (bool), every step. Episode metric: fraction of valid steps.
- `success` (bool), every step (False until the episode is won). Episode metric: its value
  at the last step.
- `state_key` (optional, in reset's info and every step's): the env's state, for GiGPO's
  anchor groups (observations that show one state alike may differ, e.g. a counter in the
  text); any value, compared as text. Without it the observation text is the state. Not a
  metric.
- Any other bool/int/float key is an env-specific per-step metric. Episode metric: mean
  over the steps that reported it.
Across episodes every metric is a plain mean (`aggregate_metrics`).

Not here: time limits and step budgets. An env terminates when its game is over; the env
manager truncates at `max_steps`, and a per-step wall-clock limit belongs to the Ray layer
that can kill a hung process.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

DEFAULT_ACTION_PATTERN = r"<answer>(.*?)</answer>"
DEFAULT_FORMAT_PENALTY = -0.1

StepResult = tuple[str, float, bool, bool, dict[str, Any]]


class TextEnv(gym.Env[str, str], ABC):
    """A gymnasium env whose observations and actions are text. Subclass and implement both
    methods; constructor arguments must be explicit keywords (no `**kwargs`), so that a
    misspelt `env_config` key fails at `make()` instead of being ignored."""

    @abstractmethod
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a new episode. The same seed gives the same initial state. Returns the
        first observation, which includes the instruction, and an info dict."""

    @abstractmethod
    def step(self, action_text: str) -> StepResult:
        """Apply the model's reply. Returns (observation, reward, terminated, truncated,
        info); info carries `action_is_valid` and `success` (see the module docstring).
        Raises RuntimeError when called after the episode terminated."""


def compile_action_pattern(pattern: str) -> re.Pattern[str]:
    """Compile `action_pattern` with the flags every env uses; a bad regex is a ValueError
    that quotes it (it comes from a YAML file)."""
    try:
        return re.compile(pattern, re.DOTALL | re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"action_pattern {pattern!r} is not a valid regex: {exc}") from exc


def extract_action(action_text: str, pattern: re.Pattern[str]) -> str | None:
    """The stripped text of the first match (its first group if it has one), else None."""
    match = pattern.search(action_text)
    if match is None:
        return None
    return (match.group(1) if pattern.groups else match.group(0)).strip()


def parse_action(
    action_text: str, pattern: re.Pattern[str], action_names: Sequence[str]
) -> str | None:
    """The canonical action name the reply names (case-insensitive), else None."""
    extracted = extract_action(action_text, pattern)
    if extracted is None:
        return None
    by_lower = {name.lower(): name for name in action_names}
    return by_lower.get(extracted.lower())


def check_format_penalty(format_penalty: float) -> float:
    """A format penalty is a float <= 0: a positive one would pay the model for garbage."""
    if not isinstance(format_penalty, (int, float)) or format_penalty > 0:
        raise ValueError(f"format_penalty must be a number <= 0, got {format_penalty!r}")
    return float(format_penalty)


def resolve_seed(seed: int | None) -> int:
    """gymnasium's `seed=None` means "fresh randomness"; draw a concrete seed so that the
    episode can still be reported and replayed."""
    if seed is None:
        return int(np.random.SeedSequence().generate_state(1)[0])
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
    return int(seed)
