"""One thread that owns vLLM's engine, fed by many callers at once.

Why: continuous batching pays only when the engine holds many sequences. Blocking
`LLM.generate` calls run one after another, each decoding only its own requests, and the
longest response of a call holds everyone else's slot until it ends. Here every caller
(the worker's concurrent `generate_stream` calls, a weight update, a log-prob pass, sleep
and wake) hands the engine thread a command; the thread adds requests as they come, steps
the engine while any are unfinished, and hands each call its responses the moment its own
requests finish. vLLM's engine is touched from this one thread only (it is not
thread-safe).

Weight updates come in two kinds (`update`):
- drained (the default): requests not yet started wait, running ones finish on the weights
  that started them, then the new weights load and the waiting requests start on them.
  Every token of a response comes from one version.
- in flight (partial rollout on vllm): the new weights load between two engine steps. The
  running requests keep their KV cache, computed by the old weights, and continue decoding
  on the new ones, with no re-prefill. Each token records the version that sampled it.
  This is the in-flight update of PipelineRL (Piché et al., 2025), the continuation of
  Kimi k1.5's partial rollouts (arXiv 2501.12599, sec. 2.6.2) without segments.

With LoRA adapters served per version (vllm_adapters.py, `adapters` set) an update loads
a new adapter instead of new weights. A request is bound to its adapter for its lifetime,
so an in-flight update leaves running requests on the adapter they started with: their
tokens record their start version.

The prefix cache: every request carries a `cache_salt` naming the weights version it
started on, so a new request never reuses KV blocks that older weights computed (an
in-flight update cannot reset the cache while requests hold blocks).

Ordering against updates: a call may name `min_version`, the newest update its caller
sent before it; it is not started before that update is loaded, whichever of the two
reaches this thread first.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import vllm
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind

from flywheel.platform.liveness import tick
from flywheel.workers.strategies.vllm_adapters import AdapterVersions


@dataclass
class Sample:
    """One response as it grows: tokens, their log-probs and the versions that sampled them."""

    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass
class _Call:
    """One caller's requests (prompt, sampling params), answered together."""

    requests: list[tuple[list[int], vllm.SamplingParams]]
    min_version: int
    future: Future
    samples: list[list[Sample]] = field(default_factory=list)  # per request, per sample
    version: int = -1  # the weights it started on
    started: float = 0.0  # when it started (wall clock), after any wait for its version
    unfinished: int = 0
    lora_id: int | None = None  # the adapter it runs on (adapters served per version)
    # per request, vLLM's multi_modal_data ({"image": [PIL images]}) or None: an image
    # prompt's ids are then its engine ids, one placeholder per image (image_inputs.py)
    media: list[dict | None] = field(default_factory=list)


@dataclass
class _Update:
    load: Callable[[], None]  # loads the new weights into the engine (engine thread)
    version: int
    in_flight: bool
    future: Future


@dataclass
class _Job:
    """Anything else that needs the engine to itself (no request in it)."""

    run: Callable[[], Any]
    future: Future


