"""FrozenLake: rendering symbols, determinism by seed, solvability of generated maps.

Paths are found with a BFS written here, independently of gymnasium's own validity check.
"""

from __future__ import annotations

from collections import deque

import pytest

from flywheel.envs import FrozenLakeEnv

MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}


def grid_of(observation: str, size: int) -> list[str]:
    return observation.splitlines()[-size:]


def find(grid: list[str], symbol: str) -> tuple[int, int]:
    for r, row in enumerate(grid):
        if symbol in row:
            return r, row.index(symbol)
    raise AssertionError(f"{symbol!r} not in grid {grid}")


def bfs_path(grid: list[str], goal_symbols: str) -> list[str] | None:
    """Moves from P to the first cell holding one of `goal_symbols`, over frozen cells."""
    size = len(grid)
    start = find(grid, "P")
    queue, seen = deque([(start, [])]), {start}
    while queue:
        (r, c), path = queue.popleft()
        for name, (dr, dc) in MOVES.items():
            nr, nc = r + dr, c + dc
            if not (0 <= nr < size and 0 <= nc < size) or (nr, nc) in seen:
                continue
            if grid[nr][nc] in goal_symbols:
                return [*path, name]
            if grid[nr][nc] == "_":
                seen.add((nr, nc))
                queue.append(((nr, nc), [*path, name]))
    return None


def act(env: FrozenLakeEnv, move: str):
    return env.step(f"<answer>{move}</answer>")


def test_known_seed_map_and_symbols() -> None:
    # Pinned: gymnasium's generate_random_map(4, 0.8, seed=0). If gymnasium changes its
    # generator this fails, and old seeds no longer reproduce old episodes.
    env = FrozenLakeEnv(size=4)
    observation, info = env.reset(seed=0)
    # the state key (GiGPO's anchor state) is the map alone, without the instruction
    assert info == {"seed": 0, "state_key": "P___\nOO__\n_OO_\nO__G"}
    assert "Left, Down, Right, Up" in observation  # the instruction is in the observation
    assert grid_of(observation, 4) == ["P___", "OO__", "_OO_", "O__G"]
    observation, reward, terminated, _, info = act(env, "right")
    assert observation == info["state_key"] == "_P__\nOO__\n_OO_\nO__G"
    assert (reward, terminated, info["success"]) == (0.0, False, False)
    observation, reward, terminated, _, info = act(env, "DOWN")
    assert observation == "____\nOX__\n_OO_\nO__G"  # X: the player in a hole
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    with pytest.raises(RuntimeError, match="over"):
        act(env, "Up")


def test_reaching_the_goal_shows_check_mark_and_pays_one() -> None:
    env = FrozenLakeEnv(size=4)
    observation, _ = env.reset(seed=0)
    path = bfs_path(grid_of(observation, 4), "G")
    assert path is not None
    for move in path[:-1]:
        _, reward, terminated, _, _ = act(env, move)
        assert (reward, terminated) == (0.0, False)
    observation, reward, terminated, truncated, info = act(env, path[-1])
    assert observation.splitlines()[-1].endswith("√")
    assert "P" not in observation and "G" not in observation
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


@pytest.mark.parametrize("size", [4, 6, 8])
def test_every_generated_map_is_solvable(size: int) -> None:
    env = FrozenLakeEnv(size=size, p=0.7)
    for seed in range(150):
        observation, _ = env.reset(seed=seed)
        grid = grid_of(observation, size)
        assert grid[0][0] == "P" and grid[-1][-1] == "G"
        assert bfs_path(grid, "G") is not None, f"seed {seed} unsolvable: {grid}"


def test_same_seed_same_map_and_slippery_trajectory() -> None:
    moves = ["Right", "Down", "Down", "Right", "Left", "Down", "Right", "Up"] * 3

    def play(seed: int) -> list[str]:
        env = FrozenLakeEnv(size=6, is_slippery=True)
        seen = [env.reset(seed=seed)[0]]
        for move in moves:
            observation, _, terminated, _, _ = act(env, move)
            seen.append(observation)
            if terminated:
                break
        return seen

    assert play(11) == play(11)
    maps = {tuple(grid_of(FrozenLakeEnv(size=6).reset(seed=s)[0], 6)) for s in range(20)}
    assert len(maps) > 15  # different seeds give different maps


def test_slippery_moves_sometimes_go_sideways() -> None:
    env = FrozenLakeEnv(size=8, p=1.0, is_slippery=True)  # no holes: never terminates early
    sideways = 0
    for seed in range(30):
        env.reset(seed=seed)
        observation, *_ = act(env, "Right")
        sideways += find(grid_of(observation, 8), "P") != (0, 1)
    assert 0 < sideways < 30


def test_unknown_and_bad_arguments() -> None:
    with pytest.raises(TypeError):
        FrozenLakeEnv(map_size=4)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="p"):
        FrozenLakeEnv(p=0.0)
    with pytest.raises(ValueError, match="size"):
        FrozenLakeEnv(size=1)
