"""Token-in, token-out across an agent's calls: the ids each call's prompt is made of.

An agent sends the whole conversation on every call. Re-tokenizing it would train ids the
engine never sampled (a reply's text need not tokenize back to the ids it was sampled as;
verl #6501 lost a separator at every assistant->tool boundary that way). So the ledger
keeps, per episode, every call's prompt ids and each choice's completion ids, and builds
the next prompt by extension where it can:

    prompt(k+1) = prompt(k) + completion(k, j) + rest of the turn's close
                  + the template's text for the messages after the reply

when the new request's messages start with call k's messages followed by the assistant
message the endpoint returned for choice j (compared as OpenAI objects: role, content,
the calls' names and arguments; not their ids), with the same tools. Only the text
*after* the reply is tokenized: the template rendered with the new messages' contents
replaced by a sentinel, split there, template text tokenized with special tokens on and
contents as text (platform/models/text_tokens.py), as envs/chat_turns.py does for the
built-in agentic pipeline.

Any other request (the first, or one whose history the agent changed: summarised,
dropped or edited turns, another reply than one of ours, other tools) is rendered whole
(`chat_ids`) and starts a new segment; past the first, that is a history rewrite, counted
(`agent/history_rewrites`). A template that re-renders earlier turns when a message is
added (so the new render does not start with the old) also starts a segment, counted as a
rewrite too, since the ids cannot be continued.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flywheel.envs.chat_turns import SENTINEL, ChatTurns
from flywheel.pipelines.agent.tool_format import ToolFormat
from flywheel.platform.models.text_tokens import chat_ids, content_ids, template_ids
from flywheel.workers.strategies.base import Generation


def message_key(message: dict[str, Any]) -> tuple:
    """What two messages must share to be the same turn for the model."""
    calls = tuple((c["function"]["name"], _canonical(c["function"]["arguments"]))
                  for c in message.get("tool_calls") or ())
    return (message["role"], message.get("content") or "", calls,
            message.get("tool_call_id") if message["role"] == "tool" else None)


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        return str(arguments)


@dataclass
class CallRecord:
    """One call: its prompt and every choice the engine sampled for it."""

    index: int  # calls of the episode before this one
    segment: int  # the segment its prompt belongs to (a new one after each rewrite)
    prompt_ids: list[int]
    choices: list[Generation]
    version: int  # policy version that sampled it (the staleness bound reads it)
    keys: tuple  # message_key of each request message
    tools_key: str
    replies: list[tuple] = field(default_factory=list)  # message_key of each choice's reply
    # (call, choice) whose ids its prompt continues (prompt = theirs + that reply + the new
    # turns); None: rendered whole (a segment's first call). Training packs on it (rows.py).
    extends: tuple[int, int] | None = None


@dataclass
class Prompt:
    ids: list[int]
    segment: int
    rewrite: bool  # a history rewrite (not the episode's first call)
    extended_from: tuple[int, int] | None  # (call, choice) whose ids it continues


class TokenLedger:
    """One episode's calls. Not thread-safe: the endpoint serializes an episode's calls."""

    def __init__(self, tokenizer: Any, turns: ChatTurns) -> None:
        self.tokenizer = tokenizer
        self.turns = turns  # the template's turn close (rest_of_close)
        self.calls: list[CallRecord] = []
        self.segments = 0
        self.history_rewrites = 0

    def prompt(self, messages: list[dict[str, Any]], fmt: ToolFormat) -> Prompt:
        keys = tuple(message_key(m) for m in messages)
        tools_key = json.dumps([t.schema() for t in fmt.tools], sort_keys=True)
        source = self._continued(keys, tools_key)
        if source is not None:
            call, choice = source
            delta = self._delta(messages, len(call.keys) + 1, fmt)
            if delta is not None:
                reply = call.choices[choice].token_ids
                ids = call.prompt_ids + reply + self.turns.rest_of_close(reply) + delta
                return Prompt(ids, call.segment, False, (call.index, choice))
        rewrite = bool(self.calls)
        self.history_rewrites += int(rewrite)
        self.segments += 1
        ids = chat_ids(self.tokenizer, fmt.messages_for_template(messages),
                       **self._template_kwargs(fmt, add_generation_prompt=True))
        return Prompt(ids, self.segments - 1, rewrite, None)

    def record(self, messages: list[dict[str, Any]], fmt: ToolFormat, prompt: Prompt,
               choices: list[Generation], version: int,
               replies: list[dict[str, Any]]) -> CallRecord:
        call = CallRecord(len(self.calls), prompt.segment, prompt.ids, choices, version,
                          tuple(message_key(m) for m in messages),
                          json.dumps([t.schema() for t in fmt.tools], sort_keys=True),
                          [message_key(r) for r in replies], prompt.extended_from)
        self.calls.append(call)
        return call

    # ---- extension ---------------------------------------------------------------------
    def _continued(self, keys: tuple, tools_key: str) -> tuple[CallRecord, int] | None:
        """The latest (call, choice) whose request + reply the new messages start with and
        go on past (the longest such history)."""
        best: tuple[CallRecord, int] | None = None
        for call in self.calls:
            k = len(call.keys)
            if call.tools_key != tools_key or len(keys) <= k + 1 or keys[:k] != call.keys:
                continue
            for j, reply in enumerate(call.replies):
                if keys[k] == reply and (best is None or k >= len(best[0].keys)):
                    best = (call, j)
        return best

    def _delta(self, messages: list[dict[str, Any]], kept: int,
               fmt: ToolFormat) -> list[int] | None:
        """Ids the template adds after message `kept - 1` (the reply, closed) up to the
        generation prompt; None when the template re-renders the earlier turns."""
        shown = fmt.messages_for_template(messages)
        kept += len(shown) - len(messages)  # a system message the format inserted
        contents = [m.get("content") for m in shown[kept:]]
        hidden = shown[:kept] + [
            {**m, "content": SENTINEL} if isinstance(c, str) and c else m
            for m, c in zip(shown[kept:], contents)]
        base = self._render(shown[:kept], fmt, add_generation_prompt=False)
        full = self._render(hidden, fmt, add_generation_prompt=True)
        texts = [c for c in contents if isinstance(c, str) and c]
        if not full.startswith(base) or full.count(SENTINEL) != len(texts):
            return None
        pieces = full[len(base):].split(SENTINEL)
        ids = template_ids(self.tokenizer, pieces[0])
        for text, piece in zip(texts, pieces[1:], strict=True):
            ids += content_ids(self.tokenizer, text) + template_ids(self.tokenizer, piece)
        return ids

    def _render(self, messages: list[dict[str, Any]], fmt: ToolFormat,
                add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, **self._template_kwargs(fmt, add_generation_prompt))

    @staticmethod
    def _template_kwargs(fmt: ToolFormat, add_generation_prompt: bool) -> dict[str, Any]:
        tools = fmt.template_tools()
        return {"add_generation_prompt": add_generation_prompt,
                **({"tools": tools} if tools else {})}
