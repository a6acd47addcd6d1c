"""A text env whose model may call tools before it answers (GEM's ToolEnvWrapper idea).

`ToolEnv(env, box, ...)` wraps any TextEnv. A reply holding a tool call (call_parser.py)
does not reach the env: the call runs in the tool box and its result is the next
observation, with reward 0, the episode going on, and `info["observation_role"] = "tool"`
so the env manager renders it as the chat template's tool message. A reply without a call
is the env's action, as before. A call therefore spends one of the episode's `max_steps`
turns, like ROLL's tool wrapper.

Formats: a `CallFormat` (Hermes JSON in tags, call_parser.py) or a `TaggedFormat` (GEM's
tags around one argument, tagged_calls.py); with the latter, `instructions` (the tools and
their tags) follow the first observation, as GEM's ToolEnvWrapper puts them.

Rewards (ROLL's wrapper_args, paid as GEM's ToolEnvWrapper pays them): a call that reached
its tool earns `tool_reward`, plus `tool_success_reward` when it returned without error; a
malformed, unknown or over-budget call earns nothing. The env's own rewards are unchanged.
One difference from GEM: past the budget GEM stops parsing calls and hands the reply to the
env as its answer; here the reply is answered "no tool uses left", so the model may still
answer.

Budget: at most `max_tool_uses` calls run per episode; a further call is answered "no tool
uses left" without running (counted `tool_over_budget`), so the model can still answer in
its remaining turns.

Counts, on every step's info (0 on steps that were actions), summed per episode by
`trajectory.episode_metrics` (COUNTED_INFO_KEYS, kept there): tool_calls (every reply with
an opening tag), tool_valid_calls (ran and returned text), tool_malformed, tool_unknown,
tool_errors, tool_timeouts, tool_over_budget, tool_output_cut (a result cut to the box's
max_output_chars; the step's info then names the tool in `tool_output_cut_by`). A tool
step's `action_is_valid` is whether the call ran cleanly.
"""

from __future__ import annotations

from typing import Any

from flywheel.envs.base import StepResult, TextEnv
from flywheel.envs.trajectory import COUNTED_INFO_KEYS
from flywheel.tools.call_parser import HERMES, CallFormat, MalformedCall, parse_tool_call
from flywheel.tools.tagged_calls import TaggedFormat, parse_tagged_call
from flywheel.tools.toolbox import ToolBox

_KIND_KEY = {"ok": "tool_valid_calls", "unknown": "tool_unknown", "error": "tool_errors",
             "timeout": "tool_timeouts"}
TOOL_COUNT_KEYS = COUNTED_INFO_KEYS  # summed per episode (envs/trajectory.py)


def malformed_call_message(reason: str, fmt: CallFormat | TaggedFormat = HERMES) -> str:
    """The answer to a call that could not be read: the reason and the format to write.

    Public so that an agent written against the OpenAI client (examples/agents/) answers a
    malformed call with the same words as the built-in env, and the two pipelines train on
    the same episodes.
    """
    how = (fmt.hint() if isinstance(fmt, TaggedFormat)
           else f'{fmt.start}{{"name": ..., "arguments": {{...}}}}{fmt.end}')
    return f"Error: malformed tool call: {reason}. Write {how}"


def _counts(**nonzero: int) -> dict[str, int]:
    return {key: nonzero.get(key, 0) for key in TOOL_COUNT_KEYS}


class ToolEnv(TextEnv):
    def __init__(self, env: TextEnv, box: ToolBox, max_tool_uses: int,
                 call_format: CallFormat | TaggedFormat = HERMES, tool_reward: float = 0.0,
                 tool_success_reward: float = 0.0, instructions: str = "") -> None:
        self.env = env
        self.box = box
        self.max_tool_uses = max_tool_uses
        self.call_format = call_format
        self.tool_reward = tool_reward
        self.tool_success_reward = tool_success_reward
        self.instructions = instructions  # appended to the first observation when set
        self.uses = 0  # calls run in this episode

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.uses = 0
        observation, info = self.env.reset(seed=seed, options=options)
        if self.instructions:
            observation = f"{observation}\n{self.instructions}"
        return observation, info

    def step(self, action_text: str) -> StepResult:
        fmt = self.call_format
        call = (parse_tagged_call(action_text, fmt) if isinstance(fmt, TaggedFormat)
                else parse_tool_call(action_text, fmt))
        if call is None:
            observation, reward, terminated, truncated, info = self.env.step(action_text)
            return observation, reward, terminated, truncated, {**_counts(), **info}
        if isinstance(call, MalformedCall):
            return self._tool_step(malformed_call_message(call.reason, fmt), False, 0.0,
                                   tool_malformed=1)
        if self.uses >= self.max_tool_uses:
            return self._tool_step(f"Error: no tool uses left (at most {self.max_tool_uses} "
                                   f"per episode); give your answer", False, 0.0,
                                   tool_over_budget=1)
        self.uses += 1
        outcome = self.box.run_call(call)
        ok = outcome.kind == "ok"
        reward = (0.0 if outcome.kind == "unknown" else
                  self.tool_reward + (self.tool_success_reward if ok else 0.0))
        step = self._tool_step(outcome.text, ok, reward, **{_KIND_KEY[outcome.kind]: 1},
                               tool_output_cut=int(outcome.cut > 0))
        if outcome.cut:
            step[4]["tool_output_cut_by"] = call.name
        return step

    def close(self) -> None:
        self.env.close()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as a chat template's `tools=` (asked of an env in its own process)."""
        return self.box.schemas()

    def _tool_step(self, text: str, ok: bool, reward: float, **count: int) -> StepResult:
        info = {**_counts(tool_calls=1, **count), "action_is_valid": ok, "success": False,
                "observation_role": "tool"}
        return text, reward, False, False, info
