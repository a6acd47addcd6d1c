"""How OpenAI tools, tool calls and tool results become text the model reads and writes.

The endpoint (endpoint.py) takes OpenAI's objects: a `tools` list of function schemas, an
assistant message's `tool_calls`, `role: tool` messages. A model sees text, in the format
it was trained on, chosen per model in the config (`agent.tool_format`):

- `template`: the chat template renders tools itself (its source mentions `tools`, as
  Qwen2.5's does): `tools=` goes to `apply_chat_template`, tool messages stay `role: tool`,
  and the model's calls are Hermes JSON in <tool_call> tags (what such templates define).
- `hermes`: a template without tools (SmolLM2's): the tool list goes into the system
  message in Hermes / Qwen2.5's wording (envs/chat_turns.py `tool_system_text`, the
  wording the SmolLM2 tool-call warm start learned), a tool result is a user message in
  <tool_response> tags, a call is JSON in <tool_call> tags (tools/call_parser.py).
- `tags`: GEM's tagged format (tools/tagged_calls.py): each tool's one argument between
  tags of its own (`<calculator>4*5</calculator>`), the instructions after the first user
  message as flywheel's ToolEnv puts them, results as <tool_response> user messages.
- `auto` (default): `template` when the template renders tools, else `hermes`.

Parsing is the inverse: every complete call in a reply becomes one OpenAI tool call (with
an id of the endpoint's own); the text before the first call is the message content. A
malformed call (unclosed tag, not JSON) is left in the content as text, so the agent sees
what the model wrote, and counted by the endpoint (`agent/malformed_calls`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from flywheel.envs.chat_turns import tool_system_text
from flywheel.tools.call_parser import HERMES, MalformedCall, parse_tool_call
from flywheel.tools.tagged_calls import TaggedFormat, instructions, parse_tagged_call, tagged_format

ToolFormatName = Literal["auto", "template", "hermes", "tags"]
TOOL_FORMATS = ("auto", "template", "hermes", "tags")


@dataclass(frozen=True)
class FunctionTool:
    """One OpenAI function tool, as the tagged format's Tool protocol reads it."""

    name: str
    description: str
    parameters: dict[str, Any]

    def run(self, arguments: dict[str, Any]) -> str:  # the agent runs its tools, never we
        raise RuntimeError("the endpoint never runs an agent's tool")

    def schema(self) -> dict[str, Any]:
        """OpenAI's function tool, keys in the order tools/base.py `function_schema` writes."""
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass(frozen=True)
class ParsedReply:
    content: str | None
    tool_calls: list[tuple[str, dict[str, Any]]]  # (name, arguments) per call, in order
    malformed: int  # calls that could not be read (left in content)


class ToolFormat:
    """Renders and parses tools for one model (`name` resolved: never `auto`)."""

    def __init__(self, name: ToolFormatName, template_has_tools: bool,
                 tools: list[FunctionTool]) -> None:
        if name == "auto":
            name = "template" if template_has_tools else "hermes"
        if name == "template" and not template_has_tools:
            raise ValueError("agent.tool_format: template, but the model's chat template "
                             "renders no tools; use hermes or tags")
        self.name = name
        self.tools = tools
        self.tagged: TaggedFormat | None = (
            tagged_format(tools, [[] for _ in tools]) if name == "tags" and tools else None)

    # ---- the prompt side -------------------------------------------------------------
    def template_tools(self) -> list[dict[str, Any]] | None:
        """`tools=` for apply_chat_template (only the `template` format)."""
        return [t.schema() for t in self.tools] if self.name == "template" and self.tools \
            else None

    def messages_for_template(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """OpenAI messages as the chat template must see them under this format."""
        if self.name == "template":
            return [_template_message(m) for m in messages]
        out = [self.plain_message(m) for m in messages]
        if not self.tools:
            return out
        if self.name == "hermes":
            text = tool_system_text([t.schema() for t in self.tools], HERMES.start, HERMES.end)
            if out and out[0]["role"] == "system":
                system = "\n\n".join(p for p in (out[0]["content"].strip(), text) if p)
                return [{"role": "system", "content": system}, *out[1:]]
            return [{"role": "system", "content": text}, *out]
        assert self.tagged is not None
        for i, message in enumerate(out):  # ToolEnv: instructions follow the first observation
            if message["role"] == "user":
                text = f"{message['content']}\n{instructions(self.tools, self.tagged)}"
                out[i] = {"role": "user", "content": text}
                break
        return out

    def plain_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """A message for a template without tools: a tool result as a user message in
        <tool_response> tags, an assistant's calls written out in the model's format."""
        role = message["role"]
        if role == "tool":
            return {"role": "user",
                    "content": f"<tool_response>\n{message['content']}\n</tool_response>"}
        if role == "assistant" and message.get("tool_calls"):
            return {"role": "assistant", "content": self.write_calls(message)}
        return {"role": role, "content": message.get("content") or ""}

    def write_calls(self, message: dict[str, Any]) -> str:
        parts = [message["content"]] if message.get("content") else []
        for call in message["tool_calls"]:
            name, arguments = call["function"]["name"], json.loads(call["function"]["arguments"])
            if self.name == "tags":
                argument = next(iter(arguments.values()), "")
                parts.append(f"<{name}>{argument}</{name}>")
            else:
                body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
                parts.append(f"{HERMES.start}\n{body}\n{HERMES.end}")
        return "\n".join(parts)

    # ---- the reply side ---------------------------------------------------------------
    def parse(self, text: str) -> ParsedReply:
        if not self.tools:
            return ParsedReply(text, [], 0)
        calls: list[tuple[str, dict[str, Any]]] = []
        first, rest, malformed = None, text, 0
        while True:
            call, start, end = self._next_call(rest)
            if call is None:
                break
            if isinstance(call, MalformedCall):
                malformed += 1
                break
            calls.append((call.name, call.arguments))
            first = first if first is not None else len(text) - len(rest) + start
            rest = rest[end:]
        if not calls:
            return ParsedReply(text, [], malformed)
        content = text[:first].strip()
        return ParsedReply(content or None, calls, malformed)

    def _next_call(self, text: str):
        """(call, where it starts, where it ends) of the first call in `text`; a None or
        MalformedCall call has no place."""
        if self.tagged is None:
            call = parse_tool_call(text, HERMES)
            if call is None or isinstance(call, MalformedCall):
                return call, 0, 0
            start = text.find(HERMES.start)
            return call, start, text.find(HERMES.end, start) + len(HERMES.end)
        best: tuple[int, int] | None = None  # the pair that closes first (tagged_calls.py)
        for tag in self.tagged.tags:
            start = text.find(tag.start)
            end = text.find(tag.end, start + len(tag.start)) if start >= 0 else -1
            if end >= 0 and (best is None or end + len(tag.end) < best[1]):
                best = (start, end + len(tag.end))
        if best is None:
            return parse_tagged_call(text, self.tagged), 0, 0
        return parse_tagged_call(text[best[0]:best[1]], self.tagged), best[0], best[1]


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message for a template that renders tools: arguments as objects (Qwen's template
    writes `tool_call.arguments | tojson`)."""
    if message["role"] == "assistant" and message.get("tool_calls"):
        calls = [{"type": "function", "id": c.get("id"),
                  "function": {"name": c["function"]["name"],
                               "arguments": json.loads(c["function"]["arguments"])}}
                 for c in message["tool_calls"]]
        return {"role": "assistant", "content": message.get("content") or "",
                "tool_calls": calls}
    out = {"role": message["role"], "content": message.get("content") or ""}
    if message["role"] == "tool" and message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return out
