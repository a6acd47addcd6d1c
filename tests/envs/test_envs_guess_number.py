"""Guess-the-number: feedback is correct, binary search wins, and the observations hold
only the latest verdict (which is why the game needs memory)."""

from __future__ import annotations

import math

import pytest

from flywheel.envs import GuessNumberEnv


def guess(env: GuessNumberEnv, value) -> tuple:
    return env.step(f"<answer>{value}</answer>")


def test_binary_search_wins_within_log2_guesses() -> None:
    env = GuessNumberEnv(low=1, high=100)
    for seed in range(50):
        env.reset(seed=seed)
        lo, hi, turns = 1, 100, 0
        while True:
            mid = (lo + hi) // 2
            observation, reward, terminated, _, info = guess(env, mid)
            turns += 1
            assert info["guess_consistent"] is True
            if terminated:
                assert (reward, info["success"]) == (1.0, True)
                break
            assert reward == 0.0 and not info["success"]
            if "higher" in observation:
                lo = mid + 1
            else:
                assert "lower" in observation
                hi = mid - 1
        assert turns <= math.ceil(math.log2(100))


def test_observation_reports_only_the_latest_guess() -> None:
    env = GuessNumberEnv(low=1, high=100)
    seed = next(s for s in range(100) if 10 < _secret_for(s) < 90)
    observation, _ = env.reset(seed=seed)
    assert "1 and 100" in observation and "remember" in observation
    first, *_ = guess(env, 5)
    second, *_ = guess(env, 95)
    assert first == "5 is too low: the secret is higher."
    assert second == "95 is too high: the secret is lower."  # nothing about the 5


def _secret_for(seed: int) -> int:
    env = GuessNumberEnv(low=1, high=100)
    env.reset(seed=seed)
    return env._secret


def test_inconsistent_guess_is_flagged() -> None:
    env = GuessNumberEnv(low=1, high=10)
    env.reset(seed=4)
    secret = env._secret
    assert secret is not None and 1 < secret < 10
    _, _, _, _, info = guess(env, secret - 1)  # "higher": now the secret is >= secret
    assert info["guess_consistent"] is True
    _, _, _, _, info = guess(env, secret - 1)  # repeating a ruled-out guess
    assert info["guess_consistent"] is False


def test_determinism_and_seed_spread() -> None:
    secrets = []
    for seed in range(40):
        env = GuessNumberEnv(low=1, high=1000)
        env.reset(seed=seed)
        twin = GuessNumberEnv(low=1, high=1000)
        twin.reset(seed=seed)
        assert env._secret == twin._secret
        secrets.append(env._secret)
    assert len(set(secrets)) > 30


@pytest.mark.parametrize(
    "reply", ["<answer>0</answer>", "<answer>101</answer>", "<answer>5.5</answer>", "50"]
)
def test_out_of_range_or_non_integer_is_invalid(reply: str) -> None:
    env = GuessNumberEnv(low=1, high=100)
    env.reset(seed=1)
    observation, reward, terminated, _, info = env.step(reply)
    assert "Invalid guess" in observation
    assert (reward, terminated, info["action_is_valid"]) == (-0.1, False, False)
    assert env._possible == (1, 100)


def test_step_after_win_raises() -> None:
    env = GuessNumberEnv(low=1, high=2)
    env.reset(seed=0)
    _, _, terminated, _, _ = guess(env, env._secret)
    assert terminated
    with pytest.raises(RuntimeError, match="over"):
        guess(env, 1)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        GuessNumberEnv(low=5, high=5)
    with pytest.raises(TypeError):
        GuessNumberEnv(maximum=5)  # type: ignore[call-arg]
