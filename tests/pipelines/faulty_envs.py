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
         "huge_observation", "orphans")


class FlakyEnv(TextEnv):
    """A trivial game that misbehaves on turn `fail_on_turn` of every episode whose seed is
    odd (of every episode with `every_seed`): it raises (`mode: crash`), blocks for an hour
    (`hang`), ends its process (`exit`: os._exit(3); `segfault`), returns a NaN reward
    (`nan`) or the string "1.0" (`str_reward`), None as its observation
    (`none_observation`) or a 10 MB one (`huge_observation`), or starts a child and a
    `setsid` orphan that sleep for an hour, writes their pids to `pid_file`, and blocks
    (`orphans`). Other seeds play on."""

    def __init__(self, *, mode: str = "crash", fail_on_turn: int = 1,
                 every_seed: bool = False, pid_file: str = "") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.fail_on_turn = fail_on_turn
        self.every_seed = every_seed
        self.pid_file = pid_file
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
            if self.mode == "orphans":
                _start_sleepers(self.pid_file)
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


def _start_sleepers(pid_file: str) -> None:
    """A plain child and an orphan in a session of its own (its parent called setsid,
    forked it and exited), both sleeping; their pids written to `pid_file`."""
    plain = os.fork()
    if plain == 0:
        time.sleep(3600)
        os._exit(0)
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        orphan = os.fork()
        if orphan == 0:
            time.sleep(3600)
            os._exit(0)
        os.write(write_end, str(orphan).encode())
        os._exit(0)
    os.waitpid(middle, 0)
    orphan = int(os.read(read_end, 32))
    with open(pid_file, "w") as f:
        f.write(f"{plain} {orphan}")
