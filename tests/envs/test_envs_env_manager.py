"""Env manager: group seeding, the exact token layout of a trajectory, truncation, the
step-level view, crashing envs and config validation.

Doubles (char tokenizer with an EOS id that `encode` never produces, scripted policy, seed
echo env) come from conftest.py fixtures.
"""

from __future__ import annotations

import re

import pytest

from flywheel.envs import (
    EnvManager,
    EnvManagerConfig,
    FrozenLakeEnv,
    TextEnv,
    aggregate_metrics,
    discounted_returns,
    group_seed,
    to_step_samples,
)

SYSTEM = "SYS\n"
TURN = "[{turn_idx}|{actions_left}] {observation}\n> "


def config(env_type: str, **overrides) -> EnvManagerConfig:
    defaults = {
        "env_type": env_type,
        "group_size": 2,
        "num_env_groups": 3,
        "max_steps": 4,
        "max_tokens_per_step": 64,
        "system_template": SYSTEM,
        "turn_template": TURN,
    }
    return EnvManagerConfig(**{**defaults, **overrides})


def test_group_seeding(seed_echo_env: str, tokenizer, make_policy) -> None:
    manager = EnvManager(config(seed_echo_env, group_size=3, num_env_groups=4))
    trajectories = manager.rollout(make_policy(lambda _: "win"), tokenizer, seed=7)
    assert [t.env_id for t in trajectories] == list(range(12))
    assert [t.group_id for t in trajectories] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    seeds = [t.seed for t in trajectories]
    assert seeds == [group_seed(7, g) for g in range(4) for _ in range(3)]
    assert len(set(seeds)) == 4  # one seed per group, all different
    assert [env.seed_seen for env in manager.envs] == seeds  # the envs got them
    first_prompts = [tokenizer.decode(t.input_ids[: t.prompt_length]) for t in trajectories]
    assert first_prompts[0] == first_prompts[2] != first_prompts[3]
    again = manager.rollout(make_policy(lambda _: "win"), tokenizer, seed=7)
    assert [t.seed for t in again] == seeds
    other = manager.rollout(make_policy(lambda _: "win"), tokenizer, seed=8)
    assert {t.seed for t in other}.isdisjoint(seeds)


def test_trajectory_tokens_masks_and_logprobs_are_exact(tokenizer, make_policy) -> None:
    moves = ["<answer>Right</answer>", "junk", "<answer>down</answer>", "<answer>Up</answer>"]

    def reply(prompt_text: str) -> str:
        return moves[prompt_text.count("\n> ") - 1]  # one "\n> " per turn so far

    cfg = config("frozen_lake", env_config={"size": 6, "p": 1.0}, group_size=1, num_env_groups=1)
    policy = make_policy(reply)
    (traj,) = EnvManager(cfg).rollout(policy, tokenizer, seed=3)

    # Replay the same seed and moves on a fresh env to get the observations.
    env = FrozenLakeEnv(size=6, p=1.0)
    observation, _ = env.reset(seed=traj.seed)
    expected_ids = tokenizer.encode(
        SYSTEM + TURN.format(observation=observation, turn_idx=0, actions_left=4)
    )
    expected_mask = [0] * len(expected_ids)
    expected_logprobs = [0.0] * len(expected_ids)
    assert traj.prompt_length == len(expected_ids)
    for turn, move in enumerate(moves):
        response = tokenizer.encode(move) + [tokenizer.EOS]
        expected_ids += response
        expected_mask += [1] * len(response)
        expected_logprobs += [policy.logprob_of(i, t) for i, t in enumerate(response)]
        observation, *_ = env.step(move + "<eos>")
        if turn < 3:
            env_text = tokenizer.encode(
                TURN.format(observation=observation, turn_idx=turn + 1, actions_left=3 - turn)
            )
            expected_ids += env_text
            expected_mask += [0] * len(env_text)
            expected_logprobs += [0.0] * len(env_text)

    assert traj.input_ids == expected_ids
    assert traj.input_ids.count(tokenizer.EOS) == 4  # model ids kept, never re-tokenised
    assert traj.response_mask == expected_mask
    assert traj.behaviour_logprobs == expected_logprobs
    assert traj.input_ids[-1] == tokenizer.EOS  # ends with the model's last turn
    # Each generate call saw exactly the history before its turn, with the token budget.
    assert len(policy.calls) == 4
    for (prompts, max_tokens), (start, end) in zip(policy.calls, traj.turn_spans):
        assert prompts == [traj.input_ids[:start]] and max_tokens == 64
        assert all(traj.response_mask[start:end]) and end - start > 0
    assert sum(traj.response_mask) == sum(e - s for s, e in traj.turn_spans)
    assert traj.rewards == [0.0, -0.1, 0.0, 0.0]
    assert traj.score == pytest.approx(-0.1)
    assert (traj.terminated, traj.truncated, traj.error) == (False, True, None)
    assert traj.metrics["action_is_valid"] == 0.75
    assert traj.metrics["episode_length"] == 4.0 and traj.metrics["truncated"] == 1.0


