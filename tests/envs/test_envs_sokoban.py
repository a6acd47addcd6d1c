"""Sokoban: generated levels are well formed, solvable by their recorded reverse-play
solution, deterministic by seed; pushing, walls and rewards follow the rules."""

from __future__ import annotations

import pytest

from flywheel.envs import SokobanEnv, make
from flywheel.envs.sokoban import generate_level


def grid_of(observation: str, size: int) -> list[str]:
    return observation.splitlines()[-size:]


def count(grid: list[str], symbols: str) -> int:
    return sum(row.count(s) for row in grid for s in symbols)


def play(env: SokobanEnv, moves) -> list[tuple]:
    results = []
    for move in moves:
        results.append(env.step(f"<answer>{move}</answer>"))
        if results[-1][2]:
            break
    return results


@pytest.mark.parametrize(("num_boxes", "size"), [(1, 6), (2, 6), (3, 7), (1, 5)])
def test_generated_levels_are_well_formed_and_solved_by_their_solution(
    num_boxes: int, size: int
) -> None:
    env = SokobanEnv(size=size, num_boxes=num_boxes)
    for seed in range(60):
        observation, _ = env.reset(seed=seed)
        grid = grid_of(observation, size)
        assert all(len(row) == size for row in grid)
        assert grid[0] == grid[-1] == "#" * size
        assert all(row[0] == row[-1] == "#" for row in grid)
        assert count(grid, "X") == num_boxes  # every box starts off target
        assert count(grid, "O") + count(grid, "S") == num_boxes
        assert count(grid, "PS") == 1
        results = play(env, env.solution)
        *_, (final, reward, terminated, truncated, info) = results
        assert terminated and not truncated and info["success"], f"seed {seed}"
        assert count(grid_of(final, size), "√") == num_boxes
        assert count(grid_of(final, size), "XO") == 0
        assert reward >= env.reward_solved


def test_reset_with_same_seed_restores_level_after_play() -> None:
    env = SokobanEnv(size=6)
    observation, _ = env.reset(seed=9)
    assert "Actions: Up, Down, Left, Right." in observation
    level = grid_of(observation, 6)
    results = play(env, env.solution)
    assert results[-1][4]["success"]
    assert len(results) <= len(env.solution) <= env.reverse_steps
    env.reset(seed=9)
    assert env.render_text().splitlines() == level  # reset restores the same level


def test_same_seed_same_level_different_seeds_differ() -> None:
    a, b = generate_level(5, 6, 1, 30), generate_level(5, 6, 1, 30)
    assert a == b
    levels = {SokobanEnv().reset(seed=s)[0] for s in range(30)}
    assert len(levels) > 25


def test_push_rules_and_rewards() -> None:
    env = SokobanEnv(size=6, reward_box_on_target=1.0, reward_solved=10.0, step_penalty=-0.05)
    env.reset(seed=0)
    # Hand-made position: player left of a box, target right of the box, wall beyond.
    #   ######
    #   #____#
    #   #PXO_#
    #   #____#
    #   #____#
    #   ######
    walls = frozenset((r, c) for r in range(6) for c in range(6) if r in (0, 5) or c in (0, 5))
    env.level = env.level.__class__(6, walls, frozenset({(2, 3)}), frozenset(), (2, 1), ())
    env._boxes, env._player = {(2, 2)}, (2, 1)
    assert env.render_text().splitlines()[2] == "#PXO_#"

    observation, reward, terminated, _, info = env.step("<answer>Up</answer>")
    assert observation.splitlines()[1] == "#P___#" and reward == pytest.approx(-0.05)
    env.step("<answer>Down</answer>")
    observation, reward, terminated, _, info = env.step("<answer>right</answer>")
    assert observation.splitlines()[2] == "#_P√_#"
    assert reward == pytest.approx(-0.05 + 1.0 + 10.0)
    assert terminated and info["success"]


def test_push_into_wall_or_box_changes_nothing() -> None:
    env = SokobanEnv(size=6)
    env.reset(seed=0)
    walls = frozenset((r, c) for r in range(6) for c in range(6) if r in (0, 5) or c in (0, 5))
    targets = frozenset({(4, 1), (4, 2)})
    env.level = env.level.__class__(6, walls, targets, frozenset(), (2, 2), ())
    env._boxes, env._player = {(2, 3), (2, 4)}, (2, 2)  # two boxes in a row, wall behind
    before = env.render_text()
    _, reward, terminated, _, info = env.step("<answer>Right</answer>")
    assert env.render_text() == before
    assert (reward, terminated, info["action_is_valid"]) == (0.0, False, True)
    env._boxes = {(1, 2)}
    before = env.render_text()
    env.step("<answer>Up</answer>")  # box against the top wall
    assert env.render_text() == before


def test_pushing_off_a_target_is_penalised() -> None:
    env = SokobanEnv(size=6)
    env.reset(seed=0)
    walls = frozenset((r, c) for r in range(6) for c in range(6) if r in (0, 5) or c in (0, 5))
    targets = frozenset({(2, 2), (4, 4)})
    env.level = env.level.__class__(6, walls, targets, frozenset(), (2, 1), ())
    env._boxes, env._player = {(2, 2), (3, 4)}, (2, 1)
    assert env.render_text().splitlines()[2] == "#P√__#"
    _, reward, terminated, _, _ = env.step("<answer>Right</answer>")
    assert reward == -1.0 and not terminated


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        SokobanEnv(boxes=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="num_boxes"):
        SokobanEnv(size=6, num_boxes=3)
    with pytest.raises(ValueError, match="size"):
        SokobanEnv(size=4)


def test_grid_lookup_renders_the_same_level_with_rolls_other_vocabulary() -> None:
    plain = make("sokoban")
    lookup = {0: "W", 1: ".", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@"}
    vocab = {"W": "wall", ".": "empty", "G": "target", "C": "box on target", "B": "box",
             "A": "player", "@": "player on target"}
    other = make("sokoban", grid_lookup=lookup, grid_vocab=vocab)
    first, _ = plain.reset(seed=4)
    second, _ = other.reset(seed=4)
    table = str.maketrans("#_OX√PS", "W.GBCA@")
    assert second.splitlines()[-6:] == [row.translate(table) for row in first.splitlines()[-6:]]
    assert "Symbols: W wall, . empty, G target, C box on target, B box, A player" in second
    with pytest.raises(ValueError, match="grid_lookup"):
        make("sokoban", grid_lookup={0: "W", 1: "W", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@"})
