"""Action parsing shared by every env, and the invalid-action contract on each built-in env."""

from __future__ import annotations

import pytest

from flywheel.envs import (
    DEFAULT_ACTION_PATTERN,
    compile_action_pattern,
    extract_action,
    make,
    parse_action,
)

NAMES = ["Left", "Down", "Right", "Up"]
DEFAULT = compile_action_pattern(DEFAULT_ACTION_PATTERN)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>Left</answer>", "Left"),
        ("I think <answer>  rIGHT \n</answer> is best", "Right"),
        ("<ANSWER>up</ANSWER>", "Up"),  # tags case-insensitive too
        ("<answer>\nDown\n</answer>", "Down"),  # DOTALL: newlines inside the tags
        ("<answer>Up</answer> then <answer>Down</answer>", "Up"),  # first match wins
        ("<answer>Sideways</answer>", None),  # not an action name
        ("Left", None),  # no tags
        ("<answer>Left", None),  # unclosed
        ("", None),
    ],
)
def test_parse_action_default_pattern(text: str, expected: str | None) -> None:
    assert parse_action(text, DEFAULT, NAMES) == expected


def test_custom_pattern_with_and_without_group() -> None:
    assert (
        parse_action("Action: down.", compile_action_pattern(r"Action:\s*(\w+)"), NAMES) == "Down"
    )
    assert extract_action("go UP now", compile_action_pattern(r"up|down")) == "UP"


def test_bad_regex_is_a_value_error_quoting_it() -> None:
    with pytest.raises(ValueError, match=r"<answer>\(\.\*\?"):
        compile_action_pattern("<answer>(.*?</answer>")


@pytest.mark.parametrize(
    ("env_type", "config", "valid_action"),
    [
        ("frozen_lake", {"size": 5}, "<answer>Right</answer>"),
        ("sokoban", {}, "<answer>Up</answer>"),
        ("guess_number", {}, "<answer>50</answer>"),
    ],
)
def test_invalid_action_keeps_state_and_pays_format_penalty(
    env_type: str, config: dict, valid_action: str
) -> None:
    env = make(env_type, format_penalty=-0.25, **config)
    env.reset(seed=3)
    before = _state(env)
    for garbage in ["no tags at all", "<answer>jump</answer>", "<answer></answer>"]:
        _, reward, terminated, truncated, info = env.step(garbage)
        assert reward == -0.25
        assert (terminated, truncated) == (False, False)
        assert info["action_is_valid"] is False and info["success"] is False
        assert _state(env) == before
    _, _, _, _, info = env.step(valid_action)
    assert info["action_is_valid"] is True


def _state(env) -> object:
    if hasattr(env, "render_text"):
        return env.render_text()
    return env._possible, env._secret  # guess_number keeps its state hidden


@pytest.mark.parametrize("env_type", ["frozen_lake", "sokoban", "guess_number"])
def test_positive_format_penalty_rejected(env_type: str) -> None:
    with pytest.raises(ValueError, match="format_penalty"):
        make(env_type, format_penalty=0.5)


@pytest.mark.parametrize("env_type", ["frozen_lake", "sokoban", "guess_number"])
def test_step_before_reset_raises(env_type: str) -> None:
    env = make(env_type)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>Up</answer>")
