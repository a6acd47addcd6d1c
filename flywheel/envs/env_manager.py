"""The env manager: plays groups of episodes with a caller-supplied generate function and
returns them as token sequences (`Trajectory`).

What it owns: building the envs (`make`), seeding (every env of a group starts from the same
seed, so GRPO-style group baselines compare like with like; groups get different seeds),
the prompt text (templates), tokenisation of env text, and the exact concatenation of
model tokens and env tokens with the response mask and behaviour logprobs.

What it does not own: the model. `generate_fn(prompts, max_tokens)` maps a list of prompt
token-id lists to one `(response_ids, response_logprobs)` per prompt; the pipeline wires
it to actor_infer. Episodes advance in lock-step: one `generate_fn` call per turn for all
episodes still running, so the inference engine sees a batch. No Ray here.

Failures: an exception from `env.reset`/`env.step`, an observation that is not a str, a
reward that is not a finite real number (NaN, inf, the string "1.0", None) or an info that
is not a dict ends only that episode: its Trajectory gets `error` naming the env id, tag,
group, seed and what was wrong, and metrics `failed = 1`. The other episodes continue. The
pipeline should drop failed trajectories and count them as dropped ("env_error").
Exceptions from `generate_fn` or the tokenizer are not the env's fault and propagate.

Bounds on what reaches the tokenizer (user envs are untrusted): an observation longer than
`max_observation_chars` characters is cut before it is tokenized, with a note saying how
much was cut, and counted (`counts["observation_cut"]`, metric `observation_cut`). An
episode whose next prompt plus `max_tokens_per_step` would not fit `max_context_tokens`
(the run's sequence_length) is truncated before that turn, its pending observation
dropped, and counted (`context_truncated`); one whose first prompt does not fit fails
(its group is dropped). ROLL's env managers stop such an episode as well (stop reason
max length); they also shrink the last turn's generation budget to the room left, which
a batched turn here (one budget for every episode) does not.

Chat models: with `chat_template` set, the text is rendered by the model's chat template
(chat_turns.py: system, user observations, the model's replies, tool messages) and only the
template's text between replies is tokenized; without it, env text is the raw templates
below, appended to the model's ids. Either way the model's ids are kept as generated. An
observation the env marks `info["observation_role"] = "tool"` (a tool's result, see
flywheel/tools/tool_env.py) is cut to `max_tool_output_tokens` and shown as a tool message
(raw text: in <tool_response> tags, without the turn template).

A per-step wall-clock limit is deliberately not here: a hung `step` cannot be interrupted
safely inside one Python process. The env workers run every env in a child process of its
own (workers/env_process.py) that is killed when a call runs past the limit; such an env
offers `start_call` / `finish_call`, and the manager starts a turn's calls on every env
before it waits for the first, so the envs of a turn step at once.
"""

from __future__ import annotations

import math
import numbers
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from flywheel.envs.base import TextEnv
from flywheel.envs.chat_turns import ChatTurns
from flywheel.envs.registry import make
from flywheel.envs.trajectory import STATE_KEY, Trajectory, episode_metrics

TURN_PLACEHOLDERS = frozenset({"observation", "turn_idx", "actions_left"})


