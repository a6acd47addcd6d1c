"""OpenAI's chat-completions wire format: a request read and checked, a reply written.

What is read (everything else is refused with a 400 naming the field, never ignored):

| field                              | what it does here                                   |
|------------------------------------|-----------------------------------------------------|
| model                              | must be the endpoint's model name (404 otherwise)   |
| messages                           | system/developer/user/assistant/tool; text only     |
| tools, tool_choice ("auto")        | function tools, rendered in the model's tool format |
| parallel_tool_calls                | false: only a reply's first call is returned        |
| n, max_tokens/max_completion_tokens| samples; new tokens, capped by the endpoint's limit |
| temperature, top_p                 | must equal the run's (training needs the sampled    |
|                                    | distribution); leave them out to get the run's      |
| stop, seed, stream, stream_options | stop strings; the sampling seed; one-chunk streaming|
| logprobs (top_logprobs 0)          | each token's behaviour log-prob in the reply        |
| user, metadata, store: false       | accepted, they shape no output (OpenAI's bookkeeping)|
| presence/frequency_penalty: 0      | only 0 (no penalty) is accepted                     |

A message may carry `content` (a string or text parts), `tool_calls` (assistant),
`tool_call_id` (tool), and the null fields OpenAI's own reply objects hold
(refusal, audio, function_call, annotations), so an agent may send a reply back as is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flywheel.pipelines.agent.tool_format import FunctionTool


class WireError(Exception):
    """A refused request: its HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (status, message, param,
                                                                       code, kind)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


READ = {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "n", "max_tokens",
        "max_completion_tokens", "temperature", "top_p", "stop", "seed", "stream",
        "stream_options", "logprobs", "top_logprobs", "user", "metadata", "store",
        "presence_penalty", "frequency_penalty"}
# OpenAI fields this endpoint cannot honour: a 400 saying so, never silently dropped
NOT_SUPPORTED = {"logit_bias", "response_format", "functions", "function_call", "modalities",
                 "audio", "prediction", "reasoning_effort", "service_tier", "web_search_options",
                 "verbosity", "safety_identifier", "prompt_cache_key"}
MESSAGE_FIELDS = {"role", "content", "tool_calls", "tool_call_id", "refusal", "audio",
                  "function_call", "annotations", "name"}
