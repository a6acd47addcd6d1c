"""Typed handles over the clusters of the roles: what a pipeline may ask each role, as methods.

`Cluster` (platform/cluster.py) fans calls out by method name; it knows nothing about
what a role does. These subclasses name the calls a pipeline makes, with their argument
and result types, so a misspelt method or a wrong argument fails where it is written,
and a reader sees a role's whole API in one place. Calls that run on the role while the
pipeline does other work return a `Pending`, whose `result()` gathers every rank (and
raises `WorkerError` naming role and rank, like every gather).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import ray
import torch

from flywheel.algorithms import MismatchCorrection
from flywheel.platform.cluster import Cluster
from flywheel.workers.batch import TokenBatch
from flywheel.workers.image_inputs import PromptImages
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.train_loop import Objective
from flywheel.workers.weight_broadcast import Backend, GroupAddress
from flywheel.workers.weight_shm import shared_memory_room
from flywheel.workers.weight_transfer import SyncedWeights

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Pending(Generic[T]):
    """Calls under way on every rank of `cluster`; `result()` waits for all of them."""

    cluster: Cluster
    refs: list[ray.ObjectRef]
    combine: Callable[[list], T]

    def result(self) -> T:
        return self.combine(self.cluster.gather(self.refs))


def _concat(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts)


class TrainRole(Cluster):
    """actor_train, reference or critic (workers/train_worker.py). Batches are sharded
    over the ranks in order; per-token results come back in the batch's row order."""

    def forward_logprobs(self, batch: TokenBatch) -> Pending[torch.Tensor]:
        return Pending(self, self.submit_scatter("forward_logprobs",
                                                 batch.shard(self.world_size)), _concat)

    def forward_base_logprobs(self, batch: TokenBatch) -> Pending[torch.Tensor]:
        """Log-probs with the LoRA adapter disabled (actor_train of a LoRA run)."""
        return Pending(self, self.submit_scatter("forward_base_logprobs",
                                                 batch.shard(self.world_size)), _concat)

    def forward_values(self, batch: TokenBatch) -> Pending[torch.Tensor]:
        return Pending(self, self.submit_scatter("forward_values",
                                                 batch.shard(self.world_size)), _concat)

    def train(self, batch: TokenBatch, objective: Objective, ppo_epochs: int,
              old_log_probs: MismatchCorrection | None = None
              ) -> Pending[list[dict[str, float]]]:
        """One train step; each rank's metrics. With `old_log_probs`, the ranks compute the
        old log-probs (and that mismatch correction) themselves first."""
        kwargs = {"old_log_probs": old_log_probs} if old_log_probs is not None else {}
        return Pending(self, self.submit_scatter(
            "train_step", batch.shard(self.world_size), loss_fn=objective,
            ppo_epochs=ppo_epochs, **kwargs), list)

    def share_weights_with(self, infer: InferRole, nbytes: int | None,
                           collective: Backend | None = None, timeout_s: float = 600.0,
                           carrier: str = "auto") -> str:
        """Syncs go over a collective group of rank 0 and every actor_infer worker when
        `collective` names its backend (workers/weight_broadcast.py; roles/roles.py decides),
        else through shared memory (workers/weight_shm.py) when rank 0 and every
        actor_infer worker share a node and /dev/shm has room for `nbytes` (the weights;
        None: unknown), else through the object store; which one, and why. `carrier`
        (weight_sync_carrier) object_store skips shared memory; shared_memory refuses to
        fall back."""
        if collective is not None:
            return self.broadcast_weights_to(infer, collective, timeout_s)
        if carrier == "object_store":
            return "object store (weight_sync_carrier: object_store)"
        node = self.get(self.submit_one(0, "node_id"), 0)
        readers = infer.call_all("node_id")
        why_not = ("actor_infer runs on another node than actor_train rank 0"
                   if any(other != node for other in readers)
                   else shared_memory_room(nbytes or 0))
        if why_not and carrier == "shared_memory":
            raise RuntimeError(f"weight_sync_carrier: shared_memory cannot be used here: "
                               f"{why_not}; use auto or object_store")
        if why_not:
            return f"object store ({why_not})"
        self.call_all("share_weights_in_memory", len(readers))
        return "shared memory (/dev/shm, reused every sync)"

    def broadcast_weights_to(self, infer: InferRole, backend: Backend, timeout_s: float
                             ) -> str:
        """Rank 0 and every actor_infer worker form the group at once (a TCP rendezvous
        on rank 0's node, waiting at most `timeout_s`); the other ranks only learn that
        syncs now run while actor_infer receives them."""
        host, port = self.get(self.submit_one(0, "master_address"), 0)
        address = GroupAddress(host, port, 1 + infer.world_size, backend, timeout_s)
        joining = infer.submit_all("join_weight_group", address)
        self.call_all("join_weight_group", address)
        infer.gather(joining)
        return (f"collective ({backend}: actor_train rank 0 broadcasts to "
                f"{infer.world_size} actor_infer worker(s), bucket by bucket)")

    def stop_sharing_weights(self) -> None:
        """Rank 0 removes its shared-memory files (at shutdown: a worker that does not
        answer within seconds leaves them to the next writer's sweep)."""
        self.gather(self.submit_all("stop_sharing_weights"), timeout_s=5)

    def weights(self) -> Pending[SyncedWeights]:
        """The full weights, written once by rank 0 (every rank takes part: gathering
        sharded weights is a collective); a handle actor_infer reads them through."""
        return Pending(self, self.submit_all("weights_ref"), lambda parts: parts[0])

    def offload(self, part: str) -> list[str]:
        """`part` (strategies/offload.py) off every rank's device; each rank's note."""
        return self.call_all("offload", part)

    def onload(self) -> list[str]:
        return self.call_all("onload")

    def phase_events(self) -> list[list[tuple[str, float, str]]]:
        """Each rank's recorded phase switches and the calls around them (role_worker.py)."""
        return self.call_all("phase_events")

    def save(self, path: str) -> None:
        self.call_all("save", path)

    def load(self, path: str) -> None:
        self.call_all("load", path)

    def save_synced_weights(self, weights: SyncedWeights, path: str) -> None:
        """Weights `weights()` gave earlier, written to `path` (by rank 0)."""
        self.get(self.submit_one(0, "save_synced_weights", weights, path), 0)

    def synced_weights(self, path: str) -> SyncedWeights:
        """`save_synced_weights`' weights, as `weights()` gives them."""
        return self.get(self.submit_one(0, "synced_weights_ref", path), 0)


