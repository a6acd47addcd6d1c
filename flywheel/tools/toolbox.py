"""The tool box: runs one parsed call under a wall clock and says what happened.

Every way a call can go wrong becomes text for the model plus one outcome kind, which the
tool env counts (tool_env.py); nothing raises out of `run_call`:

| kind         | when                                                    | observation          |
|--------------|---------------------------------------------------------|----------------------|
| ok           | the tool returned text                                  | the text             |
| unknown      | no tool of that name                                    | the known names      |
| error        | ToolError (bad argument, program crashed) or any other  | "Error: ..."         |
|              | exception of the tool (a bug of its own, named)         |                      |
| timeout      | ToolTimeout, or no answer within `timeout_s`            | "Error: timed out"   |

(Malformed calls and an exhausted budget never reach the box: see tool_env.py.)

Every text the box returns is at most `max_output_chars` characters: a longer one (a tool
that prints 200 MB) is cut here, before it leaves the env's process or meets a tokenizer,
with a note saying how much was cut, and the outcome says so (`cut`, counted by the tool
env as `tool_output_cut`).

The wall clock: each call runs in a daemon helper thread; one that has not returned after
`timeout_s` is abandoned (a stuck Python call cannot be interrupted; the python tool's own
sandbox clock kills its program well before). In a run the box lives in its env's own
process (workers/env_process.py), which is replaced at the next reset after such a
timeout, so an abandoned call runs at most until its episode ends. The env worker's
step_timeout_s is the outer bound: past it the env's process is killed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from flywheel.tools.base import Tool, ToolError, ToolTimeout, function_schema
from flywheel.tools.call_parser import ToolCall

OutcomeKind = Literal["ok", "unknown", "error", "timeout"]


@dataclass(frozen=True)
class ToolOutcome:
    kind: OutcomeKind
    text: str
    cut: int = 0  # characters cut from the text (max_output_chars)


def unknown_tool_message(name: str, known: Sequence[str]) -> str:
    """The answer to a call of a tool that does not exist: the names that do.

    Public for the same reason as tool_env.malformed_call_message: an OpenAI-client agent
    answers with the built-in env's words.
    """
    return f"Error: unknown tool '{name}'; tools: {', '.join(known)}"


class ToolBox:
    def __init__(self, tools: Sequence[Tool], timeout_s: float,
                 max_output_chars: int = 20_000) -> None:
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"two tools share a name: {names}")
        self.tools = {tool.name: tool for tool in tools}
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars

    def schemas(self) -> list[dict[str, Any]]:
        return [function_schema(tool) for tool in self.tools.values()]

    def run_call(self, call: ToolCall) -> ToolOutcome:
        outcome = self._run(call)
        limit = self.max_output_chars
        if len(outcome.text) <= limit:
            return outcome
        cut = len(outcome.text) - limit
        return ToolOutcome(outcome.kind, outcome.text[:limit] + f"\n[{call.name} output cut: "
                           f"{cut} more characters (max_tool_output_chars={limit})]", cut)

    def _run(self, call: ToolCall) -> ToolOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolOutcome("unknown", unknown_tool_message(call.name, self.tools))
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["text"] = tool.run(call.arguments)
            except BaseException as error:  # noqa: BLE001 - reported below, never raised
                box["error"] = error

        thread = threading.Thread(target=target, name=f"tool-{call.name}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            return ToolOutcome("timeout", f"Error: {call.name} timed out after "
                                          f"{self.timeout_s:g}s")
        error = box.get("error")
        if isinstance(error, ToolTimeout):
            return ToolOutcome("timeout", f"Error: {call.name} timed out: {error}")
        if isinstance(error, ToolError):
            return ToolOutcome("error", f"Error: {error}")
        if error is not None:
            return ToolOutcome("error", f"Error: {call.name} failed: "
                                        f"{type(error).__name__}: {error}")
        text = box.get("text")
        if not isinstance(text, str):
            return ToolOutcome("error", f"Error: {call.name} returned "
                                        f"{type(text).__name__}, not text")
        return ToolOutcome("ok", text)
