"""The tool contract: what an episode's model may call, and how a call can fail.

A tool is any object with a `name`, a one-paragraph `description`, `parameters` (the JSON
schema of its arguments object, as OpenAI-style function tools and chat templates'
`tools=` take them) and `run(arguments) -> str`. The result is text because it goes back to
the model as the template's tool message. A Protocol, not a base class: a user's tool by
import path needs no flywheel import to satisfy it.

A tool signals a failure the model caused (a bad argument, a program that crashed) by
raising `ToolError`: its message becomes the observation. `ToolTimeout` says the tool's own
limit stopped it (the python tool's sandbox clock). Any other exception is a bug of the
tool; the tool box (toolbox.py) reports it the same way, counted apart, and the episode goes
on either way.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Tool(Protocol):
    name: str  # what the model writes in {"name": ...}
    description: str  # shown to the model in the system prompt or the template's tools
    parameters: dict[str, Any]  # JSON schema of the arguments object

    def run(self, arguments: dict[str, Any]) -> str: ...


class ToolError(Exception):
    """The call was understood but cannot be answered (bad argument, program error)."""


class ToolTimeout(ToolError):
    """The tool's own time limit stopped it."""


def function_schema(tool: Tool) -> dict[str, Any]:
    """The tool as a chat template's `tools=` entry (the OpenAI function format)."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}


def required_str(arguments: dict[str, Any], key: str, max_chars: int) -> str:
    """arguments[key] as a non-empty str of at most max_chars, else ToolError."""
    value = arguments.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"argument '{key}' must be a non-empty string")
    if len(value) > max_chars:
        raise ToolError(f"argument '{key}' is {len(value)} characters; at most {max_chars}")
    return value
