"""Chat-templated turns, token-in / token-out: what a chat model sees in an episode.

With `chat_template: true` on an env tag, an episode is the conversation the model's own
chat template renders: a system message (the tag's system text, plus the tool
descriptions), the env's first observation as a user message, then per turn the model's
reply as the assistant message and the env's answer as a user message, or as the
template's tool message when the reply was a tool call. The trained sequence is exactly the
ids the engine saw and produced: the model's reply ids are kept as sampled (never decoded
and re-encoded), and only the text the template puts *between* two replies is tokenized,
as the delta the template adds after an assistant turn. Turns are appended, never
re-rendered, so every turn's prompt is a prefix of the next (what the engine's prefix
cache and the training sequence both need).

How the delta is found: the template renders a short conversation that ends with an
assistant turn, then the same conversation plus one message (with a sentinel for its
content) and the generation prompt; the difference, split at the sentinel, is the text
before and after the content. The assistant turn's closing text (ChatML's
`<|im_end|>\\n`) is found the same way. A template whose rendering of earlier turns changes
when a message is added (one that drops past reasoning, as Qwen3's does) cannot be appended
to and is refused when the env manager is built, naming why.

Tokenization: template text is tokenized with special tokens on (it opens and closes
roles); message content (observations, tool output, the system text) with special tokens
split into plain text (`split_special_tokens=True`), so content can never open or close a
role. The boundary between a template piece and its content is therefore always a token
boundary; `apply_chat_template(tokenize=True)` tokenizes the whole string at once, and may
merge across it (e.g. the template's "\\n" with content that starts with whitespace). That
and two more are the intended differences from the template's own tokenization, asserted in
tests/envs/test_envs_chat_turns.py:
- a reply the engine cut at the token budget has no end-of-turn token: the closing text
  is appended (mask 0) as the template would close the turn;
- a reply is the model's ids as sampled, which need not be the canonical tokenization of
  its text.

Tools: a template that renders tools itself (its source mentions `tools`, as Qwen's does)
gets them as `apply_chat_template(tools=...)`, and tool results as `role: tool` messages.
One that does not (SmolLM2's) gets them in the system message, in the Hermes wording
(`tool_system_text`), and tool results as user messages wrapped in <tool_response> tags:
the model never saw a `tool` role, and Hermes-style data puts results in such tags.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from flywheel.platform.models.text_tokens import content_ids, template_ids

SENTINEL = "\ue000FLYWHEEL-CONTENT\ue000"  # a private-use code point pair: no text has it
Role = Literal["user", "tool"]


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer the chat turns use."""

    chat_template: str | None

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...


def tool_system_text(tools: Sequence[dict[str, Any]], start: str, end: str) -> str:
    """Tool descriptions for a system prompt, worded as Hermes / Qwen2.5's template words
    them (so a model trained on such data recognises them)."""
    lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{lines}\n</tools>\n\nFor each function call, return a json object with "
            f"function name and arguments within {start}{end} XML tags:\n{start}\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n' f"{end}")


class ChatTurns:
    """Token ids of an episode's turns under `tokenizer`'s chat template."""

    def __init__(self, tokenizer: ChatTokenizer, tools: Sequence[dict[str, Any]] = (),
                 call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>")) -> None:
        if not tokenizer.chat_template:
            raise ValueError("chat_template: true, but the model's tokenizer has no chat "
                             "template; set chat_template: false (raw text turns)")
        self.tokenizer = tokenizer
        self.tools = list(tools)
        self.native_tools = "tools" in tokenizer.chat_template
        self.tool_text = (tool_system_text(self.tools, *call_tags)
                          if self.tools and not self.native_tools else "")
        self.close_ids = self._template_ids(self._closing_text())
        self.deltas = {role: self._delta(role) for role in ("user", "tool")}

    # ---- the two things an episode asks for -------------------------------------------
    def first_prompt(self, system: str, observation: str) -> list[int]:
        """The system and first user message, ending with the generation prompt."""
        system = "\n\n".join(part for part in (system.strip(), self.tool_text) if part)
        messages = ([{"role": "system", "content": SENTINEL}] if system else [])
        messages.append({"role": "user", "content": SENTINEL})
        text = self._render(messages, add_generation_prompt=True)
        pieces = text.split(SENTINEL)
        if len(pieces) != len(messages) + 1:
            raise ValueError("the chat template changes or repeats message content; cannot "
                             "render turns token-in/token-out")
        contents = [system, observation] if system else [observation]
        ids = self._template_ids(pieces[0])
        for content, piece in zip(contents, pieces[1:]):
            ids += self._content_ids(content) + self._template_ids(piece)
        return ids

    def next_turn(self, response_ids: Sequence[int], content: str, role: Role) -> list[int]:
        """Ids to append after a reply: the rest of its closing text, then the message
        (`role` user or tool) and the generation prompt. None of them is the model's."""
        before, after = self.deltas[role]
        if role == "tool" and not self.native_tools:
            content = f"<tool_response>\n{content}\n</tool_response>"
        return (self.rest_of_close(list(response_ids)) + before + self._content_ids(content)
                + after)

    # ---- finding the template's pieces ------------------------------------------------
    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        tools = self.tools if self.native_tools and self.tools else None
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False)

    def _base(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]

    def _closing_text(self) -> str:
        prompt = self._render(self._base(), add_generation_prompt=True)
        turn = self._render([*self._base(), {"role": "assistant", "content": "A"}], False)
        if not turn.startswith(prompt) or not turn[len(prompt):].startswith("A"):
            raise ValueError("the chat template does not render an assistant turn as its "
                             "generation prompt followed by the reply; cannot append turns")
        return turn[len(prompt) + 1:]

    def _delta(self, role: Role) -> tuple[list[int], list[int]]:
        name = "tool" if role == "tool" and self.native_tools else "user"
        history = [*self._base(), {"role": "assistant", "content": "A"}]
        base = self._render(history, add_generation_prompt=False)
        full = self._render([*history, {"role": name, "content": SENTINEL}], True)
        if not full.startswith(base) or full.count(SENTINEL) != 1:
            raise ValueError(f"the chat template re-renders earlier turns when a {name} "
                             f"message follows; cannot append turns token-in/token-out")
        before, after = full[len(base):].split(SENTINEL)
        return self._template_ids(before), self._template_ids(after)

    def rest_of_close(self, response_ids: list[int]) -> list[int]:
        """The closing ids the reply did not produce: none after a reply ending with the
        whole close, the rest after one ending with its start (the end-of-turn token),
        all of it after a reply the token budget cut."""
        close = self.close_ids
        for k in range(len(close), 0, -1):
            if response_ids[-k:] == close[:k]:
                return close[k:]
        return list(close)

    def _template_ids(self, text: str) -> list[int]:
        return template_ids(self.tokenizer, text)

    def _content_ids(self, text: str) -> list[int]:
        return content_ids(self.tokenizer, text)
