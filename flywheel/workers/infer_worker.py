"""actor_infer: generation on an InferStrategy, plus in-place weight updates.

The pipeline owns policy versions; the worker keeps only the version of the weights it
holds, so every result says which policy produced it, and when it ran (for overlap and
idle-time metrics).

`is_num_return_sequences_expand` acts here, for every backend alike: a request with
`sampling.expand` is sent as n copies of each prompt with n=1, and the answers are folded
back to n samples per prompt (same distribution, another request layout).
`context_length` (prompt + response tokens the engine must hold; the pipeline derives it
from prompt_length/response_length or sequence_length) reaches the backend when given.

A backend that `streams` (vllm: its engine runs in a thread of its own) also serves
`generate_stream`: many calls at once, from a concurrency group of their own, all decoded
in the engine's one batch, each answered when its own requests finish. The prefetch
generator sends one such call per prompt group, so every group is scored the moment its
samples are done. `min_version` orders a call after the weight update its caller sent
before it (calls in different concurrency groups are not run in submission order).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import ray
import torch

from flywheel.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.image_inputs import PromptImages
from flywheel.workers.role_worker import RoleWorker
from flywheel.workers.strategies.base import Generation, SamplingParams
from flywheel.workers.strategies.frozen_modules import prefixes_of
from flywheel.workers.strategies.registry import strategy_class
from flywheel.workers.weight_broadcast import GroupAddress, WeightGroup
from flywheel.workers.weight_transfer import SyncedWeights, finished_reading, received_buckets

STREAM_GROUP = "stream"
# generate_stream calls one worker holds at once (threads of its concurrency group); the
# pipeline keeps within it (pipelines/rlvr/rollout.py).
STREAM_CALLS = 64


@dataclass
class GenerateResult:
    version: int  # weights version that produced every token of these generations
    generations: list[Generation]
    started: float  # wall clock (time.time) on the worker, for idle/overlap accounting
    finished: float


class InferWorker(RoleWorker):
    CONCURRENCY_GROUPS = {STREAM_GROUP: STREAM_CALLS}  # declared by Cluster.create

    def __init__(self, role: str, rank: int, world_size: int, model_path: str,
                 cfg: WorkerConfig, seed: int, num_threads: int | None = None,
                 cpu_affinity: list[int] | None = None, context_length: int | None = None,
                 sleep_mode: bool = False, in_flight_updates: bool = False,
                 lora_adapter: tuple[int, float] | None = None, log_path: str | None = None,
                 unsynced_prefix: str | None = None):
        super().__init__(role, rank, world_size, num_threads, cpu_affinity, log_path)
        cls = strategy_class(cfg.strategy_args.strategy_name)
        extra = {"context_length": context_length} if context_length is not None else {}
        if sleep_mode:  # a colocated run: the engine must be able to sleep (loop/phase_switch.py)
            extra["sleep_mode"] = True
        if in_flight_updates:  # partial rollout on a streaming engine (vllm_engine_loop.py)
            extra["in_flight_updates"] = True
        if lora_adapter:  # (rank, alpha) of the adapter vllm serves (vllm_adapters.py)
            from flywheel.workers.strategies.vllm_adapters import AdapterSpec
            extra["lora_adapter"] = AdapterSpec(*lora_adapter)
        self.strategy = cls(model_path, cfg, seed=seed, **extra)
        # actor_train's freeze_module_prefix: what its weight syncs leave out
        self.strategy.unsynced = tuple(prefixes_of(unsynced_prefix))
        self.version = 0
        self.awake = True  # False between `sleep` and `wake`: no call may use the engine
        self.weight_group: WeightGroup | None = None  # join_weight_group

    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 images: list[PromptImages | None] | None = None) -> GenerateResult:
        """`images`: per prompt its image inputs (image prompts, issue 29), or None."""
        self.require_awake("generate")
        return self._generate(prompts, sampling, min_version=0, images=images)

    @ray.method(concurrency_group=STREAM_GROUP)
    def generate_stream(self, prompts: list[list[int]], sampling: SamplingParams,
                        min_version: int,
                        images: list[PromptImages | None] | None = None) -> GenerateResult:
        """`generate` beside other calls on the same engine, on weights of at least
        `min_version`; only for a backend that `streams`."""
        if not self.streams():
            raise RuntimeError(f"{self.role}: {type(self.strategy).__name__} does not "
                               "stream; call generate")
        self.require_awake("generate_stream")
        return self._generate(prompts, sampling, min_version, images)

    def streams(self) -> bool:
        return getattr(self.strategy, "streams", False)

    def stream_capacity(self) -> int:
        """Sequences the engine decodes at once (0: it does not stream)."""
        return self.strategy.capacity if self.streams() else 0

    def _generate(self, prompts: list[list[int]], sampling: SamplingParams,
                  min_version: int,
                  images: list[PromptImages | None] | None = None) -> GenerateResult:
        started = time.time()
        fold = sampling.n if sampling.expand and sampling.n > 1 else 1
        if fold > 1:
            prompts = [p for p in prompts for _ in range(fold)]
            images = [i for i in images for _ in range(fold)] if images is not None else None
            sampling = replace(sampling, n=1, continued=[c for c in sampling.continued
                                                          for _ in range(fold)])
        # a text request passes no images: backends without image support take it as before
        extra = {"images": images} if images is not None else {}
        if self.streams():  # busy from when the engine took it (not while it waited)
            version, started, generations = self.strategy.generate_versioned(
                prompts, sampling, min_version, **extra)
        else:
            version, generations = self.version, self.strategy.generate(prompts, sampling,
                                                                        **extra)
        if fold > 1:
            generations = [replace(g, prompt_index=g.prompt_index // fold)
                           for g in generations]
        return GenerateResult(version, generations, started, time.time())

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

    # ---- the phase switch of a colocated run (pipelines/loop/phase_switch.py) --------------
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
