"""GEM environments (PyPI `gem-llm`, the library ROLL's agentic examples use) as TextEnvs.

Why an adapter and not GEM's own `make` by name: flywheel's registry refuses factories that
swallow unknown keys (GEM's envs take `**_`), so each GEM env id is registered here with its
own keyword arguments, and a misspelt `env_config` key fails at load as for every env.
`gem` is imported when an env is built, never with this package (it imports reasoning-gym,
seconds of start-up that config checks must not pay).

What the adapter adds to GEM's five-tuple (base.py's info contract):
- the observation is followed by GEM's `info["suffix"]` when present ("Enter your next
  guess."), as ROLL's StepConcatEnvManager renders it;
- `success`: the episode ended with GEM's success reward (`LanguageGameReward.
  success_reward` = 1.0 for games; a correct answer scores 1.0 in reasoning-gym);
- `action_is_valid`: per env (`valid` below): for GEM games, the step was not GEM's format
  error (its `format_error_reward`); for reasoning-gym, the reply had a `\\boxed{}` answer;
- a step after the episode ended raises RuntimeError (GEM would play on).

ROLL pins gem-llm 0.0.4, whose registry has the ids ROLL's files name
(`game:GuessTheNumber-v0`); 0.1.0 renamed them (-easy / -hard / -random).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flywheel.envs.base import StepResult, TextEnv

SUCCESS_REWARD = 1.0  # gem.utils.constants.LanguageGameReward.success_reward
FORMAT_ERROR_REWARD = -0.1  # gem.utils.constants.LanguageGameReward.format_error_reward


class GemEnv(TextEnv):
    """One GEM env, built by `gem.make(env_id, **kwargs)`.

    Args:
        env_id: GEM's registered id, e.g. "game:GuessTheNumber-v0".
        kwargs: the env's own arguments (checked by the factory that calls this).
        valid: (reply, reward) -> whether the reply was a well-formed action.
    """

    def __init__(self, env_id: str, kwargs: dict[str, Any],
                 valid: Callable[[str, float], bool]) -> None:
        try:
            import gem
        except ImportError as error:  # pragma: no cover - gem-llm is a dependency
            raise ImportError(f"env {env_id!r} needs the GEM library: pip install "
                              f"gem-llm==0.0.4 ({error})") from error
        self.env_id = env_id
        self.env = gem.make(env_id, **kwargs)
        self.valid = valid
        self._done = True

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed)
        self._done = False
        return _with_suffix(observation, info), {"success": False}

    def step(self, action_text: str) -> StepResult:
        if self._done:
            raise RuntimeError(f"{self.env_id}: step() after the episode ended; call reset()")
        observation, reward, terminated, truncated, info = self.env.step(action_text)
        reward = float(reward)
        self._done = bool(terminated or truncated)
        return (_with_suffix(observation, info), reward, bool(terminated), bool(truncated),
                {"success": bool(terminated and reward >= SUCCESS_REWARD),
                 "action_is_valid": bool(self.valid(action_text, reward))})

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _with_suffix(observation: Any, info: dict[str, Any]) -> str:
    suffix = (info or {}).get("suffix")
    return f"{observation}\n{suffix}" if suffix else str(observation)


def _not_format_error(action_text: str, reward: float) -> bool:
    return reward != FORMAT_ERROR_REWARD


def _has_boxed_answer(action_text: str, reward: float) -> bool:
    from gem.utils.parsing import extract_last_boxed_answer
    return extract_last_boxed_answer(action_text) is not None


def guess_the_number(*, min_number: int = 1, max_number: int = 20,
                     max_turns: int = 10) -> GemEnv:
    """GEM's `game:GuessTheNumber-v0` (defaults: its registration in gem-llm 0.0.4)."""
    return GemEnv("game:GuessTheNumber-v0", {"min_number": min_number,
                                             "max_number": max_number,
                                             "max_turns": max_turns}, _not_format_error)


def reasoning_gym_task(name: str) -> Callable[..., GemEnv]:
    """A factory for GEM's `rg:<name>`: one reasoning-gym question per episode, answered in
    `\\boxed{}` (size and seed: the dataset GEM draws from; GEM's defaults)."""
    def factory(*, size: int = 500, seed: int = 42) -> GemEnv:
        return GemEnv(f"rg:{name}", {"size": size, "seed": seed}, _has_boxed_answer)
    factory.__name__ = f"rg_{name}"
    return factory


# env_type -> factory; flywheel.envs registers each name.
GEM_ENVS: dict[str, Callable[..., GemEnv]] = {
    "game:GuessTheNumber-v0": guess_the_number,
    "rg:letter_counting": reasoning_gym_task("letter_counting"),
}
