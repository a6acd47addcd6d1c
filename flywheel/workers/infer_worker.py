"""actor_infer: generation on an InferStrategy, plus in-place weight updates.

The pipeline owns policy versions; the worker keeps only the version of the weights it
holds, so every result says which policy produced it, and when it ran (for overlap and
idle-time metrics).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import ray
import torch

from flywheel.platform.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.role_worker import RoleWorker
from flywheel.workers.strategies.base import Generation, SamplingParams
from flywheel.workers.strategies.registry import strategy_class


@dataclass
class GenerateResult:
    version: int  # weights version that produced every token of these generations
    generations: list[Generation]
    started: float  # wall clock (time.time) on the worker, for idle/overlap accounting
    finished: float


class InferWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, model_path: str,
                 cfg: WorkerConfig, seed: int, num_threads: int | None = None,
                 cpu_affinity: list[int] | None = None):
        super().__init__(role, rank, world_size, num_threads, cpu_affinity)
        cls = strategy_class(cfg.strategy_args.strategy_name)
        self.strategy = cls(model_path, cfg, seed=seed)
        self.version = 0

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> GenerateResult:
        started = time.time()
        generations = self.strategy.generate(prompts, sampling)
        return GenerateResult(self.version, generations, started, time.time())

    def update_weights(self, weights: list[ray.ObjectRef], version: int) -> None:
        self.strategy.update_weights(ray.get(weights[0]), version)
        self.version = version

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return self.strategy.forward_logprobs(batch)
