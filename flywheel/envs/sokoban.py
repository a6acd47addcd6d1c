"""Sokoban as a text game, with levels generated from the seed and solvable by construction.

Generation is reverse play (the idea behind gym-sokoban): carve a connected room, put every
box on a target (the solved state), then let the player walk randomly for `reverse_steps`
moves, *pulling* a box whenever it walks away from one. Each pull is the exact inverse of a
push, so reading the walk backwards with every direction flipped is a solution of the
level. Levels where a box is still on its target are redrawn (from the same RNG, so the
seed still fixes the level). The recorded solution is kept on the env (`solution`) for
tests and debugging; it is never shown to the model and is not necessarily the shortest.

Rendering, one row per line:
    # wall   _ floor   O target   X box   √ box on target   P player   S player on target
Other symbols by `grid_lookup` (ROLL's Sokoban key and cell codes: 0 wall, 1 floor,
2 target, 3 box on target, 4 box, 5 player, 6 player on target) and their meanings in
the instruction by `grid_vocab` (symbol -> words), as ROLL's SokobanDifferentGridVocab tag
renders the same game with another vocabulary.
Actions: Up, Down, Left, Right (case-insensitive). Walking into a wall, or pushing a box
into a wall or another box, is a legal move that changes nothing.
Rewards: `reward_box_on_target` for each box pushed onto a target (its negative for each
pushed off), `reward_solved` when every box is on a target (the episode then terminates
with success), plus `step_penalty` on every legal move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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

Cell = tuple[int, int]

MOVES: dict[str, Cell] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
OPPOSITE = {"Up": "Down", "Down": "Up", "Left": "Right", "Right": "Left"}

# ROLL's cell codes -> flywheel's symbols, and the words the instruction gives each symbol
DEFAULT_GRID_LOOKUP = {0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P", 6: "S"}
DEFAULT_GRID_VOCAB = {"#": "wall", "_": "floor", "O": "target", "X": "box",
                      "√": "box on target", "P": "you", "S": "you on a target"}
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)
FLOOR_FRACTION = 0.75  # share of the interior carved into floor
MAX_GENERATION_ATTEMPTS = 1000


@dataclass(frozen=True)
class SokobanLevel:
    """A generated level: its fixed layout, the start state and a known solution."""

    size: int
    walls: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell
    solution: tuple[str, ...]


def _add(cell: Cell, move: Cell) -> Cell:
    return cell[0] + move[0], cell[1] + move[1]


def _carve_room(rng: np.random.Generator, size: int) -> frozenset[Cell]:
    """Walls everywhere except a random-walk-carved, connected floor inside the border."""
    interior = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)]
    wanted = max(3, round(FLOOR_FRACTION * len(interior)))
    cell = interior[int(rng.integers(len(interior)))]
    floor = {cell}
    directions = list(MOVES.values())
    while len(floor) < wanted:
        dr, dc = directions[int(rng.integers(4))]
        cell = (min(max(cell[0] + dr, 1), size - 2), min(max(cell[1] + dc, 1), size - 2))
        floor.add(cell)
    return frozenset((r, c) for r in range(size) for c in range(size)) - floor


def _reverse_play(
    rng: np.random.Generator, walls: frozenset[Cell], boxes: set[Cell], player: Cell, steps: int
) -> tuple[Cell, list[str]]:
    """Random walk that pulls any box it walks away from. Mutates `boxes`; returns the final
    player cell and the moves made."""
    moves: list[str] = []
    for _ in range(steps):
        options = [name for name, d in MOVES.items() if _add(player, d) not in walls | boxes]
        if not options:
            break
        name = options[int(rng.integers(len(options)))]
        d = MOVES[name]
        behind = (player[0] - d[0], player[1] - d[1])
        if behind in boxes:
            boxes.remove(behind)
            boxes.add(player)
        player = _add(player, d)
        moves.append(name)
    return player, moves


def generate_level(seed: int, size: int, num_boxes: int, reverse_steps: int) -> SokobanLevel:
    """A level in which no box starts on a target, with a solution; deterministic in seed."""
    rng = np.random.default_rng(seed)
    for _ in range(MAX_GENERATION_ATTEMPTS):
        walls = _carve_room(rng, size)
        floor = sorted({(r, c) for r in range(size) for c in range(size)} - walls)
        if len(floor) < num_boxes + 2:
            continue
        picks = rng.choice(len(floor), size=num_boxes + 1, replace=False)
        targets = frozenset(floor[int(i)] for i in picks[:num_boxes])
        boxes = set(targets)
        player, moves = _reverse_play(rng, walls, boxes, floor[int(picks[-1])], reverse_steps)
        # A walk that got stuck (the player boxed itself into a dead end) makes a trivial
        # level; redraw it, like one that left a box on its target.
        if len(moves) == reverse_steps and boxes.isdisjoint(targets):
            solution = tuple(OPPOSITE[m] for m in reversed(moves))
            return SokobanLevel(size, walls, targets, frozenset(boxes), player, solution)
    raise RuntimeError(
        f"Sokoban: no level with {num_boxes} box(es) off target after "
        f"{MAX_GENERATION_ATTEMPTS} attempts (seed={seed}, size={size}); "
        "use a larger size, fewer boxes or more reverse_steps"
    )


class SokobanEnv(TextEnv):
    """Push every box onto a target.

    Args:
        size: side of the square room including its wall border, >= 5.
        num_boxes: boxes (and targets), >= 1.
        reverse_steps: length of the reverse-play walk (longer walks give harder levels);
            None means 30 per box.
        reward_box_on_target: reward per box pushed onto a target (negated when pushed off).
        reward_solved: bonus when all boxes are on targets.
        step_penalty: added on every legal move (usually <= 0).
        action_pattern: regex that extracts the action from the reply (see base.py).
        format_penalty: reward for an unparseable action, <= 0.
        grid_lookup: cell code (0-6, module docstring) -> symbol; None: # _ O √ X P S.
        grid_vocab: symbol -> its meaning in the instruction; None: the default words for
            the symbols grid_lookup gives.
    """

    def __init__(
        self,
        *,
        size: int = 6,
        num_boxes: int = 1,
        reverse_steps: int | None = None,
        reward_box_on_target: float = 1.0,
        reward_solved: float = 10.0,
        step_penalty: float = 0.0,
        action_pattern: str = DEFAULT_ACTION_PATTERN,
        format_penalty: float = DEFAULT_FORMAT_PENALTY,
        grid_lookup: dict[int, str] | None = None,
        grid_vocab: dict[str, str] | None = None,
    ) -> None:
        self.grid_lookup = _check_grid_lookup(grid_lookup)
        self.grid_vocab = _grid_vocab(self.grid_lookup, grid_vocab)
        if not isinstance(size, int) or size < 5:
            raise ValueError(f"size must be an int >= 5, got {size!r}")
        if not isinstance(num_boxes, int) or not 1 <= num_boxes <= (size - 2) ** 2 // 8:
            raise ValueError(
                f"num_boxes must be an int in [1, {(size - 2) ** 2 // 8}] for size {size}, "
                f"got {num_boxes!r}"
            )
        if reverse_steps is None:
            reverse_steps = 30 * num_boxes
        if not isinstance(reverse_steps, int) or reverse_steps < 1:
            raise ValueError(f"reverse_steps must be an int >= 1, got {reverse_steps!r}")
        # configuration
        self.size = size
        self.num_boxes = num_boxes
        self.reverse_steps = reverse_steps
        self.reward_box_on_target = float(reward_box_on_target)
        self.reward_solved = float(reward_solved)
        self.step_penalty = float(step_penalty)
        self.pattern = compile_action_pattern(action_pattern)
        self.format_penalty = check_format_penalty(format_penalty)
        # per-episode state, set by reset()
        self.level: SokobanLevel | None = None
        self._boxes: set[Cell] = set()
        self._player: Cell = (0, 0)
        self._done = False

    @property
    def solution(self) -> tuple[str, ...]:
        """A known solution of the current level (from generation; not shown to the model)."""
        return self._require_reset().solution

    @property
    def instruction(self) -> str:
        return (
            "Sokoban: push every box onto a target. You can push one box at a time and "
            "cannot pull.\n"
            f"Symbols: {', '.join(f'{k} {v}' for k, v in self.grid_vocab.items())}.\n"
            f"Actions: {', '.join(MOVES)}."
        )

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        seed = resolve_seed(seed)
        self.level = generate_level(seed, self.size, self.num_boxes, self.reverse_steps)
        self._boxes = set(self.level.boxes)
        self._player = self.level.player
        self._done = False
        board = self.render_text()
        return f"{self.instruction}\n{board}", {"seed": seed, STATE_KEY: board}

    def step(self, action_text: str) -> StepResult:
        level = self._require_reset()
        if self._done:
            raise RuntimeError("SokobanEnv: the episode is over; call reset()")
        action = parse_action(action_text, self.pattern, list(MOVES))
        if action is None:
            observation = (
                f"Invalid action: give one of {', '.join(MOVES)}. Nothing moved.\n"
                f"{self.render_text()}"
            )
            return observation, self.format_penalty, False, False, self._info(False, False)
        reward = self.step_penalty
        move = MOVES[action]
        ahead = _add(self._player, move)
        if ahead in self._boxes:
            beyond = _add(ahead, move)
            if beyond not in level.walls and beyond not in self._boxes:
                self._boxes.remove(ahead)
                self._boxes.add(beyond)
                reward += self.reward_box_on_target * (
                    (beyond in level.targets) - (ahead in level.targets)
                )
                self._player = ahead
        elif ahead not in level.walls:
            self._player = ahead
        solved = self._boxes == set(level.targets)
        if solved:
            reward += self.reward_solved
        self._done = solved
        return self.render_text(), reward, solved, False, self._info(True, solved)

    def _info(self, action_is_valid: bool, success: bool) -> dict[str, Any]:
        """The step's info; its state key (GiGPO's anchor state, env_manager.state_key) is
        the rendered map alone: the same state whatever text surrounds it (the first
        observation's instruction, an invalid action's note)."""
        return _info(action_is_valid, success) | {STATE_KEY: self.render_text()}

    def render_text(self) -> str:
        """The room, one row per line."""
        level = self._require_reset()
        rows = []
        for r in range(level.size):
            row = []
            for c in range(level.size):
                cell = (r, c)
                on_target = cell in level.targets
                if cell in level.walls:
                    code = WALL
                elif cell == self._player:
                    code = PLAYER_ON_TARGET if on_target else PLAYER
                elif cell in self._boxes:
                    code = BOX_ON_TARGET if on_target else BOX
                else:
                    code = TARGET if on_target else FLOOR
                row.append(self.grid_lookup[code])
            rows.append("".join(row))
        return "\n".join(rows)

    def _require_reset(self) -> SokobanLevel:
        if self.level is None:
            raise RuntimeError("SokobanEnv: call reset() before step() or render_text()")
        return self.level


def _check_grid_lookup(grid_lookup: dict[int, str] | None) -> dict[int, str]:
    if grid_lookup is None:
        return dict(DEFAULT_GRID_LOOKUP)
    try:
        lookup = {int(k): v for k, v in dict(grid_lookup).items()}
    except (TypeError, ValueError):
        lookup = {}
    symbols = list(lookup.values())
    if (set(lookup) != set(DEFAULT_GRID_LOOKUP) or not all(
            isinstance(v, str) and len(v) == 1 and not v.isspace() for v in symbols)
            or len(set(symbols)) != len(symbols)):
        raise ValueError(f"grid_lookup must map each cell code 0-6 to its own one-character "
                         f"symbol, got {grid_lookup!r}")
    return lookup


def _grid_vocab(lookup: dict[int, str], grid_vocab: dict[str, str] | None) -> dict[str, str]:
    """Symbol -> meaning, in the default order (wall, floor, target, box, box on target,
    you, you on a target)."""
    if grid_vocab is None:
        words = dict(zip(DEFAULT_GRID_LOOKUP.values(), range(7)))
        return {lookup[words[sym]]: meaning for sym, meaning in DEFAULT_GRID_VOCAB.items()}
    if not isinstance(grid_vocab, dict) or set(grid_vocab) != set(lookup.values()):
        raise ValueError(f"grid_vocab must give a meaning to each symbol of grid_lookup "
                         f"({sorted(lookup.values())}), got {grid_vocab!r}")
    return {str(k): str(v) for k, v in grid_vocab.items()}


def _info(action_is_valid: bool, success: bool) -> dict[str, Any]:
    return {"action_is_valid": action_is_valid, "success": success}
