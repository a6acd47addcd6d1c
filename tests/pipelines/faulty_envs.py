"""Envs that misbehave on purpose: the agentic fault tests register them by import path
(`tests.pipelines.faulty_envs:FlakyEnv`, allow-listed), as a user would their own env."""

from __future__ import annotations

import time
from typing import Any

from flywheel.envs import TextEnv
from flywheel.envs.base import StepResult, resolve_seed


class FlakyEnv(TextEnv):
    """A trivial game that fails on turn `fail_on_turn` of every episode whose seed is odd:
    it raises (`mode: crash`) or blocks for an hour (`mode: hang`). Even seeds play on."""

    def __init__(self, *, mode: str = "crash", fail_on_turn: int = 1) -> None:
        if mode not in ("crash", "hang"):
            raise ValueError(f"mode must be crash or hang, got {mode!r}")
        self.mode = mode
        self.fail_on_turn = fail_on_turn
        self.seed = 0
        self.turn = 0

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.seed, self.turn = resolve_seed(seed), 0
        return "Reply <answer>Up</answer>.", {"seed": self.seed}

    def step(self, action_text: str) -> StepResult:
        self.turn += 1
        if self.seed % 2 and self.turn == self.fail_on_turn:
            if self.mode == "hang":
                time.sleep(3600)
            raise RuntimeError(f"boom on turn {self.turn}")
        won = "up" in action_text.lower()
        return "Again.", float(won), won, False, {"action_is_valid": True, "success": won}
