"""flywheel's OpenAI-compatible endpoint: `/v1/chat/completions` and `/v1/models` in front
of a TokenGenerator (generator.py: actor_infer in a run), for agents written against the
`openai` client.

Who may call: only this machine (the server binds 127.0.0.1 and refuses any other host),
and only with a live episode's key. `open_episode` makes a short-lived random key; a
request with no key, another key, or the key of an episode that has ended is refused with
401. Every refusal is an OpenAI error object with the right status (wire.py): 400 for a
malformed body or an unknown field, 404 for another model name, 413 for a body over
`max_body_bytes`, 429 (with `x-should-retry: false`, so the openai client does not retry)
when the episode has spent its calls or tokens, 500 when the engine failed. Nothing a
request holds reaches the server's own state except through these checks; a refusal
never ends the server.

What a call does: its messages are rendered in the model's chat template and tool format
(tool_format.py) into prompt ids, continuing the ids of an earlier reply where the agent
sent it back (token_ledger.py); the generator samples `n` completions; each is decoded,
cut at a stop string (OpenAI's replies end before the stop string; the ids keep it, as
sampled) and parsed into content and tool calls. The ledger records prompt ids, completion
ids, behaviour log-probs and the policy version: the rows training reads
(`Episode.ledger.calls`). Each reply also carries its ids beside OpenAI's fields
(`prompt_token_ids` on the completion, `token_ids` on each choice), as vLLM's server can.

Streaming (`stream: true`) sends each choice as one chunk once it is done, then the
finish chunk, the usage chunk when asked (`stream_options.include_usage`) and `[DONE]`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from flywheel.envs.chat_turns import ChatTurns
from flywheel.pipelines.agent.generator import TokenGenerator
from flywheel.pipelines.agent.token_ledger import TokenLedger
from flywheel.pipelines.agent.tool_format import ToolFormat, ToolFormatName
from flywheel.pipelines.agent.wire import ChatRequest, WireError, chat_request, parse_body
from flywheel.workers.strategies.base import Generation, SamplingParams

log = logging.getLogger(__name__)
NO_RETRY = {"x-should-retry": "false"}  # the openai client's retry switch


@dataclass(frozen=True)
class EndpointLimits:
    max_body_bytes: int = 4 << 20  # a request body past this is refused (413) unread
    max_tokens_per_call: int = 256  # new tokens a call may sample (its max_tokens is capped)
    max_calls: int = 16  # calls per episode
    max_episode_tokens: int = 4096  # new tokens an episode may sample over all its calls
    context_length: int | None = None  # prompt + new tokens the engine holds


@dataclass
class Episode:
    """One agent run: its key, its calls' ids, what it was refused."""

    name: str
    key: str
    ledger: TokenLedger
    seed: int
    counts: Counter = field(default_factory=Counter)  # calls, tokens, refusals by reason
    over_budget: str | None = None  # the first limit it hit, in words
    failed: str | None = None  # the engine failed on one of its calls
    ended: bool = False
    # its last call: the first choice's content (an answer's default under agent.reward:
    # rewards), and the request's messages with their tool format
    last_reply: str | None = None
    last_request: tuple[list[dict[str, Any]], ToolFormat] | None = None

    @property
    def last_messages(self) -> list[dict[str, Any]]:
        """The last call's messages as the model's template saw them (tool_format.py)."""
        if self.last_request is None:
            return []
        messages, fmt = self.last_request
        return fmt.messages_for_template(messages)


