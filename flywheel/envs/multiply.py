"""Multiply: the product of two numbers too long to multiply in one's head, one answer per
episode. The env that a tool is for (issue 26): a small chat model gets 4-digit products
wrong from memory, and right by calling the calculator or the python tool (flywheel/tools)
before answering. Play it with `custom_envs.<tag>.tool_use`; without tools it is a plain
one-turn arithmetic env.

The answer is the first `<answer>N</answer>` (action_pattern); commas, spaces and
underscores inside N are ignored. A reply without an integer answer is invalid (state
unchanged, format_penalty, the episode goes on, so a model may still answer in a later
turn); an integer answer ends the episode with reward 1 if it is the exact product, else 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flywheel.envs.base import (
    DEFAULT_ACTION_PATTERN,
    DEFAULT_FORMAT_PENALTY,
    StepResult,
    TextEnv,
    check_format_penalty,
    compile_action_pattern,
    extract_action,
    resolve_seed,
)

DEFAULT_INSTRUCTION = ("What is {a} * {b}? Compute it exactly (use a tool), then give only "
                       "the number as <answer>N</answer>.")


class MultiplyEnv(TextEnv):
    """Args:
        min_digits, max_digits: each factor has a digit count drawn from this range.
        instruction: the question, with {a} and {b}.
        action_pattern: regex that extracts the answer (see base.py).
        format_penalty: reward of a reply without an integer answer, <= 0.
    """

    def __init__(self, *, min_digits: int = 3, max_digits: int = 4,
                 instruction: str = DEFAULT_INSTRUCTION,
                 action_pattern: str = DEFAULT_ACTION_PATTERN,
                 format_penalty: float = DEFAULT_FORMAT_PENALTY) -> None:
        if not (isinstance(min_digits, int) and isinstance(max_digits, int)
                and 1 <= min_digits <= max_digits <= 18):
            raise ValueError(f"need integers 1 <= min_digits <= max_digits <= 18, got "
                             f"{min_digits!r}, {max_digits!r}")
        if "{a}" not in instruction or "{b}" not in instruction:
            raise ValueError(f"instruction must contain {{a}} and {{b}}, got {instruction!r}")
        # configuration
        self.min_digits = min_digits
        self.max_digits = max_digits
        self.instruction = instruction
        self.pattern = compile_action_pattern(action_pattern)
        self.format_penalty = check_format_penalty(format_penalty)
        # per-episode state, set by reset()
        self.factors: tuple[int, int] | None = None
        self._done = False

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        seed = resolve_seed(seed)
        rng = np.random.default_rng(seed)
        a, b = (self._factor(rng) for _ in range(2))
        self.factors = (a, b)
        self._done = False
        return self.instruction.format(a=a, b=b), {"seed": seed}

    def _factor(self, rng: np.random.Generator) -> int:
        digits = int(rng.integers(self.min_digits, self.max_digits + 1))
        return int(rng.integers(10 ** (digits - 1) if digits > 1 else 2, 10**digits))

    def step(self, action_text: str) -> StepResult:
        if self.factors is None or self._done:
            raise RuntimeError("MultiplyEnv: call reset() before step()")
        extracted = extract_action(action_text, self.pattern)
        answer = None
        if extracted is not None:
            try:
                answer = int(extracted.replace(",", "").replace("_", "").replace(" ", ""))
            except ValueError:
                answer = None
        if answer is None:
            return ("Give the product as one integer: <answer>N</answer>.", self.format_penalty,
                    False, False, {"action_is_valid": False, "success": False})
        self._done = True
        a, b = self.factors
        correct = answer == a * b
        verdict = "Correct." if correct else f"Wrong: {a} * {b} = {a * b}."
        return verdict, float(correct), True, False, {"action_is_valid": True,
                                                      "success": correct}
