"""What an episode becomes for training, and the per-episode metrics.

A multi-turn episode is ONE token sequence: the first prompt, then for every turn the
model's response ids exactly as generated (no re-tokenisation, so the training logprobs
are of the very tokens that were sampled) followed by the env's next-turn text. The mask
marks model tokens; behaviour logprobs sit at the same positions (0 elsewhere). The score
is the sum of the turn rewards and belongs to the last model token.

`to_step_samples` is the alternative view for step-wise advantages: one sample per turn
whose prompt is the whole history before that turn. Both views are cut from the same
token list, so they can never disagree about what the model saw.

Plain lists, not tensors: this package has no torch dependency; the pipeline pads and
converts. Metric names and their aggregation are documented on `episode_metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Info keys that count events of a step (tool calls: flywheel/tools/tool_env.py): their
# episode metric is the sum over the steps, not the mean.
COUNTED_INFO_KEYS = ("tool_calls", "tool_valid_calls", "tool_malformed", "tool_unknown",
                     "tool_errors", "tool_timeouts", "tool_over_budget", "tool_output_cut")
# What the env manager counts per episode (Trajectory.counts), each a metric of every episode.
MANAGER_COUNTS = ("observation_cut", "context_truncated")
# The info key naming the env's state (an anchor state of GiGPO, env_manager.state_key):
# an identifier, not a metric.
STATE_KEY = "state_key"


@dataclass
class Trajectory:
    """One episode as one training sequence. All per-token lists have len(input_ids)."""

    env_id: int  # index of the env in the manager, 0 .. num_env_groups * group_size - 1
    group_id: int  # envs of one group share `seed`, so their rewards compare (GRPO groups)
    seed: int
    env_type: str
    tag: str  # user label for metrics; defaults to env_type
    input_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)  # 1 on model tokens, else 0
    behaviour_logprobs: list[float] = field(default_factory=list)  # 0.0 where mask is 0
    prompt_length: int = 0  # tokens of the first prompt
    turn_spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) per turn
    rewards: list[float] = field(default_factory=list)  # one per completed turn
    infos: list[dict[str, Any]] = field(default_factory=list)  # env info per completed turn
    # the env state each turn was played from (GiGPO's anchor state): the info's
    # `state_key` when the env gives one (reset's for turn 0, the step's before it for
    # later turns), else the observation text as the env returned it, never the rendered
    # turn template (which writes the turn number and actions left around it)
    turn_states: list[str] = field(default_factory=list)
    terminated: bool = False  # the game ended (won or lost)
    truncated: bool = False  # stopped by max_steps or by the env's own truncation
    error: str | None = None  # set when the env raised; see env_manager
    # events of the env manager (MANAGER_COUNTS): observations cut, context truncation
    counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def score(self) -> float:
        """Episode return: the sum of turn rewards."""
        return float(sum(self.rewards))

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass
class StepSample:
    """One turn of a trajectory as its own prompt/response pair."""

    env_id: int
    group_id: int
    seed: int
    tag: str
    turn_idx: int
    prompt_ids: list[int]  # the full history before this turn
    response_ids: list[int]
    response_logprobs: list[float]
    reward: float  # this turn's reward
    discounted_return: float  # sum_k gamma^k * r_{t+k}


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + gamma * G_{t+1}, with G_T = 0 after the last turn."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    returns = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


def to_step_samples(trajectory: Trajectory, gamma: float = 1.0) -> list[StepSample]:
    """Split a trajectory into one sample per turn. A failed trajectory has a turn without
    a reward, so it is refused: drop failed episodes (and count them) first."""
    if trajectory.failed:
        raise ValueError(
            f"env {trajectory.env_id}: cannot split a failed trajectory into steps "
            f"({trajectory.error})"
        )
    returns = discounted_returns(trajectory.rewards, gamma)
    ids, logprobs = trajectory.input_ids, trajectory.behaviour_logprobs
    return [
        StepSample(
            env_id=trajectory.env_id,
            group_id=trajectory.group_id,
            seed=trajectory.seed,
            tag=trajectory.tag,
            turn_idx=turn,
            prompt_ids=ids[:start],
            response_ids=ids[start:end],
            response_logprobs=logprobs[start:end],
            reward=trajectory.rewards[turn],
            discounted_return=returns[turn],
        )
        for turn, (start, end) in enumerate(trajectory.turn_spans)
    ]


def episode_metrics(trajectory: Trajectory) -> dict[str, float]:
    """Per-episode metrics, every one a float so that a mean over episodes is meaningful:

    | name             | meaning                                                        |
    |------------------|----------------------------------------------------------------|
    | success          | 1 if the last step's info said success                         |
    | episode_reward   | sum of rewards (the score)                                     |
    | episode_length   | turns the model took (including one that made the env crash)   |
    | action_is_valid  | fraction of steps whose action parsed                          |
    | truncated        | 1 if stopped by max_steps / env truncation before the game end |
    | failed           | 1 if the env raised (see Trajectory.error)                     |
    | observation_cut  | observations cut to max_observation_chars in the episode       |
    | context_truncated| 1 if the episode was stopped because the next turn would not   |
    |                  | fit the run's sequence_length                                  |
    | tool_calls, ...  | COUNTED_INFO_KEYS: the sum over the steps (calls per episode)  |
    | tool_valid_rate  | tool_valid_calls / tool_calls, in episodes with a call         |
    | <info key>       | env-specific numeric info: mean over the steps reporting it    |
    """
    infos = trajectory.infos
    metrics = {
        "success": float(bool(infos and infos[-1].get("success", False))),
        "episode_reward": trajectory.score,
        "episode_length": float(len(trajectory.turn_spans)),
        "action_is_valid": (
            sum(bool(i.get("action_is_valid", True)) for i in infos) / len(infos) if infos else 0.0
        ),
        "truncated": float(trajectory.truncated),
        "failed": float(trajectory.failed),
        **{key: float(trajectory.counts.get(key, 0)) for key in MANAGER_COUNTS},
    }
    extra: dict[str, list[float]] = {}
    for info in infos:
        for key, value in info.items():
            if (key not in metrics and key != STATE_KEY
                    and isinstance(value, (bool, int, float))):
                extra.setdefault(key, []).append(float(value))
    metrics.update({key: (sum(values) if key in COUNTED_INFO_KEYS else sum(values) / len(values))
                    for key, values in extra.items()})
    if metrics.get("tool_calls"):
        metrics["tool_valid_rate"] = metrics["tool_valid_calls"] / metrics["tool_calls"]
    return metrics


def aggregate_metrics(trajectories: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """Mean of each episode metric over the episodes that have it, keys prefixed (e.g.
    "rollout/frozen_lake/"). Failed episodes are included (success 0), and `failed` shows
    how many there were."""
    sums: dict[str, list[float]] = {}
    for trajectory in trajectories:
        for key, value in trajectory.metrics.items():
            sums.setdefault(key, []).append(value)
    return {f"{prefix}{key}": sum(values) / len(values) for key, values in sums.items()}
