"""The one thing the endpoint asks of generation: token ids in, sampled ids and log-probs out.

`TokenGenerator.generate(prompt_ids, sampling)` returns the policy version that sampled
and `sampling.n` Generations (workers/strategies/base.py). Two implementations:

- `ActorsGenerator`: actor_infer's Ray workers, the run's engine. A request goes to
  the least busy worker as an ordinary `generate` call (or `generate_stream` on a
  streaming backend such as vllm, so it shares the engine's batch with every other
  request in flight); the actor's answer is awaited on the endpoint's event loop.
- `StrategyGenerator`: an InferStrategy in this process (hf_infer on the tiny model in
  the unit tests; an evaluation without Ray). Calls run one at a time in a worker
  thread, so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Protocol

from flywheel.workers.strategies.base import Generation, InferStrategy, SamplingParams


class TokenGenerator(Protocol):
    async def generate(self, prompt_ids: list[int],
                       sampling: SamplingParams) -> tuple[int, list[Generation]]: ...


class StrategyGenerator:
    def __init__(self, strategy: InferStrategy, version: int = 0) -> None:
        self.strategy = strategy
        self.version = version
        self.lock = threading.Lock()  # one generate at a time on the strategy

    async def generate(self, prompt_ids: list[int],
                       sampling: SamplingParams) -> tuple[int, list[Generation]]:
        def run() -> tuple[int, list[Generation]]:
            with self.lock:
                return self.version, self.strategy.generate([prompt_ids], sampling)
        return await asyncio.to_thread(run)


class ActorsGenerator:
    """actor_infer's workers (their Ray actor handles) behind the endpoint. A request
    goes to the worker with the fewest of this generator's requests in flight; on a
    streaming backend as `generate_stream` (weights of at least version 0: the prefetch
    sends a job only after pending weight updates landed, as for env workers)."""

    def __init__(self, actors: list[Any], streams: bool) -> None:
        self.actors = actors
        self.streams = streams
        self.busy = [0] * len(actors)  # requests in flight per worker

    async def generate(self, prompt_ids: list[int],
                       sampling: SamplingParams) -> tuple[int, list[Generation]]:
        rank = min(range(len(self.busy)), key=self.busy.__getitem__)
        self.busy[rank] += 1
        actor = self.actors[rank]
        try:
            ref = (actor.generate_stream.remote([prompt_ids], sampling, 0) if self.streams
                   else actor.generate.remote([prompt_ids], sampling))
            result = await ref
        finally:
            self.busy[rank] -= 1
        return result.version, result.generations
