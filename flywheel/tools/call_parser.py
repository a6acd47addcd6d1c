"""Finding a tool call in the model's reply.

The format is Hermes/Qwen's, the one Qwen2.5/Qwen3 chat templates define and most tool
datasets use: a JSON object between two tags,

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "4821 * 739"}}
    </tool_call>

The tags are configurable (`tool_use.call_start` / `call_end`) for templates that spell
them otherwise. One call per turn: the first opening tag decides; calls after it in the
same reply are not run (the model sees one result per turn, as the env sees one action).
`arguments` may also be a JSON string holding the object (some models write it so).

Result: None when the reply has no opening tag (it is an action for the env), a `ToolCall`,
or a `MalformedCall` saying what is wrong (no closing tag, not JSON, no name, arguments not
an object), which the tool box turns into an observation and a count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_CALL_CHARS = 20_000  # a longer call body is malformed without being parsed


@dataclass(frozen=True)
class CallFormat:
    start: str = "<tool_call>"
    end: str = "</tool_call>"


HERMES = CallFormat()


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class MalformedCall:
    reason: str


def parse_tool_call(text: str, fmt: CallFormat = HERMES) -> ToolCall | MalformedCall | None:
    start = text.find(fmt.start)
    if start < 0:
        return None
    body_start = start + len(fmt.start)
    end = text.find(fmt.end, body_start)
    if end < 0:
        return MalformedCall(f"{fmt.start} without {fmt.end}")
    body = text[body_start:end].strip()
    if len(body) > MAX_CALL_CHARS:
        return MalformedCall(f"call is {len(body)} characters; at most {MAX_CALL_CHARS}")
    try:
        call = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as error:
        return MalformedCall(f"call is not JSON ({getattr(error, 'msg', 'too deep')})")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return MalformedCall('call must be a JSON object with a "name" string')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return MalformedCall('"arguments" is a string that is not a JSON object')
    if not isinstance(arguments, dict):
        return MalformedCall('"arguments" must be a JSON object')
    return ToolCall(call["name"], arguments)