def test_max_steps_truncates_and_early_termination_stops(
    seed_echo_env, tokenizer, make_policy
) -> None:
    cfg = config(seed_echo_env, group_size=1, num_env_groups=2, max_steps=3)
    manager = EnvManager(cfg)

    # Env 0 wins on its second turn; env 1 never does and is cut at max_steps.
    def reply(prompt_text: str) -> str:
        won_soon = f"seed={manager.envs[0].seed_seen}\n" in prompt_text and "again" in prompt_text
        return "win" if won_soon else "go"

    policy = make_policy(reply)
    winner, loser = manager.rollout(policy, tokenizer, seed=0)
    assert len(winner.turn_spans) == 2 and winner.terminated and not winner.truncated
    assert winner.rewards == [0.5, 1.0] and winner.metrics["success"] == 1.0
    assert len(loser.turn_spans) == 3 and loser.truncated and not loser.terminated
    assert loser.metrics["success"] == 0.0 and loser.score == 1.5
    assert [len(prompts) for prompts, _ in policy.calls] == [2, 2, 1]  # finished ones leave
    assert "[2|1]" in tokenizer.decode(loser.input_ids)  # actions_left counts down
    assert "[3|" not in tokenizer.decode(loser.input_ids)


def test_history_in_prompt_lets_a_policy_use_memory(tokenizer, make_policy) -> None:
    """A binary-search policy that reads its earlier verdicts from the prompt always wins
    guess_number within ceil(log2(100)) = 7 turns."""

    def binary_search(prompt_text: str) -> str:
        lo, hi = 1, 100
        for value, verdict in re.findall(r"(\d+) is too (low|high)", prompt_text):
            lo, hi = (
                (max(lo, int(value) + 1), hi) if verdict == "low" else (lo, min(hi, int(value) - 1))
            )
        return f"<answer>{(lo + hi) // 2}</answer>"

    cfg = config("guess_number", group_size=4, num_env_groups=5, max_steps=7)
    trajectories = EnvManager(cfg).rollout(make_policy(binary_search), tokenizer, seed=1)
    metrics = aggregate_metrics(trajectories, prefix="rollout/guess/")
    assert metrics["rollout/guess/success"] == 1.0
    assert metrics["rollout/guess/guess_consistent"] == 1.0
    assert metrics["rollout/guess/action_is_valid"] == 1.0


def test_step_level_samples_and_discounted_returns(seed_echo_env, tokenizer, make_policy) -> None:
    cfg = config(seed_echo_env, group_size=1, num_env_groups=1, max_steps=3)
    replies = iter(["go", "nonsense", "win"])
    (traj,) = EnvManager(cfg).rollout(make_policy(lambda _: next(replies)), tokenizer, seed=0)
    assert traj.rewards == [0.5, -0.1, 1.0]
    samples = to_step_samples(traj, gamma=0.5)
    assert [s.turn_idx for s in samples] == [0, 1, 2]
    for sample, (start, end) in zip(samples, traj.turn_spans):
        assert sample.prompt_ids == traj.input_ids[:start]
        assert sample.response_ids == traj.input_ids[start:end]
        assert sample.response_logprobs == traj.behaviour_logprobs[start:end]
        assert (sample.env_id, sample.group_id, sample.seed) == (0, 0, traj.seed)
    assert samples[-1].prompt_ids + samples[-1].response_ids == traj.input_ids
    # G_2 = 1, G_1 = -0.1 + 0.5 * 1 = 0.4, G_0 = 0.5 + 0.5 * 0.4 = 0.7
    assert [s.discounted_return for s in samples] == pytest.approx([0.7, 0.4, 1.0])
    assert [s.reward for s in samples] == [0.5, -0.1, 1.0]


