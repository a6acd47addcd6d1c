"""GEM envs (gem-llm) through the adapter: the contract of base.py on GEM's own games."""

from __future__ import annotations

import re

import pytest

from flywheel.envs import GemEnv, make


def test_guess_the_number_binary_search_wins_with_success():
    env = make("game:GuessTheNumber-v0", min_number=1, max_number=20, max_turns=10)
    assert isinstance(env, GemEnv)
    observation, info = env.reset(seed=5)
    assert "between 1 and 20" in observation and observation.endswith("Enter your next guess.")
    low, high, done, turns = 1, 20, False, 0
    while not done:
        guess = (low + high) // 2
        observation, reward, done, truncated, info = env.step(f"I guess \\boxed{{{guess}}}")
        turns += 1
        assert info["action_is_valid"]
        if "higher" in observation:
            low = guess + 1
        elif "lower" in observation:
            high = guess - 1
    assert info["success"] and reward == 1.0 and not truncated and turns <= 5
    with pytest.raises(RuntimeError, match="reset"):
        env.step("\\boxed{3}")


def test_guess_the_number_format_error_is_an_invalid_action():
    env = make("game:GuessTheNumber-v0")
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step("ten")
    assert reward == -0.1 and terminated and not info["action_is_valid"]
    assert not info["success"]


def test_letter_counting_scores_the_boxed_answer():
    env = make("rg:letter_counting", size=20, seed=3)
    question, _ = env.reset(seed=7)
    assert question == env.reset(seed=7)[0]  # a seed picks the question
    letter, text = re.search(r'letter "(\w)" appear in the text: "(.*)"', question).groups()
    answer = text.lower().count(letter)
    _, reward, terminated, _, info = env.step(f"\\boxed{{{answer}}}")
    assert reward == 1.0 and terminated and info["success"] and info["action_is_valid"]
    env.reset(seed=7)
    _, reward, _, _, info = env.step("no idea")
    assert reward == 0.0 and not info["success"] and not info["action_is_valid"]


def test_gem_env_config_keys_are_checked():
    with pytest.raises(TypeError, match="'max_turn'.*Did you mean 'max_turns'"):
        make("game:GuessTheNumber-v0", max_turn=3)