ROLES = {"system", "developer", "user", "assistant", "tool"}
MAX_N = 16


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]  # checked: role, content (str), tool_calls, tool_call_id
    tools: list[FunctionTool] = field(default_factory=list)
    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    parallel_tool_calls: bool = True


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise WireError(400, f"the request body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise WireError(400, "the request body must be a JSON object")
    return body


def chat_request(body: dict[str, Any]) -> ChatRequest:
    for key in body:
        if key in NOT_SUPPORTED:
            raise WireError(400, f"'{key}' is not supported by flywheel's endpoint", key,
                            "unsupported_parameter")
        if key not in READ:
            raise WireError(400, f"Unrecognized request argument supplied: {key}", key,
                            "unknown_parameter")
    model = _typed(body, "model", str, required=True)
    messages = [_message(m, i) for i, m in enumerate(_typed(body, "messages", list,
                                                            required=True))]
    if not messages:
        raise WireError(400, "'messages' is empty", "messages")
    for key in ("presence_penalty", "frequency_penalty", "top_logprobs"):
        if body.get(key) not in (None, 0):
            raise WireError(400, f"'{key}' must be 0 or absent here", key,
                            "unsupported_value")
    if body.get("store") not in (None, False):
        raise WireError(400, "'store' must be false: the endpoint stores nothing", "store")
    choice = body.get("tool_choice")
    if choice not in (None, "auto"):
        raise WireError(400, "'tool_choice' must be \"auto\" (the model decides)",
                        "tool_choice", "unsupported_value")
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and (not isinstance(stop, list) or len(stop) > 4
                             or not all(isinstance(s, str) and s for s in stop)):
        raise WireError(400, "'stop' must be a string or a list of at most 4 strings", "stop")
    options = _typed(body, "stream_options", dict) or {}
    if set(options) - {"include_usage"}:
        raise WireError(400, "'stream_options' takes only include_usage", "stream_options")
    n = _typed(body, "n", int)
    if n is not None and not 1 <= n <= MAX_N:
        raise WireError(400, f"'n' must be 1..{MAX_N}", "n")
    most = _typed(body, "max_completion_tokens", int)
    most = most if most is not None else _typed(body, "max_tokens", int)
    if most is not None and most < 1:
        raise WireError(400, "'max_tokens' must be at least 1", "max_tokens")
    return ChatRequest(
        model=model, messages=messages, tools=_tools(body.get("tools")), n=n or 1,
        max_tokens=most, temperature=_number(body, "temperature"), top_p=_number(body, "top_p"),
        stop=list(stop or []), seed=_typed(body, "seed", int),
        stream=bool(_typed(body, "stream", bool)),
        include_usage=bool(options.get("include_usage")),
        logprobs=bool(_typed(body, "logprobs", bool)),
        parallel_tool_calls=_typed(body, "parallel_tool_calls", bool) is not False)


def _typed(body: dict[str, Any], key: str, kind: type, required: bool = False) -> Any:
    value = body.get(key)
    if value is None:
        if required:
            raise WireError(400, f"'{key}' is required", key, "missing_required_parameter")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(400, f"'{key}' must be {kind.__name__}", key, "invalid_type")
    return value


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(400, f"'{key}' must be a number", key, "invalid_type")
    return float(value)


def _text(content: Any, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise WireError(400, f"{where}: only text content parts are supported",
                                where, "unsupported_content")
            parts.append(part["text"])
        return "".join(parts)
    raise WireError(400, f"{where}: content must be a string or a list of parts", where)


def _message(message: Any, i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise WireError(400, f"{where} must be an object", where)
    unknown = set(message) - MESSAGE_FIELDS
    if unknown:
        raise WireError(400, f"{where}: unrecognized field {sorted(unknown)[0]}", where,
                        "unknown_parameter")
    for key in ("refusal", "audio", "function_call", "name"):
        if message.get(key) is not None:
            raise WireError(400, f"{where}: '{key}' is not supported (the chat template "
                            "cannot render it)", f"{where}.{key}", "unsupported_parameter")
    if message.get("annotations"):
        raise WireError(400, f"{where}: 'annotations' must be empty", f"{where}.annotations")
    role = message.get("role")
    if role not in ROLES:
        raise WireError(400, f"{where}: role must be one of {sorted(ROLES)}", f"{where}.role")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": _text(message.get("content"), f"{where}.content")}
    if role == "tool":
        if not isinstance(message.get("tool_call_id"), str) or out["content"] is None:
            raise WireError(400, f"{where}: a tool message needs tool_call_id and content",
                            where)
        out["tool_call_id"] = message["tool_call_id"]
    elif message.get("tool_call_id") is not None:
        raise WireError(400, f"{where}: tool_call_id belongs to a tool message", where)
    calls = message.get("tool_calls")
    if calls:
        if role != "assistant" or not isinstance(calls, list):
            raise WireError(400, f"{where}: tool_calls belong to an assistant message", where)
        out["tool_calls"] = [_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(calls)]
    elif out["content"] is None:
        raise WireError(400, f"{where}: content is required", f"{where}.content")
    return out


def _call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
            or not isinstance(function.get("arguments"), str):
        raise WireError(400, f"{where}: needs function.name and function.arguments (a JSON "
                        "string)", where)
    try:
        arguments = json.loads(function["arguments"])
    except json.JSONDecodeError:
        raise WireError(400, f"{where}: function.arguments is not JSON", where) from None
    if not isinstance(arguments, dict):
        raise WireError(400, f"{where}: function.arguments must be a JSON object", where)
    return {"id": call.get("id"), "type": "function",
            "function": {"name": function["name"], "arguments": function["arguments"]}}


def _tools(tools: Any) -> list[FunctionTool]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise WireError(400, "'tools' must be a list", "tools")
    out = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise WireError(400, f"tools[{i}] must be a function tool with a name",
                            f"tools[{i}]")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise WireError(400, f"tools[{i}].function.parameters must be an object",
                            f"tools[{i}]")
        out.append(FunctionTool(function["name"], str(function.get("description") or ""),
                                parameters))
    return out