class RewardRole(Cluster):
    """rewards.<name> (workers/reward_worker.py): scores samples (prompt, response,
    reference, record)."""

    def score(self, rank: int, items: list[Sample]) -> ray.ObjectRef:
        """A ref to rank `rank`'s list of RewardResult, one per item, in order."""
        return self.submit_one(rank, "score", items)

    def progress(self, rank: int, wait_s: float) -> tuple[int, str] | None:
        """Cluster's, after writing to the console each notice the worker has not said yet
        (its first timeout: workers/reward_worker.py), while `get` waits for a score."""
        answer = super().progress(rank, wait_s)
        if answer is None or len(answer) < 3:
            return answer
        said = self.__dict__.setdefault("notices_said", {})
        for text in answer[2][said.get(rank, 0):]:
            log.warning("%s%s: %s", self.role, f" rank {rank}" if self.world_size > 1 else "",
                        text)
        said[rank] = len(answer[2])
        return answer[0], answer[1]


class EnvRole(Cluster):
    """The agentic env workers (workers/env_worker.py): each plays whole episode jobs."""

    def play(self, rank: int, job: object) -> ray.ObjectRef:
        """A ref to rank `rank`'s EnvJobResult for `job` (an agentic_rollout.EnvJob)."""
        return self.submit_one(rank, "play", job)


class InferRole(Cluster):
    """actor_infer (workers/infer_worker.py): one generation call per rank at a time, or
    many at once with `generate_stream` on a backend that streams."""

    def generate(self, rank: int, prompts: list[list[int]], sampling: SamplingParams,
                 images: list[PromptImages | None] | None = None) -> ray.ObjectRef:
        """A ref to rank `rank`'s list of Generation; read it with `get(ref, rank)`.
        `images`: per prompt its image inputs (image prompts), or None."""
        if images is None:
            return self.submit_one(rank, "generate", prompts, sampling)
        return self.submit_one(rank, "generate", prompts, sampling, images)

    def generate_stream(self, rank: int, prompts: list[list[int]], sampling: SamplingParams,
                        min_version: int,
                        images: list[PromptImages | None] | None = None) -> ray.ObjectRef:
        """`generate` beside the rank's other calls in one engine batch, on weights of at
        least `min_version` (a streaming backend: workers/infer_worker.py)."""
        if images is None:
            return self.submit_one(rank, "generate_stream", prompts, sampling, min_version)
        return self.submit_one(rank, "generate_stream", prompts, sampling, min_version, images)

    def stream_capacity(self) -> int:
        """Sequences each rank's engine decodes at once; 0 when the backend does not
        stream (every rank runs the same backend)."""
        return min(self.call_all("stream_capacity"))

    def update_weights(self, weights: SyncedWeights, version: int) -> list[ray.ObjectRef]:
        return self.submit_all("update_weights", weights, version)

    def sleep(self) -> list[str]:
        """Every rank's engine frees its device memory (loop/phase_switch.py); their notes."""
        return self.call_all("sleep")

    def wake(self) -> list[str]:
        return self.call_all("wake")

    def phase_events(self) -> list[list[tuple[str, float, str]]]:
        return self.call_all("phase_events")