def test_discounted_returns_by_hand() -> None:
    assert discounted_returns([1.0, 2.0, 3.0], 1.0) == [6.0, 5.0, 3.0]
    assert discounted_returns([1.0, 0.0, 4.0], 0.5) == [2.0, 2.0, 4.0]
    assert discounted_returns([], 0.9) == []
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns([1.0], 1.5)


class CrashingEnv(TextEnv):
    def __init__(self, *, crash_in: str, after: int = 0) -> None:
        self.crash_in, self.after, self.steps = crash_in, after, 0

    def reset(self, seed=None, options=None):
        if self.crash_in == "reset":
            raise OSError("disk on fire")
        self.steps = 0
        return "ok", {}

    def step(self, action_text):
        self.steps += 1
        if self.crash_in == "step" and self.steps > self.after:
            raise ZeroDivisionError("bad physics")
        if self.crash_in == "type":
            return 42, 0.0, False, False, {}
        return "ok", 0.0, False, False, {"action_is_valid": True, "success": False}


@pytest.mark.parametrize(
    ("crash_in", "where", "turns"),
    [
        ("reset", "reset: OSError: disk on fire", 0),
        ("step", "step (turn 1): ZeroDivisionError", 2),
        ("type", "step (turn 0): TypeError: observation must be str", 1),
    ],
)
def test_crashing_env_fails_only_its_episode(
    seed_echo_env, tokenizer, make_policy, crash_in: str, where: str, turns: int
) -> None:
    manager = EnvManager(config(seed_echo_env, group_size=2, num_env_groups=2, max_steps=3))
    manager.envs[2] = CrashingEnv(crash_in=crash_in, after=1)
    trajectories = manager.rollout(make_policy(lambda _: "go"), tokenizer, seed=0)
    failed = trajectories[2]
    assert failed.failed and f"env 2 (seed_echo, group 1, seed {failed.seed})" in failed.error
    assert where in failed.error
    assert failed.metrics["failed"] == 1.0 and failed.metrics["success"] == 0.0
    assert len(failed.turn_spans) == turns
    for traj in trajectories[:2] + trajectories[3:]:
        assert traj.error is None and len(traj.turn_spans) == 3 and traj.score == 1.5
    assert aggregate_metrics(trajectories)["failed"] == 0.25
    if turns:
        with pytest.raises(ValueError, match="failed"):
            to_step_samples(failed)


def test_generate_fn_contract_is_checked(seed_echo_env, tokenizer) -> None:
    manager = EnvManager(config(seed_echo_env, max_tokens_per_step=4))
    with pytest.raises(ValueError, match="returned 1 responses for 6 prompts"):
        manager.rollout(lambda prompts, max_tokens: [([1], [0.0])], tokenizer, seed=0)
    def too_long(prompts, max_tokens):
        return [([1] * 5, [0.0] * 5)] * len(prompts)
    with pytest.raises(ValueError, match="<= 4"):
        manager.rollout(too_long, tokenizer, seed=0)
    def misaligned(prompts, max_tokens):
        return [([1, 2], [0.0])] * len(prompts)
    with pytest.raises(ValueError, match="2 tokens and 1 logprobs"):
        manager.rollout(misaligned, tokenizer, seed=0)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match=r"unknown placeholder.*'obs'"):
        EnvManagerConfig(env_type="sokoban", turn_template="{obs}")
    with pytest.raises(ValueError, match="group_size"):
        EnvManagerConfig(env_type="sokoban", group_size=0)
    with pytest.raises(ValueError, match="max_steps"):
        EnvManagerConfig(env_type="sokoban", max_steps=True)
    with pytest.raises(ValueError, match="format string"):
        EnvManagerConfig(env_type="sokoban", turn_template="{observation")
    with pytest.raises(TypeError, match="'sizes'"):
        EnvManager(EnvManagerConfig(env_type="sokoban", env_config={"sizes": 6}))
    with pytest.raises(ValueError, match="Did you mean 'sokoban'"):
        EnvManager(EnvManagerConfig(env_type="sokobn"))
    assert EnvManager(EnvManagerConfig(env_type="sokoban", group_size=1)).tag == "sokoban"