class AgentEndpoint:
    def __init__(self, generator: TokenGenerator, tokenizer: Any, model_name: str,
                 sampling: SamplingParams, limits: EndpointLimits = EndpointLimits(),
                 tool_format: ToolFormatName = "auto", fixed_sampling: bool = True) -> None:
        """`sampling`: the run's generating_args (temperature, top_p, top_k, seed base);
        `fixed_sampling`: a request's temperature / top_p must be the run's."""
        self.generator = generator
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.sampling = sampling
        self.limits = limits
        self.tool_format = tool_format
        self.fixed_sampling = fixed_sampling
        self.turns = ChatTurns(tokenizer)
        self.template_has_tools = "tools" in (tokenizer.chat_template or "")
        self.episodes: dict[str, Episode] = {}
        self.ended_keys: set[str] = set()
        self.refused: Counter = Counter()  # requests refused before an episode was known
        self.app = self._app()
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.base_url = ""

    # ---- episodes ---------------------------------------------------------------------
    def open_episode(self, name: str, seed: int) -> Episode:
        episode = Episode(name, "fw-" + secrets.token_urlsafe(24),
                          TokenLedger(self.tokenizer, self.turns), seed)
        self.episodes[episode.key] = episode
        return episode

    def close_episode(self, episode: Episode) -> None:
        episode.ended = True
        self.episodes.pop(episode.key, None)
        self.ended_keys.add(episode.key)

    # ---- the server -------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 30.0) -> str:
        """Serve on `host`:`port` (0: a free port) in a thread; the base URL (…/v1)."""
        if not is_loopback(host):
            raise ValueError(f"the agent endpoint binds only a loopback address, not {host!r}: "
                             "it serves unauthenticated model access to anyone who has a key")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.bind((host, port))
        sock.listen(64)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve([sock])),
                                       name="agent-endpoint", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the agent endpoint did not start on {host} within "
                                   f"{timeout_s:.0f} s")
            time.sleep(0.01)
        bound = sock.getsockname()
        self.base_url = f"http://{host if ':' not in host else f'[{host}]'}:{bound[1]}/v1"
        return self.base_url

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=10)
            self.server = self.thread = None

    # ---- requests ---------------------------------------------------------------------
    def _app(self) -> FastAPI:
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

        @app.get("/v1/models")
        async def models(request: Request) -> Response:
            try:
                self._episode(request)
            except WireError as error:
                return _error(error)
            return JSONResponse({"object": "list", "data": [
                {"id": self.model_name, "object": "model", "created": 0,
                 "owned_by": "flywheel"}]})

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            episode = None
            try:
                episode = self._episode(request)
                body = parse_body(await _read_capped(request, self.limits.max_body_bytes))
                req = chat_request(body)
                if req.model != self.model_name:
                    raise WireError(404, f"The model '{req.model}' does not exist; this "
                                    f"endpoint serves '{self.model_name}'", "model",
                                    "model_not_found")
                reply = await self._complete(episode, req)
            except WireError as error:
                counts = episode.counts if episode is not None else self.refused
                counts[f"refused_{error.status}"] += 1
                return _error(error)
            if req.stream:
                return StreamingResponse(_chunks(reply, req.include_usage),
                                         media_type="text/event-stream")
            return JSONResponse(reply)

        return app

    def _episode(self, request: Request) -> Episode:
        header = request.headers.get("authorization", "")
        key = header[7:] if header.lower().startswith("bearer ") else ""
        if key in self.ended_keys:
            raise WireError(401, "this key's episode has ended", code="invalid_api_key",
                            kind="authentication_error")
        episode = self.episodes.get(key)
        if episode is None:
            raise WireError(401, "Incorrect API key provided", code="invalid_api_key",
                            kind="authentication_error")
        return episode

    def _sampling(self, episode: Episode, req: ChatRequest) -> SamplingParams:
        base = self.sampling
        for name, asked, run in (("temperature", req.temperature, base.temperature),
                                 ("top_p", req.top_p, base.top_p)):
            if self.fixed_sampling and asked is not None and abs(asked - run) > 1e-9:
                raise WireError(400, f"this run samples at {name} {run} (training needs the "
                                f"distribution it sampled from); leave '{name}' out or send "
                                f"{run}", name, "unsupported_value")
        left = self.limits.max_episode_tokens - episode.counts["completion_tokens"]
        if episode.counts["calls"] >= self.limits.max_calls or left <= 0:
            episode.over_budget = episode.over_budget or (
                f"more than {self.limits.max_calls} calls" if left > 0
                else f"more than {self.limits.max_episode_tokens} tokens")
            raise WireError(429, f"this episode's budget is spent ({episode.over_budget})",
                            code="episode_budget_exhausted", kind="rate_limit_error")
        most = min(req.max_tokens or self.limits.max_tokens_per_call,
                   self.limits.max_tokens_per_call, left)
        seed = req.seed if req.seed is not None else (episode.seed * 1009
                                                      + episode.counts["calls"])
        return replace(base, max_new_tokens=most, n=req.n, seed=seed & 0x7FFFFFFF,
                       stop_strings=[*base.stop_strings, *req.stop],
                       temperature=req.temperature if req.temperature is not None
                       else base.temperature,
                       top_p=req.top_p if req.top_p is not None else base.top_p)

    async def _complete(self, episode: Episode, req: ChatRequest) -> dict[str, Any]:
        try:
            fmt = ToolFormat(self.tool_format, self.template_has_tools, req.tools)
        except ValueError as error:
            raise WireError(400, str(error), "tools") from None
        sampling = self._sampling(episode, req)
        try:
            prompt = episode.ledger.prompt(req.messages, fmt)
        except ValueError as error:  # a template that cannot be split at its contents
            raise WireError(400, f"cannot render these messages: {error}", "messages") from None
        limit = self.limits.context_length
        if limit is not None and len(prompt.ids) + sampling.max_new_tokens > limit:
            if len(prompt.ids) >= limit:
                raise WireError(400, f"the prompt is {len(prompt.ids)} tokens; this model's "
                                f"context is {limit}", "messages", "context_length_exceeded")
            sampling = replace(sampling, max_new_tokens=limit - len(prompt.ids))
        episode.counts["calls"] += 1
        try:
            version, generations = await self.generator.generate(prompt.ids, sampling)
        except Exception as error:  # noqa: BLE001 - the engine's failure, told to the agent
            episode.failed = episode.failed or f"{type(error).__name__}: {error}"
            log.warning("agent endpoint: generation failed for %s: %s", episode.name, error)
            raise WireError(500, "generation failed", code="engine_error",
                            kind="server_error") from None
        if episode.ended:  # the episode timed out while its call ran: nothing is recorded
            raise WireError(401, "this key's episode has ended", code="invalid_api_key",
                            kind="authentication_error")
        choices = [self._choice(episode, fmt, req, i, g) for i, g in enumerate(generations)]
        episode.ledger.record(req.messages, fmt, prompt, generations, version,
                              [c["message"] for c in choices])
        episode.last_reply = choices[0]["message"]["content"] if choices else None
        episode.last_request = (req.messages, fmt)
        done = sum(len(g.token_ids) for g in generations)
        episode.counts["completion_tokens"] += done
        episode.counts["prompt_tokens"] += len(prompt.ids)
        episode.counts["history_rewrites"] += int(prompt.rewrite)
        return {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion",
                "created": int(time.time()), "model": self.model_name, "choices": choices,
                "usage": {"prompt_tokens": len(prompt.ids), "completion_tokens": done,
                          "total_tokens": len(prompt.ids) + done},
                "prompt_token_ids": prompt.ids}

    def _choice(self, episode: Episode, fmt: ToolFormat, req: ChatRequest, index: int,
                generation: Generation) -> dict[str, Any]:
        text = self.tokenizer.decode(generation.token_ids, skip_special_tokens=True)
        cut = [text.find(s) for s in req.stop if s in text]
        if cut:  # OpenAI's reply ends before its stop string; the ids keep it as sampled
            text = text[:min(cut)]
        parsed = fmt.parse(text)
        episode.counts["malformed_calls"] += parsed.malformed
        calls = parsed.tool_calls if req.parallel_tool_calls else parsed.tool_calls[:1]
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content,
                                   "refusal": None}
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{secrets.token_hex(8)}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments,
                                                                    ensure_ascii=False)}}
                for name, arguments in calls]
        else:
            message["content"] = parsed.content or ""
        finish = ("tool_calls" if calls else
                  "length" if generation.finish_reason == "length" else "stop")
        choice = {"index": index, "message": message, "finish_reason": finish,
                  "logprobs": None, "token_ids": generation.token_ids}
        if req.logprobs:
            choice["logprobs"] = {"content": [
                {"token": self.tokenizer.decode([t]), "logprob": lp, "bytes": None,
                 "top_logprobs": []}
                for t, lp in zip(generation.token_ids, generation.log_probs)]}
        return choice


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name (even "localhost") is refused: it may resolve elsewhere


async def _read_capped(request: Request, cap: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise WireError(413, f"the request body is {declared} bytes; at most {cap}")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > cap:
            raise WireError(413, f"the request body is over {cap} bytes")
    return bytes(body)


def _error(error: WireError) -> JSONResponse:
    headers = NO_RETRY if error.status in (429, 500) else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


async def _chunks(reply: dict[str, Any], include_usage: bool):
    """A completed reply as chat.completion.chunk events: per choice its whole message,
    then its finish reason."""
    head = {k: reply[k] for k in ("id", "created", "model")}

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    for choice in reply["choices"]:
        message = choice["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": message["content"]}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": k, **call}
                                   for k, call in enumerate(message["tool_calls"])]
        yield event([{"index": choice["index"], "delta": delta, "logprobs": choice["logprobs"],
                      "finish_reason": None, "token_ids": choice["token_ids"]}])
        yield event([{"index": choice["index"], "delta": {}, "finish_reason":
                      choice["finish_reason"]}])
    if include_usage:
        yield event([], usage=reply["usage"])
    yield "data: [DONE]\n\n"
