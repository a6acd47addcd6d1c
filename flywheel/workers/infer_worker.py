"""actor_infer: generation on an InferStrategy, plus in-place weight updates.

The pipeline owns policy versions; the worker keeps only the version of the weights it
holds, so every result says which policy produced it, and when it ran (for overlap and
idle-time metrics).

`is_num_return_sequences_expand` acts here, for every backend alike: a request with
`sampling.expand` is sent as n copies of each prompt with n=1, and the answers are folded
back to n samples per prompt (same distribution, another request layout).
`context_length` (prompt + response tokens the engine must hold; the pipeline derives it
from prompt_length/response_length or sequence_length) reaches the backend when given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from flywheel.platform.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.role_worker import RoleWorker
from flywheel.workers.strategies.base import Generation, SamplingParams
from flywheel.workers.strategies.registry import strategy_class
from flywheel.workers.weight_broadcast import GroupAddress, WeightGroup
from flywheel.workers.weight_transfer import SyncedWeights, finished_reading, received_buckets


@dataclass
class GenerateResult:
    version: int  # weights version that produced every token of these generations
    generations: list[Generation]
    started: float  # wall clock (time.time) on the worker, for idle/overlap accounting
    finished: float


class InferWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, model_path: str,
                 cfg: WorkerConfig, seed: int, num_threads: int | None = None,
                 cpu_affinity: list[int] | None = None, context_length: int | None = None,
                 sleep_mode: bool = False):
        super().__init__(role, rank, world_size, num_threads, cpu_affinity)
        cls = strategy_class(cfg.strategy_args.strategy_name)
        extra = {"context_length": context_length} if context_length is not None else {}
        if sleep_mode:  # a colocated run: the engine must be able to sleep (phase_switch.py)
            extra["sleep_mode"] = True
        self.strategy = cls(model_path, cfg, seed=seed, **extra)
        self.version = 0
        self.awake = True  # False between `sleep` and `wake`: no call may use the engine
        self.weight_group: WeightGroup | None = None  # join_weight_group

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> GenerateResult:
        self.require_awake("generate")
        started = time.time()
        if sampling.expand and sampling.n > 1:
            copies = [p for p in prompts for _ in range(sampling.n)]
            generations = [replace(g, prompt_index=g.prompt_index // sampling.n) for g in
                           self.strategy.generate(copies, replace(sampling, n=1))]
        else:
            generations = self.strategy.generate(prompts, sampling)
        return GenerateResult(self.version, generations, started, time.time())

    def update_weights(self, weights: SyncedWeights, version: int) -> tuple[float, float]:
        """actor_train's weights (weight_transfer.py), bucket by bucket, each read when the
        engine is ready for it and loaded in place; when it began and ended (wall clock:
        the pipeline's time/weight_load)."""
        self.require_awake("update_weights")
        started = time.time()
        self.strategy.update_weights_from_buckets(received_buckets(weights, self.weight_group),
                                                  version)
        finished_reading(weights, self.rank)
        self.version = version
        return started, time.time()

    def join_weight_group(self, address: GroupAddress) -> None:
        """Receive syncs over a collective group with actor_train rank 0 (group rank 0;
        this worker is 1 + its rank): weight_broadcast.py."""
        self.weight_group = WeightGroup(address, 1 + self.rank, f"{self.role} rank {self.rank}")

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        self.require_awake("forward_logprobs")
        return self.strategy.forward_logprobs(batch)

    # ---- the phase switch of a colocated run (pipelines/phase_switch.py) --------------
    def sleep(self) -> str:
        """Free the engine's device memory for training; a second call does nothing."""
        note = self.strategy.sleep() if self.awake else "already asleep"
        self.awake = False
        self.record("sleep", note)
        return note

    def wake(self) -> str:
        note = self.strategy.wake() if not self.awake else "already awake"
        self.awake = True
        self.record("wake", note)
        return note

    def require_awake(self, call: str) -> None:
        """Record `call`; on a sleeping engine it is a phase-switch ordering bug: say so."""
        if not self.awake:
            raise RuntimeError(f"{self.role} rank {self.rank}: {call} while the engine "
                               "sleeps (phase switch out of order)")
        self.record(call)
