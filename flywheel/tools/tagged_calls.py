"""GEM's tool-call format (`tool_use.call_format: tags`), the one ROLL's tool block uses.

A call is the tool's one argument between tags of its own, with no JSON around it:

    <code>print(2 ** 10)</code>          the python tool (ROLL's python_code)
    ```python\\nprint(2 ** 10)\\n```       the same tool, as a Markdown block
    <search>river of Seldunton</search>  the search tool

Each tool has one or more tag pairs (`ToolConfig.call_tags`; unset: `<tool_id>` and
`</tool_id>`); the body fills the tool's one required parameter. Of all the pairs found in
a reply, the call is the one that closes first (GEM's python tool keeps the earliest
match, and ROLL stops generation at the closing tag). An opening tag that never closes is
a malformed call; a reply with no opening tag is the env's action.

GEM does not describe its tools to the chat template: its ToolEnvWrapper appends each
tool's instruction to the first observation. `instructions` writes flywheel's own (the
tool's description and its tags), which ToolEnv appends the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flywheel.tools.base import Tool
from flywheel.tools.call_parser import MAX_CALL_CHARS, MalformedCall, ToolCall


@dataclass(frozen=True)
class TaggedCall:
    tool: str  # the tool's name
    argument: str  # the parameter the body fills
    start: str
    end: str


@dataclass(frozen=True)
class TaggedFormat:
    """Every tag pair of a tag's tools, in the order the tools and pairs are listed."""

    tags: tuple[TaggedCall, ...]

    def hint(self) -> str:
        return " or ".join(f"{t.start}{t.argument}{t.end}" for t in self.tags)


def tagged_format(tools: Sequence[Tool], call_tags: Sequence[Sequence[Sequence[str]]]
                  ) -> TaggedFormat:
    """The format of `tools`, the i-th called with call_tags[i] (empty: its name as a
    tag). ValueError when a tool does not take exactly one required argument."""
    tags = []
    for tool, pairs in zip(tools, call_tags, strict=True):
        required = tool.parameters.get("required") or []
        if len(required) != 1:
            raise ValueError(f"tool '{tool.name}' takes {len(required)} required arguments "
                             f"({', '.join(required)}); call_format: tags fills exactly one")
        for start, end in (pairs or [(f"<{tool.name}>", f"</{tool.name}>")]):
            tags.append(TaggedCall(tool.name, required[0], start, end))
    return TaggedFormat(tuple(tags))


def parse_tagged_call(text: str, fmt: TaggedFormat) -> ToolCall | MalformedCall | None:
    best: tuple[int, TaggedCall, str] | None = None  # (where it closes, tag, body)
    unclosed: TaggedCall | None = None
    for tag in fmt.tags:
        start = text.find(tag.start)
        if start < 0:
            continue
        end = text.find(tag.end, start + len(tag.start))
        if end < 0:
            unclosed = unclosed or tag
        elif best is None or end + len(tag.end) < best[0]:
            best = (end + len(tag.end), tag, text[start + len(tag.start):end])
    if best is None:
        return None if unclosed is None else MalformedCall(
            f"{unclosed.start} without {unclosed.end}")
    _, tag, body = best
    body = body.strip()
    if not body:
        return MalformedCall(f"nothing between {tag.start} and {tag.end}")
    if len(body) > MAX_CALL_CHARS:
        return MalformedCall(f"call is {len(body)} characters; at most {MAX_CALL_CHARS}")
    return ToolCall(tag.tool, {tag.argument: body})


def instructions(tools: Sequence[Tool], fmt: TaggedFormat) -> str:
    """The text after the first observation that tells the model its tools and tags."""
    lines = ["You can use tools. Write a tool's input between its tags and stop; the "
             "result comes back in the next message. Tools:"]
    for tool in tools:
        ways = " or ".join(f"{t.start}...{t.end}" for t in fmt.tags if t.tool == tool.name)
        lines.append(f"- {tool.name}: {tool.description} Call it with {ways}.")
    return "\n".join(lines)
