"""Guess-the-number: a multi-turn game that can only be played well with memory.

Why it needs memory: each observation reports only the verdict on the latest guess ("too
low" / "too high"); it never repeats earlier guesses or the interval they imply. To keep
narrowing the interval (binary search wins in ceil(log2(high - low + 1)) guesses) the model
has to recall every earlier verdict from the conversation. It therefore works only when the
prompt holds the whole history, as the env manager's trajectory mode builds it; a policy
that sees only the latest observation can do no better than guess blindly.

The per-step metric `guess_consistent` (1 when the guess lies inside the interval the
earlier verdicts still allow) measures that memory directly, independently of luck.
Reward 1 for the correct guess (terminates with success), 0 for a wrong one; a reply
without an integer in [low, high] is an invalid action (state unchanged, format_penalty).
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


class GuessNumberEnv(TextEnv):
    """Find a secret integer in [low, high] from higher/lower feedback.

    Args:
        low: smallest possible secret.
        high: largest possible secret, > low.
        action_pattern: regex that extracts the guess from the reply (see base.py).
        format_penalty: reward for an unparseable or out-of-range guess, <= 0.
    """

    def __init__(
        self,
        *,
        low: int = 1,
        high: int = 100,
        action_pattern: str = DEFAULT_ACTION_PATTERN,
        format_penalty: float = DEFAULT_FORMAT_PENALTY,
    ) -> None:
        if not isinstance(low, int) or not isinstance(high, int) or high <= low:
            raise ValueError(f"need integers low < high, got low={low!r}, high={high!r}")
        # configuration
        self.low = low
        self.high = high
        self.pattern = compile_action_pattern(action_pattern)
        self.format_penalty = check_format_penalty(format_penalty)
        # per-episode state, set by reset()
        self._secret: int | None = None
        self._possible = (low, high)  # interval the verdicts so far still allow
        self._done = False

    @property
    def instruction(self) -> str:
        return (
            f"Guess the number: I picked a secret integer between {self.low} and {self.high} "
            "(inclusive). Each turn, guess one integer. I will only say whether the secret is "
            "higher or lower than your latest guess; I will not repeat earlier answers, so "
            "remember them."
        )

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        seed = resolve_seed(seed)
        rng = np.random.default_rng(seed)
        self._secret = int(rng.integers(self.low, self.high + 1))
        self._possible = (self.low, self.high)
        self._done = False
        return self.instruction, {"seed": seed}

    def step(self, action_text: str) -> StepResult:
        if self._secret is None:
            raise RuntimeError("GuessNumberEnv: call reset() before step()")
        if self._done:
            raise RuntimeError("GuessNumberEnv: the episode is over; call reset()")
        guess = self._parse_guess(action_text)
        if guess is None:
            observation = f"Invalid guess: give one integer between {self.low} and {self.high}."
            invalid = {"action_is_valid": False, "success": False}
            return observation, self.format_penalty, False, False, invalid
        lo, hi = self._possible
        info: dict[str, Any] = {"action_is_valid": True, "guess_consistent": lo <= guess <= hi}
        if guess == self._secret:
            self._done = True
            info["success"] = True
            return f"{guess} is correct!", 1.0, True, False, info
        info["success"] = False
        if guess < self._secret:
            self._possible = (max(lo, guess + 1), hi)
            return f"{guess} is too low: the secret is higher.", 0.0, False, False, info
        self._possible = (lo, min(hi, guess - 1))
        return f"{guess} is too high: the secret is lower.", 0.0, False, False, info

    def _parse_guess(self, action_text: str) -> int | None:
        extracted = extract_action(action_text, self.pattern)
        if extracted is None:
            return None
        try:
            guess = int(extracted)
        except ValueError:
            return None
        return guess if self.low <= guess <= self.high else None