class Tokenizer(Protocol):
    """The part of a HF tokenizer the env manager uses. `encode` must not add special
    tokens (BOS): env text is appended mid-sequence, so the worker passes an adapter whose
    `encode(text)` calls `hf_tokenizer.encode(text, add_special_tokens=False)`."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class GenerateFn(Protocol):
    """One response per prompt, in order; at most `max_tokens` tokens each, with one
    behaviour logprob per token."""

    def __call__(
        self, prompts: list[list[int]], max_tokens: int
    ) -> Sequence[tuple[list[int], list[float]]]: ...


@dataclass(frozen=True)
class EnvManagerConfig:
    """One env type played by `num_env_groups * group_size` envs."""

    env_type: str  # a name registered in flywheel.envs (frozen_lake, sokoban, guess_number)
    env_config: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the env
    tag: str = ""  # label in metrics and trajectories; empty means env_type
    group_size: int = 8  # envs per group, all reset with the same seed; >= 1
    num_env_groups: int = 1  # groups per rollout, each with its own seed; >= 1
    max_steps: int = 5  # turns per episode; an episode still running after it is truncated
    max_tokens_per_step: int = 128  # generation budget of each turn, passed to generate_fn
    # Prepended once to the first prompt, verbatim (no placeholders). Put the chat
    # template's system block here; it should state the answer format `action_pattern`
    # parses (the default pattern is <answer>...</answer>).
    system_template: str = (
        "You are playing a text game. Think briefly, then give your action as "
        "<answer>ACTION</answer>.\n"
    )
    # Formatted before every turn, with {observation}, {turn_idx} (0-based) and
    # {actions_left} (turns left including this one). For a chat model, wrap the user turn
    # and open the assistant turn here.
    turn_template: str = "Turn {turn_idx} ({actions_left} actions left):\n{observation}\nAction: "
    # Render turns with the model's chat template (the EnvManager is then given a
    # ChatTurns): system_template becomes the system message, turn_template the user
    # messages' content; no role markup belongs in either.
    chat_template: bool = False
    # A tool result longer than this many tokens is cut, with a note saying how much was
    # cut; 0: no limit.
    max_tool_output_tokens: int = 0
    # An observation longer than this many characters is cut before it is tokenized.
    max_observation_chars: int = 20_000
    # Tokens a whole episode may hold (the run's sequence_length); None: unbounded.
    max_context_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_observation_chars < 1:
            raise ValueError(f"max_observation_chars must be >= 1, got "
                             f"{self.max_observation_chars}")
        if self.max_context_tokens is not None and self.max_context_tokens < 1:
            raise ValueError(f"max_context_tokens must be >= 1, got {self.max_context_tokens}")
        if self.max_tool_output_tokens < 0:
            raise ValueError(f"max_tool_output_tokens must be >= 0, got "
                             f"{self.max_tool_output_tokens}")
        for name in ("group_size", "num_env_groups", "max_steps", "max_tokens_per_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"env manager {name} must be an int >= 1, got {value!r}")
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.turn_template) if f}
        except ValueError as exc:
            raise ValueError(f"turn_template is not a valid format string: {exc}") from exc
        unknown = fields - TURN_PLACEHOLDERS
        if unknown:
            raise ValueError(
                f"turn_template uses unknown placeholder(s) {sorted(unknown)}; "
                f"allowed: {sorted(TURN_PLACEHOLDERS)}"
            )


def group_seed(seed: int, group_id: int) -> int:
    """Seed of group `group_id` in a rollout seeded `seed`: a hash of both (SeedSequence),
    so rollout seeds s and s + 1 do not share groups the way `s + group_id` would."""
    return int(np.random.SeedSequence([seed, group_id]).generate_state(1)[0])


class EnvManager:
    """Owns the envs of one EnvManagerConfig and plays one batch of episodes per `rollout`.
    `make_env` builds one env (default: `make(env_type, **env_config)` in this process)."""

    def __init__(self, config: EnvManagerConfig, chat: ChatTurns | None = None,
                 make_env: Callable[[], TextEnv] | None = None) -> None:
        if config.chat_template != (chat is not None):
            raise ValueError("an env manager renders with a ChatTurns exactly when its config "
                             "sets chat_template")
        self.config = config
        self.chat = chat
        self.tag = config.tag or config.env_type
        total = config.num_env_groups * config.group_size
        build = make_env or (lambda: make(config.env_type, **config.env_config))
        self.envs: list[TextEnv] = [build() for _ in range(total)]

    def rollout(self, generate_fn: GenerateFn, tokenizer: Tokenizer, seed: int) -> list[Trajectory]:
        """Play one episode in every env; return them ordered by env id. `seed` identifies
        this rollout (the pipeline passes e.g. its base seed plus the step); group g plays
        `group_seed(seed, g)`, so the same seed replays the same initial states."""
        cfg = self.config
        episodes = []
        for env_id in range(len(self.envs)):
            group_id = env_id // cfg.group_size
            episodes.append(
                Trajectory(
                    env_id=env_id,
                    group_id=group_id,
                    seed=group_seed(seed, group_id),
                    env_type=cfg.env_type,
                    tag=self.tag,
                )
            )
        resets = call_all([(self.envs[t.env_id], "reset", (), {"seed": t.seed})
                           for t in episodes])
        running = [t for t, result in zip(episodes, resets) if self._start(t, result, tokenizer)]
        for turn_idx in range(cfg.max_steps):
            running = [t for t in running if self._fits(t)]
            if not running:
                break
            prompts = [list(t.input_ids) for t in running]
            outputs = list(generate_fn(prompts, cfg.max_tokens_per_step))
            if len(outputs) != len(prompts):
                raise ValueError(
                    f"generate_fn returned {len(outputs)} responses for {len(prompts)} prompts"
                )
            actions = [self._append_response(t, list(ids), list(logprobs), tokenizer)
                       for t, (ids, logprobs) in zip(running, outputs)]
            steps = call_all([(self.envs[t.env_id], "step", (action,), {})
                              for t, action in zip(running, actions)])
            running = [
                t
                for t, (ids, _), result in zip(running, outputs, steps)
                if self._after_step(t, list(ids), result, turn_idx, tokenizer)
            ]
        for trajectory in episodes:
            trajectory.metrics = episode_metrics(trajectory)
        return episodes

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _start(self, trajectory: Trajectory, result: CallResult, tokenizer: Tokenizer) -> bool:
        """Write the first prompt from the reset's result. False if the env failed."""
        try:
            observation, info = _value(result)
            _check_observation(observation)
        except Exception as exc:  # noqa: BLE001 - any env error ends only this episode
            trajectory.error = _describe(trajectory, "reset", exc)
            return False
        observation = self._bounded(trajectory, observation)
        trajectory.turn_states.append(state_key(observation, info))
        if self.chat is not None:
            ids = self.chat.first_prompt(self.config.system_template,
                                         self._turn_text(observation, 0))
        else:
            ids = tokenizer.encode(self.config.system_template + self._turn_text(observation, 0))
        trajectory.input_ids = list(ids)
        trajectory.response_mask = [0] * len(trajectory.input_ids)
        trajectory.behaviour_logprobs = [0.0] * len(trajectory.input_ids)
        trajectory.prompt_length = len(trajectory.input_ids)
        return True

    def _fits(self, trajectory: Trajectory) -> bool:
        """Whether the next turn fits the context; an episode that does not is truncated
        (its first prompt too long: failed). False ends the episode."""
        limit, budget = self.config.max_context_tokens, self.config.max_tokens_per_step
        length = len(trajectory.input_ids)
        if limit is None or length + budget <= limit:
            return True
        if not trajectory.turn_spans:
            trajectory.error = _describe(trajectory, "reset", ValueError(
                f"the first prompt is {length} tokens; with max_tokens_per_step={budget} it "
                f"does not fit the run's sequence_length {limit}"))
            return False
        end = trajectory.turn_spans[-1][1]  # the observation after the last reply: dropped
        del trajectory.input_ids[end:], trajectory.response_mask[end:]
        del trajectory.behaviour_logprobs[end:]
        trajectory.truncated = True
        trajectory.counts["context_truncated"] = 1
        return False

    def _append_response(self, trajectory: Trajectory, response_ids: list[int],
                         logprobs: list[float], tokenizer: Tokenizer) -> str:
        """Append the model's reply to the trajectory; return its text (the env's action)."""
        max_tokens = self.config.max_tokens_per_step
        if len(logprobs) != len(response_ids) or len(response_ids) > max_tokens:
            raise ValueError(
                f"generate_fn returned {len(response_ids)} tokens and {len(logprobs)} "
                f"logprobs for env {trajectory.env_id}; need equal counts <= {max_tokens}"
            )
        start = len(trajectory.input_ids)
        trajectory.input_ids.extend(response_ids)
        trajectory.response_mask.extend([1] * len(response_ids))
        trajectory.behaviour_logprobs.extend(float(lp) for lp in logprobs)
        trajectory.turn_spans.append((start, len(trajectory.input_ids)))
        return tokenizer.decode(response_ids)

    def _after_step(
        self,
        trajectory: Trajectory,
        response_ids: list[int],
        result: CallResult,
        turn_idx: int,
        tokenizer: Tokenizer,
    ) -> bool:
        """Record the step's result and append the env's next-turn text. True if the
        episode goes on."""
        try:
            observation, reward, terminated, truncated, info = _value(result)
            _check_observation(observation)
            reward = _check_reward(reward)
            if not isinstance(info, dict):
                raise TypeError(f"info must be a dict, got {type(info).__name__}")
        except Exception as exc:  # noqa: BLE001 - any env error ends only this episode
            trajectory.error = _describe(trajectory, f"step (turn {turn_idx})", exc)
            return False
        trajectory.rewards.append(reward)
        trajectory.infos.append(dict(info))
        next_turn = turn_idx + 1
        trajectory.terminated = bool(terminated)
        trajectory.truncated = not terminated and (
            bool(truncated) or next_turn >= self.config.max_steps
        )
        if trajectory.terminated or trajectory.truncated:
            return False
        observation = self._bounded(trajectory, observation)
        trajectory.turn_states.append(state_key(observation, info))
        if info.get("observation_role") == "tool":
            env_ids = self._tool_ids(response_ids, observation, tokenizer)
        elif self.chat is not None:
            env_ids = self.chat.next_turn(response_ids, self._turn_text(observation, next_turn),
                                          "user")
        else:
            env_ids = tokenizer.encode(self._turn_text(observation, next_turn))
        trajectory.input_ids.extend(env_ids)
        trajectory.response_mask.extend([0] * len(env_ids))
        trajectory.behaviour_logprobs.extend([0.0] * len(env_ids))
        return True

    def _bounded(self, trajectory: Trajectory, observation: str) -> str:
        """The observation cut to max_observation_chars (counted), before any tokenizer."""
        limit = self.config.max_observation_chars
        if len(observation) <= limit:
            return observation
        counts = trajectory.counts
        counts["observation_cut"] = counts.get("observation_cut", 0) + 1
        return (observation[:limit] + f"\n[observation cut: {len(observation) - limit} more "
                                       f"characters (max_observation_chars={limit})]")

    def _tool_ids(self, response_ids: list[int], result: str, tokenizer: Tokenizer) -> list[int]:
        limit = self.config.max_tool_output_tokens
        if limit:
            ids = tokenizer.encode(result)
            if len(ids) > limit:
                result = (tokenizer.decode(ids[:limit])
                          + f"\n[output cut: {len(ids) - limit} more tokens]")
        if self.chat is not None:
            return self.chat.next_turn(response_ids, result, "tool")
        return tokenizer.encode(f"<tool_response>\n{result}\n</tool_response>\n")

    def _turn_text(self, observation: str, turn_idx: int) -> str:
        return self.config.turn_template.format(
            observation=observation,
            turn_idx=turn_idx,
            actions_left=self.config.max_steps - turn_idx,
        )


