"""One episode = one run of the user's agent against the endpoint, under limits.

The agent is either
- an async function by import path (`agent.import_path`, under `import_allowlist`):
  `async def agent(task: dict, client: openai.AsyncOpenAI) -> float | AgentResult`,
  run on the runner's event loop with a client bound to the episode's key; or
- a command (`agent.command`, argv, no shell) run as a subprocess per episode with
  OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL and FLYWHEEL_TASK (the task as JSON) in
  its environment; it prints its reward as the last line of its stdout.

Who gives the reward (`agent.reward`, one source per run, so no episode is scored twice
or by a rule the config does not say): `agent`, the agent returns it (a number, or
AgentResult(reward=...)); `rewards`, the agent returns its final answer (a string,
AgentResult(answer=...), or None: the content of its last reply; a command prints it as
its last stdout line, as text) and the `rewards:` block scores it (answers.py). A reward
under `rewards`, or no reward under `agent`, is the episode's `bad_reward`, said in words.

Every way user code can fail is counted and named, never a crash of the run and never a
silent zero: `error` (the agent raised, or the command exited non-zero), `timeout` (past
`wall_clock_s`: the task is cancelled, the process group killed), `no_call` (it returned
without calling the endpoint: nothing to train), `bad_reward` (not a finite number),
`over_budget` (it hit the calls or tokens limit: the endpoint answered 429), `engine`
(generation failed under it). A failed episode drops its whole group (GRPO needs every
episode of a task); the run goes on.

A function agent must not block its event loop (a blocking call inside `async def` stops
every episode of the job and the clock with them); a command is the contained choice for
agent code that blocks or that you do not trust.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from flywheel.pipelines.agent.endpoint import AgentEndpoint, Episode

FAILURES = ("error", "timeout", "no_call", "bad_reward", "over_budget", "engine")
MAX_STDOUT = 1 << 20  # a command's stdout past this is cut (its reward is its last line);
# an answer (agent.reward: rewards) past this many characters is refused


@dataclass
class AgentResult:
    """What an agent may return instead of a bare reward (agent.reward: agent) or a bare
    answer (agent.reward: rewards)."""

    reward: float | None = None  # agent.reward agent: required; rewards: left None
    info: dict[str, float] = field(default_factory=dict)  # per-episode metrics, averaged
    answer: str | None = None  # agent.reward rewards: what they score (None: last reply)


@dataclass
class CallRow:
    """One call's sampled choice: what training reads (rows.py)."""

    prompt_ids: list[int]
    token_ids: list[int]
    log_probs: list[float]
    version: int
    segment: int
    call: int = 0  # the call's index in its episode
    choice: int = 0  # which of the call's n choices
    # [call, choice] of the reply this call's prompt continues (its prompt ids start with
    # that row's prompt + completion); None: the call was rendered whole
    extends: list[int] | None = None


@dataclass
class EpisodeOutcome:
    task_index: int
    rows: list[CallRow]
    reward: float
    failure: str | None = None  # one of FAILURES
    message: str = ""  # what failed, in words
    counts: dict[str, int] = field(default_factory=dict)  # the endpoint's per-episode counts
    info: dict[str, float] = field(default_factory=dict)
    # agent.reward rewards: the final answer the rewards score (reward is NaN until they
    # have), and the messages of the call it answers (as the model's template saw them)
    answer: str | None = None
    answer_messages: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class AgentLimits:
    wall_clock_s: float = 300.0


AgentFn = Callable[[dict, Any], Awaitable[Any]]


async def run_episode(endpoint: AgentEndpoint, task: dict, task_index: int, name: str,
                      seed: int, limits: AgentLimits, agent: AgentFn | None = None,
                      command: list[str] | None = None,
                      answers: bool = False) -> EpisodeOutcome:
    """`answers`: agent.reward is rewards (the agent returns its answer, not a reward)."""
    episode = endpoint.open_episode(name, seed)
    failure, message, reward, info, answer = None, "", math.nan, {}, None
    try:
        if agent is not None:
            value = await asyncio.wait_for(_call_agent(agent, task, endpoint, episode),
                                           limits.wall_clock_s)
        else:
            value = await _run_command(command or [], task, endpoint, episode,
                                       limits.wall_clock_s, answers)
        if answers:
            answer, info, message = _answer(value, episode.last_reply)
        else:
            reward, info, message = _reward(value)
        failure = "bad_reward" if message else None
    except TimeoutError:
        failure, message = "timeout", f"past its wall clock of {limits.wall_clock_s:g} s"
    except CommandFailed as error:
        failure, message = "error", str(error)
    except Exception as error:  # noqa: BLE001 - user code: counted, never a crash of the run
        failure, message = "error", f"{type(error).__name__}: {error}"
    finally:
        endpoint.close_episode(episode)
    # the endpoint's refusal is the cause of whatever the agent did after it
    if episode.failed:
        failure, message = "engine", episode.failed
    elif episode.over_budget:
        failure, message = "over_budget", episode.over_budget
    elif failure is None and not episode.ledger.calls:
        failure, message = "no_call", "the agent returned without calling the endpoint"
    return EpisodeOutcome(task_index, rows_of(episode), reward, failure, message,
                          dict(episode.counts), info, answer,
                          list(episode.last_messages) if answers else [])


