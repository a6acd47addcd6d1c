"""Envs that misbehave on purpose: the agentic fault tests register them by import path
(`tests.pipelines.faulty_envs:FlakyEnv`, allow-listed), as a user would their own env."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from flywheel.envs import TextEnv
from flywheel.envs.base import StepResult, resolve_seed

MODES = ("crash", "hang", "exit", "segfault", "nan", "str_reward", "none_observation",
         "huge_observation")


class FlakyEnv(TextEnv):
    """A trivial game that misbehaves on turn `fail_on_turn` of every episode whose seed is
    odd (of every episode with `every_seed`): it raises (`mode: crash`), blocks for an hour
    (`hang`), ends its process (`exit`: os._exit(3); `segfault`), returns a NaN reward
    (`nan`) or the string "1.0" (`str_reward`), None as its observation
    (`none_observation`) or a 10 MB one (`huge_observation`). Other seeds play on."""

    def __init__(self, *, mode: str = "crash", fail_on_turn: int = 1,
                 every_seed: bool = False) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.fail_on_turn = fail_on_turn
        self.every_seed = every_seed
        self.seed = 0
        self.turn = 0

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.seed, self.turn = resolve_seed(seed), 0
        return "Reply <answer>Up</answer>.", {"seed": self.seed}

    def step(self, action_text: str) -> StepResult:
        self.turn += 1
        won = "up" in action_text.lower()
        info = {"action_is_valid": True, "success": won}
        if (self.every_seed or self.seed % 2) and self.turn == self.fail_on_turn:
            if self.mode == "hang":
                time.sleep(3600)
            if self.mode == "exit":
                os._exit(3)
            if self.mode == "segfault":
                ctypes.string_at(0)
            if self.mode == "nan":
                return "Again.", float("nan"), won, False, info
            if self.mode == "str_reward":
                return "Again.", "1.0", won, False, info
            if self.mode == "none_observation":
                return None, 0.0, False, False, info
            if self.mode == "huge_observation":
                return "x" * 10_000_000, 0.0, False, False, info
            raise RuntimeError(f"boom on turn {self.turn}")
        return "Again.", float(won), won, False, info