def state_key(observation: str, info: object) -> str:
    """The env state an observation shows, for GiGPO's anchor groups (Trajectory
    `turn_states`): `info["state_key"]` as text when the env gives one (two observations
    that render one state apart, or one text shown for two states), else the observation
    itself. Not the rendered turn: the turn template's turn number and actions left would
    keep one state reached at two turns out of one anchor group."""
    if isinstance(info, dict) and info.get(STATE_KEY) is not None:
        return str(info[STATE_KEY])
    return observation


CallResult = tuple[Any, BaseException | None]  # (value, None) or (None, the error)


def call_all(calls: Sequence[tuple[TextEnv, str, tuple, dict[str, Any]]]) -> list[CallResult]:
    """Run `env.<method>(*args, **kwargs)` for every call; each result is (value, None) or
    (None, the exception). An env with `start_call(method, args, kwargs)` / `finish_call(handle)` (a
    process env, workers/env_process.py) has its call started before any is waited for,
    so those envs step at once; the others run one after another."""
    handles = []
    for env, method, args, kwargs in calls:
        start = getattr(env, "start_call", None)
        try:
            handles.append((start(method, args, kwargs), None) if start else (None, None))
        except Exception as exc:  # noqa: BLE001 - the env's failure, reported below
            handles.append((None, exc))
    results: list[CallResult] = []
    for (env, method, args, kwargs), (handle, error) in zip(calls, handles):
        if error is not None:
            results.append((None, error))
            continue
        try:
            value = (env.finish_call(handle) if handle is not None
                     else getattr(env, method)(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - any env error ends only this episode
            results.append((None, exc))
        else:
            results.append((value, None))
    return results


def _value(result: CallResult) -> Any:
    value, error = result
    if error is not None:
        raise error
    return value


def _check_observation(observation: object) -> None:
    if not isinstance(observation, str):
        raise TypeError(f"observation must be str, got {type(observation).__name__}")


def _check_reward(reward: object) -> float:
    """A finite real number (int, float, numpy scalar) as a float; a str (even "1.0"),
    None, NaN or inf is the env's error: training on it would diverge or be silently
    wrong."""
    if isinstance(reward, str) or not isinstance(reward, numbers.Real):
        raise TypeError(f"reward must be a real number, got {type(reward).__name__} "
                        f"{str(reward)[:40]!r}")
    try:
        value = float(reward)
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"reward {str(reward)[:40]} is not a float: {exc}") from None
    if not math.isfinite(value):
        raise ValueError(f"reward must be finite, got {value}")
    return value


def _describe(trajectory: Trajectory, where: str, exc: BaseException) -> str:
    return (
        f"tag {trajectory.tag}: env {trajectory.env_id} ({trajectory.env_type}, group "
        f"{trajectory.group_id}, seed {trajectory.seed}) raised in {where}: "
        f"{getattr(exc, 'type_name', type(exc).__name__)}: {str(exc)[:500]}"
    )
