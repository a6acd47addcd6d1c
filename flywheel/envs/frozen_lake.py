"""FrozenLake as a text game, on top of gymnasium's own `FrozenLakeEnv`.

Why wrap gymnasium rather than re-implement: its dynamics (including the slippery
transitions) and its map generator are the reference everyone compares against. We add
only what a language model needs: a seeded random map per episode, a text rendering, and
action parsing.

Seeding: one seed fixes both the map (`generate_random_map(size, p, seed=seed)`, which
only returns maps with a path from start to goal) and the slip randomness (the inner env
is reset with the same seed). Same seed + same actions -> same observations.

Rendering, one row per line:
    P player   _ frozen ice (the start cell too)   O hole   G goal
    X player fell in a hole   √ player on the goal
Actions: Left, Down, Right, Up (case-insensitive). Reward 1 on reaching the goal, else 0
(gymnasium's schedule); falling in a hole terminates with success False.

`p` close to 0 makes solvable maps rare and generation slow (gymnasium retries until one
is solvable); the default 0.8 is instant.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from flywheel.envs.base import (
    DEFAULT_ACTION_PATTERN,
    DEFAULT_FORMAT_PENALTY,
    StepResult,
    TextEnv,
    check_format_penalty,
    compile_action_pattern,
    parse_action,
    resolve_seed,
)
from flywheel.envs.trajectory import STATE_KEY

# gymnasium's action indices: LEFT=0, DOWN=1, RIGHT=2, UP=3.
ACTIONS = {"Left": 0, "Down": 1, "Right": 2, "Up": 3}

_TILE = {"S": "_", "F": "_", "H": "O", "G": "G"}
_PLAYER_ON = {"S": "P", "F": "P", "H": "X", "G": "√"}


class FrozenLakeEnv(TextEnv):
    """Cross a frozen lake from the top-left corner to the goal in the bottom-right.

    Args:
        size: side of the square map, >= 2.
        p: probability that a generated tile is frozen (walkable), in (0, 1].
        is_slippery: if True the move goes in the intended direction with probability 1/3
            and to either side otherwise (gymnasium's rule); False is deterministic.
        action_pattern: regex that extracts the action from the reply (see base.py).
        format_penalty: reward for an unparseable action, <= 0.
        env_instruction: replaces the built-in instruction text shown before the first map
            (ROLL's key); "" shows the map alone (short prompts for small models).
    """

    def __init__(
        self,
        *,
        size: int = 4,
        p: float = 0.8,
        is_slippery: bool = False,
        action_pattern: str = DEFAULT_ACTION_PATTERN,
        format_penalty: float = DEFAULT_FORMAT_PENALTY,
        env_instruction: str | None = None,
    ) -> None:
        if not isinstance(size, int) or size < 2:
            raise ValueError(f"size must be an int >= 2, got {size!r}")
        if not 0 < p <= 1:
            raise ValueError(f"p (probability of a frozen tile) must be in (0, 1], got {p!r}")
        # configuration
        self.size = size
        self.p = float(p)
        self.is_slippery = bool(is_slippery)
        self.pattern = compile_action_pattern(action_pattern)
        self.format_penalty = check_format_penalty(format_penalty)
        self.env_instruction = env_instruction
        # per-episode state, set by reset()
        self._lake: GymFrozenLake | None = None
        self._done = False

    @property
    def instruction(self) -> str:
        if self.env_instruction is not None:
            return self.env_instruction
        slip = (
            " The ice is slippery: you may slide sideways instead of where you meant to go."
            if self.is_slippery
            else ""
        )
        return (
            "FrozenLake: walk on the frozen lake from your position to the goal without "
            "falling into a hole.\n"
            "Symbols: P you, _ frozen ice, O hole, G goal, X you in a hole, √ you on the goal.\n"
            f"Actions: {', '.join(ACTIONS)}.{slip}"
        )

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        seed = resolve_seed(seed)
        desc = generate_random_map(size=self.size, p=self.p, seed=seed)
        self._lake = GymFrozenLake(desc=desc, is_slippery=self.is_slippery)
        self._lake.reset(seed=seed)
        self._done = False
        intro = f"{self.instruction}\n" if self.instruction else ""
        return f"{intro}{self.render_text()}", {"seed": seed, STATE_KEY: self.render_text()}

    def step(self, action_text: str) -> StepResult:
        lake = self._require_running()
        action = parse_action(action_text, self.pattern, list(ACTIONS))
        if action is None:
            observation = (
                f"Invalid action: give one of {', '.join(ACTIONS)}. Nothing moved.\n"
                f"{self.render_text()}"
            )
            return observation, self.format_penalty, False, False, self._info(False, False)
        _, reward, terminated, _, _ = lake.step(ACTIONS[action])
        success = bool(terminated and self._tile() == "G")
        self._done = bool(terminated)
        return self.render_text(), float(reward), bool(terminated), False, self._info(True, success)

    def _info(self, action_is_valid: bool, success: bool) -> dict[str, Any]:
        """The step's info; its state key (GiGPO's anchor state, env_manager.state_key) is
        the rendered map alone: the same state whatever text surrounds it (the first
        observation's instruction, an invalid action's note)."""
        return _info(action_is_valid, success) | {STATE_KEY: self.render_text()}

    def render_text(self) -> str:
        """The map, one row per line, with the player drawn on it."""
        lake = self._require_reset()
        position = divmod(int(lake.s), self.size)
        rows = []
        for r, row in enumerate(self._desc_rows()):
            rows.append(
                "".join(
                    _PLAYER_ON[tile] if (r, c) == position else _TILE[tile]
                    for c, tile in enumerate(row)
                )
            )
        return "\n".join(rows)

    def _desc_rows(self) -> list[str]:
        lake = self._require_reset()
        return [row.tobytes().decode() for row in lake.desc]

    def _tile(self) -> str:
        r, c = divmod(int(self._require_reset().s), self.size)
        return self._desc_rows()[r][c]

    def _require_reset(self) -> GymFrozenLake:
        if self._lake is None:
            raise RuntimeError("FrozenLakeEnv: call reset() before step() or render_text()")
        return self._lake

    def _require_running(self) -> GymFrozenLake:
        lake = self._require_reset()
        if self._done:
            raise RuntimeError("FrozenLakeEnv: the episode is over; call reset()")
        return lake


def _info(action_is_valid: bool, success: bool) -> dict[str, Any]:
    return {"action_is_valid": action_is_valid, "success": success}