async def _call_agent(agent: AgentFn, task: dict, endpoint: AgentEndpoint,
                      episode: Episode) -> Any:
    import openai

    async with openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=episode.key,
                                  max_retries=0) as client:
        return await agent(dict(task), client)


class CommandFailed(Exception):
    pass


async def _run_command(argv: list[str], task: dict, endpoint: AgentEndpoint,
                       episode: Episode, wall_clock_s: float, answers: bool = False) -> Any:
    """The last line of the command's stdout: its reward as JSON, or with `answers` its
    answer as text (None when it printed nothing)."""
    env = {**os.environ, "OPENAI_BASE_URL": endpoint.base_url, "OPENAI_API_KEY": episode.key,
           "OPENAI_MODEL": endpoint.model_name, "FLYWHEEL_TASK": json.dumps(task)}
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True)
    try:
        out, err = await asyncio.wait_for(process.communicate(), wall_clock_s)
    except TimeoutError:
        os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        raise
    if process.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise CommandFailed(f"{argv[0]} exited with {process.returncode}: {tail[0][:300]}")
    lines = out[-MAX_STDOUT:].decode(errors="replace").strip().splitlines()
    if not lines:
        return None
    if answers:
        return lines[-1]
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return lines[-1][:100]


def _reward(value: Any) -> tuple[float, dict[str, float], str]:
    """(reward, info, what is wrong with it: '' when nothing)."""
    info: dict[str, float] = {}
    if isinstance(value, AgentResult):
        value, info = value.reward, dict(value.info)
    if isinstance(value, bool) or not isinstance(value, int | float):
        hint = (" (agent.reward is agent; to score its answer with rewards:, set "
                "agent.reward: rewards)" if value is None or isinstance(value, str) else "")
        return math.nan, {}, f"the agent returned {type(value).__name__} {str(value)[:60]!r}, " \
                             f"not a number{hint}"
    if not math.isfinite(value):
        return math.nan, {}, f"the agent returned {value}, not a finite number"
    return float(value), info, ""


def _answer(value: Any, last_reply: str | None) -> tuple[str | None, dict[str, float], str]:
    """(answer, info, what is wrong: '' when nothing) of an agent under agent.reward:
    rewards; None stands for its last reply's content."""
    info: dict[str, float] = {}
    if isinstance(value, AgentResult):
        if value.reward is not None:
            return None, {}, ("the agent returned a reward, but agent.reward is rewards (the "
                              "rewards: block scores its answer): return AgentResult(answer="
                              "...) without a reward, or set agent.reward: agent")
        value, info = value.answer, dict(value.info)
    if value is None:
        return last_reply, info, ""
    if isinstance(value, str) and len(value) > MAX_STDOUT:
        return None, {}, f"the agent's answer is {len(value)} characters; at most {MAX_STDOUT}"
    if isinstance(value, str):
        return value, info, ""
    what = "a reward" if isinstance(value, int | float) and not isinstance(value, bool) \
        else f"{type(value).__name__} {str(value)[:60]!r}"
    return None, {}, (f"the agent returned {what}, but agent.reward is rewards: return its "
                      "final answer (a string, AgentResult(answer=...), or None for its last "
                      "reply), or set agent.reward: agent")


def rows_of(episode: Episode) -> list[CallRow]:
    """Every choice of every call, as the engine saw and sampled it, with the reply it
    continues (training packs continued calls into one row: rows.py)."""
    return [CallRow(call.prompt_ids, list(g.token_ids), list(g.log_probs), call.version,
                    call.segment, call.index, j, list(call.extends) if call.extends else None)
            for call in episode.ledger.calls for j, g in enumerate(call.choices)]