class ScriptedEnv(TextEnv):
    """Plays `steps` (one (observation, reward) per step); the first observation is
    `first`."""

    def __init__(self, first="start", steps=(("again", 0.0),)) -> None:
        self.first, self.steps, self.turn = first, list(steps), 0

    def reset(self, seed=None, options=None):
        self.turn = 0
        return self.first, {}

    def step(self, action_text):
        observation, reward = self.steps[min(self.turn, len(self.steps) - 1)]
        self.turn += 1
        return observation, reward, False, False, {"action_is_valid": True, "success": False}


class CountingTokenizer:
    def __init__(self, inner) -> None:
        self.inner, self.longest = inner, 0

    def encode(self, text):
        self.longest = max(self.longest, len(text))
        return self.inner.encode(text)

    def decode(self, ids):
        return self.inner.decode(ids)


def test_a_ten_megabyte_observation_is_cut_before_the_tokenizer_and_counted(
        seed_echo_env, tokenizer, make_policy) -> None:
    huge = "z" * 10_000_000
    cfg = config(seed_echo_env, group_size=1, num_env_groups=2, max_steps=3,
                 max_observation_chars=500)
    manager = EnvManager(cfg, make_env=lambda: ScriptedEnv(first=huge, steps=[(huge, 0.0)]))
    counting = CountingTokenizer(tokenizer)
    trajectories = manager.rollout(make_policy(lambda _: "go"), counting, seed=0)
    assert counting.longest < 1000  # never the 10 MB
    for t in trajectories:
        assert not t.failed and t.counts == {"observation_cut": 3}  # reset, turns 1 and 2
        assert t.metrics["observation_cut"] == 3.0
        assert "[observation cut: 9999500 more characters (max_observation_chars=500)]" in \
            tokenizer.decode(t.input_ids)
    assert aggregate_metrics(trajectories)["observation_cut"] == 3.0


@pytest.mark.parametrize("reward, says", [
    (float("nan"), "reward must be finite, got nan"),
    (float("inf"), "reward must be finite, got inf"),
    ("1.0", "reward must be a real number, got str '1.0'"),
    (None, "reward must be a real number, got NoneType"),
    (10**400, "is not a float"),
])
def test_a_reward_that_is_not_a_finite_number_fails_its_episode_naming_the_env(
        seed_echo_env, tokenizer, make_policy, reward, says) -> None:
    manager = EnvManager(config(seed_echo_env, group_size=2, num_env_groups=1, max_steps=2,
                                tag="Lake"))
    manager.envs[1] = ScriptedEnv(steps=[("again", 0.0), ("again", reward)])
    good, bad = manager.rollout(make_policy(lambda _: "go"), tokenizer, seed=0)
    assert not good.failed
    assert bad.failed and bad.error.startswith("tag Lake: env 1 (seed_echo, group 0")
    assert "raised in step (turn 1)" in bad.error and says in bad.error
    assert bad.rewards == [0.0]  # the bad reward was not kept


def test_an_episode_that_would_outgrow_the_context_is_truncated_and_counted(
        seed_echo_env, tokenizer, make_policy) -> None:
    cfg = config(seed_echo_env, group_size=1, num_env_groups=1, max_steps=10,
                 max_tokens_per_step=8, max_context_tokens=60)
    (t,) = EnvManager(cfg).rollout(make_policy(lambda _: "go"), tokenizer, seed=0)
    assert not t.failed and t.truncated and not t.terminated
    assert t.counts == {"context_truncated": 1} and t.metrics["context_truncated"] == 1.0
    assert 1 <= len(t.turn_spans) < 10 and len(t.rewards) == len(t.turn_spans)
    assert len(t.input_ids) == t.turn_spans[-1][1] <= 60  # ends on the model's last reply
    assert len(t.response_mask) == len(t.behaviour_logprobs) == len(t.input_ids)
    # a first prompt that does not fit: the episode fails (its group is dropped)
    cfg = config(seed_echo_env, group_size=1, num_env_groups=1, max_tokens_per_step=8,
                 max_context_tokens=10)
    (t,) = EnvManager(cfg).rollout(make_policy(lambda _: "go"), tokenizer, seed=0)
    assert t.failed and "does not fit the run's sequence_length 10" in t.error
