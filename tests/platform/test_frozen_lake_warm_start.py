"""The FrozenLake warm start: its walker, and that it plays the example's exact game."""

import random
from collections import Counter
from pathlib import Path

from flywheel.pipelines.config import load_config
from flywheel.workshop.frozen_lake_warm_start import (
    FrozenLakeWarmStartConfig,
    falls,
    walker_action,
)

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_val_frozen_lake_async.yaml"


def test_warm_start_plays_the_example_configs_game():
    """SFT sequences must be token for token what RL sees: same env and templates."""
    env = load_config(EXAMPLE, []).custom_envs["FrozenLake"]
    ws = FrozenLakeWarmStartConfig()
    assert env.env_type == "frozen_lake"
    assert (env.max_steps, env.max_tokens_per_step) == (ws.max_steps, ws.max_tokens_per_step)
    assert (env.agent_system_template, env.agent_template) == (ws.system_template,
                                                               ws.turn_template)
    assert env.env_config == {"size": ws.size, "p": ws.p, "is_slippery": False,
                              "env_instruction": ws.env_instruction,
                              "action_pattern": ws.action_pattern}


def test_walker_never_steps_into_a_hole_and_has_no_favourite_move():
    rng = random.Random(0)
    # P top middle, a hole below it; the previous reply precedes the first row
    prompt = "P__\n_O_\n__G\nRight_P_\n_O_\n__G\n"
    picks = Counter(walker_action(prompt, 3, rng) for _ in range(3000))
    assert set(picks) == {"Right", "Left", "Up"}  # Down would fall in
    assert all(900 < n < 1100 for n in picks.values()), picks
    # in the corner, bumping into an edge is safe (it leaves the player in place)
    corner = Counter(walker_action("P_O\nO__\n__G\n", 3, rng) for _ in range(400))
    assert set(corner) == {"Right", "Left", "Up"}


def test_falls_counts_episodes_that_ended_in_a_hole():
    assert falls({"success": 0.25, "truncated": 0.5, "failed": 0.0}) == 0.25
