"""The one thing the endpoint asks of generation: token ids in, sampled ids and log-probs out.

`TokenGenerator.generate(prompt_ids, sampling)` returns the policy version that sampled
and `sampling.n` Generations (workers/strategies/base.py). Two implementations:

- `InferRoleGenerator`: actor_infer's Ray workers, the run's engine. A request goes to
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


class InferRoleGenerator:
    """actor_infer (pipelines/roles/handles.py InferRole) behind the endpoint.

    `min_version`: a streaming call waits for weights of at least this version (the
    caller's latest published one), as the RLVR prefetch's calls do."""

    def __init__(self, actor_infer: Any, streams: bool, min_version: int = 0) -> None:
        self.pool = actor_infer
        self.streams = streams
        self.min_version = min_version
        self.busy = [0] * actor_infer.world_size  # requests in flight per worker

    async def generate(self, prompt_ids: list[int],
                       sampling: SamplingParams) -> tuple[int, list[Generation]]:
        rank = min(range(len(self.busy)), key=self.busy.__getitem__)
        self.busy[rank] += 1
        try:
            if self.streams:
                ref = self.pool.generate_stream(rank, [prompt_ids], sampling,
                                                min_version=self.min_version)
            else:
                ref = self.pool.generate(rank, [prompt_ids], sampling)
            result = await ref
        finally:
            self.busy[rank] -= 1
        return result.version, result.generations