class EngineLoop:
    def __init__(self, llm: vllm.LLM, name: str = "vllm",
                 adapters: AdapterVersions | None = None):
        self.llm = llm
        self.adapters = adapters
        self.engine = llm.llm_engine
        self.multimodal = llm.llm_engine.model_config.is_multimodal_model
        self.name = name
        self.version = 0
        self._cond = threading.Condition()
        self._inbox: deque = deque()  # commands from callers, in arrival order
        self._queue: deque = deque()  # commands taken in, not started yet (engine thread)
        self._parked: list[_Call] = []  # calls waiting for a newer version
        self._running: dict[str, tuple[_Call, int]] = {}  # request id -> call, its index
        self._ids = itertools.count()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"{name}-engine", daemon=True)
        self._thread.start()

    # ---- callers' side (any thread) ----------------------------------------------------
    def generate(self, requests: list[tuple[list[int], vllm.SamplingParams]],
                 min_version: int = 0, media: list[dict | None] | None = None
                 ) -> tuple[int, float, list[list[Sample]]]:
        """Run the requests; (the version they started on, when they started, per request
        its samples in sample order). Blocks until every one of them finished."""
        call = _Call(requests, min_version, Future(), media=media or [])
        self._send(call)
        call.future.result()
        return call.version, call.started, call.samples

    def update(self, load: Callable[[], None], version: int, in_flight: bool) -> None:
        """Load new weights with `load` (run on the engine thread); returns once loaded."""
        update = _Update(load, version, in_flight, Future())
        self._send(update)
        update.future.result()

    def exclusive(self, run: Callable[[], Any]) -> Any:
        """`run()` on the engine thread once no request is in the engine; its result."""
        job = _Job(run, Future())
        self._send(job)
        return job.future.result()

    def _send(self, command: Any) -> None:
        with self._cond:
            if self._error is not None:
                raise RuntimeError(f"{self.name} engine failed earlier: {self._error}")
            self._inbox.append(command)
            self._cond.notify()

    # ---- engine thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._inbox and not self._busy():
                        self._cond.wait()
                    self._queue.extend(self._inbox)
                    self._inbox.clear()
                self._start_commands()
                if self.engine.has_unfinished_requests():
                    self._step()
        except BaseException as e:  # every waiting caller hears of it, and later ones too
            with self._cond:
                self._error = e
                pending = [*self._inbox, *self._queue, *self._parked,
                           *{id(c): c for c, _ in self._running.values()}.values()]
                self._inbox.clear()
            for command in pending:
                if not command.future.done():
                    command.future.set_exception(
                        RuntimeError(f"{self.name} engine failed: {type(e).__name__}: {e}"))

    def _busy(self) -> bool:
        """Work this thread can do without a new command."""
        return self.engine.has_unfinished_requests() or (bool(self._queue) and self._ready())

    def _ready(self) -> bool:
        """Whether the first queued command can start now."""
        head = self._queue[0]
        if isinstance(head, _Call):
            return True  # started now, or parked until its version loads
        if isinstance(head, _Update) and head.in_flight:
            return True
        return not self.engine.has_unfinished_requests()  # drained first

    def _start_commands(self) -> None:
        """Start queued commands in order, up to one that must wait for the engine to
        drain (a drained update, an exclusive job)."""
        while self._queue and self._ready():
            command = self._queue.popleft()
            if isinstance(command, _Call):
                self._admit(command)
            elif isinstance(command, _Update):
                self._load(command)
            else:
                self._finish(command.future, command.run)

    def _admit(self, call: _Call) -> None:
        if call.min_version > self.version:
            self._parked.append(call)
            return
        call.version, call.started = self.version, time.time()
        lora = self.adapters.current if self.adapters else None
        call.lora_id = lora.lora_int_id if lora else None
        call.unfinished = len(call.requests)
        call.samples = [[Sample() for _ in range(params.n)] for _, params in call.requests]
        if not call.requests:
            call.future.set_result(None)
        added = []
        try:
            for index, (prompt, params) in enumerate(call.requests):
                params = params.clone()
                params.output_kind = RequestOutputKind.DELTA
                tokens = TokensPrompt(prompt_token_ids=prompt, cache_salt=f"w{self.version}")
                if call.media and call.media[index]:  # vLLM hashes the images into the
                    tokens["multi_modal_data"] = call.media[index]  # prefix-cache key
                (request,) = self.engine.renderer.render_cmpl([tokens])
                rid = f"r{next(self._ids)}"  # outputs carry it; add_request returns
                internal = self.engine.add_request(  # returns a suffixed id
                    rid, request, params, lora_request=lora)
                added.append((rid, internal))
                self._running[rid] = (call, index)
        except Exception as e:  # a request the engine refuses fails its call, not the loop
            self.engine.abort_request([internal for _, internal in added], internal=True)
            for rid, _ in added:
                del self._running[rid]
            call.future.set_exception(e)

    def _load(self, update: _Update) -> None:
        def load() -> None:
            update.load()
            self.version = update.version
            if self.adapters:
                self.adapters.prune(self.engine, {c.lora_id for c, _ in self._running.values()})
            if not self.engine.has_unfinished_requests():
                self.engine.reset_prefix_cache()  # the salt keeps old blocks apart anyway
            if self.multimodal:
                # image prompts: encoder outputs (vision tower + projector) cached by image
                # hash were computed by the old weights; and vLLM 0.32's in-place reload
                # leaves the worker's encoder cache and the scheduler's record of it
                # disagreeing ("Encoder cache miss" on the next request with a seen image),
                # so both are reset together here
                self.engine.reset_encoder_cache()
        self._finish(update.future, load)
        parked, self._parked = self._parked, []
        for call in parked:
            self._admit(call)

    @staticmethod
    def _finish(future: Future, run: Callable[[], Any]) -> None:
        try:
            future.set_result(run())
        except Exception as e:  # the caller raises it; the engine goes on
            future.set_exception(e)

    def _step(self) -> None:
        for out in self.engine.step():
            call, index = self._running.get(out.request_id, (None, 0))
            if call is None:
                continue
            for piece in out.outputs:
                sample = call.samples[index][piece.index]
                new = list(piece.token_ids)
                sample.token_ids += new
                sample.log_probs += [step[tok].logprob
                                     for step, tok in zip(piece.logprobs or [], new)]
                # an adapter stays with its request: every token is of its start version
                sample.versions += [call.version if self.adapters else self.version] * len(new)
                if piece.finish_reason is not None:
                    sample.finish_reason = piece.finish_reason
            if out.finished:
                del self._running[out.request_id]
                call.unfinished -= 1
                if call.unfinished == 0:
                    call.future.set_result(None)
        tick()  # liveness: the engine got somewhere (platform/liveness.py)
