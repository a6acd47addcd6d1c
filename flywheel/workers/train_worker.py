"""The training-side roles: actor_train and critic (train), reference (forward only).

A thin Ray-facing shell over a TrainStrategy: the pipeline decides what to compute, the
strategy how. The roles differ by the model head (`model_head.py`: the policy's log-probs
for actor_train and the reference, values for the critic), by whether an optimizer is
built (the reference has none) and by the objective the pipeline hands `train_step`; the
update loop is the same one (`strategies/train_loop.py`). Weights for actor_infer are
put into Ray's object store once per sync so every inference worker reads the same copy.

Backends whose ranks form one torch.distributed group (registry `process_group`:
deepspeed_train, megatron_train) are built in two phases, because every rank needs rank
0's address and a free port on rank 0's node before the group can form: the cluster asks
rank 0 for `master_address()`, then calls `init_process_group(addr, port)` on every rank
at once, which exports the torch.distributed variables and builds the strategy. Other
backends are built in the constructor.
"""

from __future__ import annotations

import functools
import os
import socket
import time

import ray
import torch

from flywheel.algorithms import MismatchCorrection
from flywheel.config.schema import PipelineConfig, WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.role_worker import RoleWorker
from flywheel.workers.strategies.base import TrainStrategy
from flywheel.workers.strategies.fused_old_logprobs import FusedOldLogProbs
from flywheel.workers.strategies.model_head import POLICY, ModelHead
from flywheel.workers.strategies.offload import MODEL
from flywheel.workers.strategies.registry import strategy_class, strategy_spec
from flywheel.workers.strategies.train_loop import Objective
from flywheel.workers.weight_broadcast import (
    BroadcastWeights,
    GroupAddress,
    SendInFlight,
    WeightGroup,
    send,
)
from flywheel.workers.weight_buckets import put_weights
from flywheel.workers.weight_shm import SharedWeightWriter
from flywheel.workers.weight_transfer import SyncedWeights, copied_weights

SYNCED_WEIGHTS_FILE = "weights.pt"  # save_synced_weights


class TrainWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, model_path: str,
                 cfg: WorkerConfig, seed: int, total_steps: int, trainable: bool,
                 num_threads: int | None = None,
                 cpu_affinity: list[int] | None = None, head: ModelHead = POLICY,
                 weight_sync_bucket_mb: int = PipelineConfig.weight_sync_bucket_mb,
                 log_path: str | None = None, schedule_per_train_step: bool = False):
        super().__init__(role, rank, world_size, num_threads, cpu_affinity, log_path)
        self.weight_sync_bucket_mb = weight_sync_bucket_mb
        self.shared_writer: SharedWeightWriter | None = None  # share_weights_in_memory
        self.broadcasts_weights = False  # join_weight_group, on every rank
        self.weight_group: WeightGroup | None = None  # join_weight_group (rank 0)
        self.syncs_sent = 0  # over the weight group
        self.sending = SendInFlight(f"{role} rank {rank}")  # a sync over the group, or none
        name = cfg.strategy_args.strategy_name
        built = functools.partial(strategy_class(name), model_path, cfg, seed=seed,
                                  total_steps=total_steps, trainable=trainable, head=head)

        def build() -> TrainStrategy:
            strategy = built()
            # `total_steps` counts train steps (roles.py schedule_per_train_step)
            strategy.schedule_per_train_step = schedule_per_train_step
            return strategy

        self.build = build
        self._strategy: TrainStrategy | None = None
        self.offloaded: set[str] = set()  # offload.PARTS moved off the device (phase switch)
        if not strategy_spec(name).process_group:
            self._strategy = self.build()

    @property
    def strategy(self) -> TrainStrategy:
        if self._strategy is None:
            raise RuntimeError(f"{self.role} rank {self.rank}: its backend is built by "
                               "init_process_group(), which was not called")
        return self._strategy

    def master_address(self) -> tuple[str, int]:
        """This node's address and a free port: rank 0's rendezvous for every rank."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def init_process_group(self, master_addr: str, master_port: int) -> None:
        """Join the role's torch.distributed group, then build the strategy (phase two).

        LOCAL_RANK is 0: Ray hands each worker only its own device(s).
        """
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port),
                          RANK=str(self.rank), WORLD_SIZE=str(self.world_size),
                          LOCAL_RANK="0")
        self._strategy = self.build()

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        self.require_onloaded("forward_logprobs", "all")
        return self.strategy.forward_logprobs(batch)

    def forward_base_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """actor_train's log-probs with its LoRA adapter disabled: the reference's."""
        self.require_onloaded("forward_base_logprobs", "all")
        return self.strategy.forward_base_logprobs(batch)

    def forward_values(self, batch: TokenBatch) -> torch.Tensor:
        """The critic's V(s_t) [B, L] (critic role only)."""
        return self.strategy.forward_values(batch)

    def train_step(self, batch: TokenBatch, loss_fn: Objective, ppo_epochs: int,
                   old_log_probs: MismatchCorrection | None = None) -> dict:
        """One optimizer pass over the batch.

        With `old_log_probs`, the batch arrives without them: they are computed here first,
        from the weights before this update, exactly as forward_logprobs would, followed by
        the train/infer mismatch correction. The pipeline asks for this when nothing on
        its side needs the old log-probs before training; it saves a second trip of the
        batch and a round trip on the training path. When the step is one optimizer step
        on a backend that allows it, they are taken from the training forwards instead of
        a separate pass (strategies/fused_old_logprobs.py); `actor/old_logprobs_fused`
        says which, and `time/actor_old_logprobs` times a separate pass.
        """
        self.require_onloaded("train_step", "all")
        metrics = {}
        if old_log_probs is not None and self.strategy.fuses_old_logprobs(len(batch),
                                                                          ppo_epochs):
            fused = FusedOldLogProbs(loss_fn, old_log_probs)
            metrics = self.strategy.train_step(batch, fused, ppo_epochs)
            return fused.metrics() | {"actor/old_logprobs_fused": 1.0} | metrics
        if old_log_probs is not None:
            start = time.perf_counter()
            batch.old_log_probs = self.strategy.forward_logprobs(batch)
            seconds = time.perf_counter() - start
            batch.is_weights, metrics = old_log_probs(batch.old_log_probs,
                                                      batch.infer_log_probs, batch.response_mask)
            metrics["actor/old_logprobs_fused"] = 0.0
            metrics["time/actor_old_logprobs"] = seconds
        return metrics | self.strategy.train_step(batch, loss_fn, ppo_epochs)

    def share_weights_in_memory(self, readers: int) -> None:
        """From now on rank 0 writes each sync into shared memory read by `readers`
        actor_infer workers on this node (weight_shm.py), not into the object store."""
        if self.rank == 0:
            self.shared_writer = SharedWeightWriter(readers, self.weight_sync_bucket_mb << 20)

    def join_weight_group(self, address: GroupAddress) -> None:
        """From now on syncs go over a collective group with every actor_infer worker
        (weight_broadcast.py): rank 0 is its rank 0; the other ranks only take part in
        gathering the weights. Called on every rank at once with the receivers' joins."""
        self.broadcasts_weights = True
        if self.rank == 0:
            self.weight_group = WeightGroup(address, 0, f"{self.role} rank 0")

    def stop_sharing_weights(self) -> None:
        if self.shared_writer is not None:
            self.shared_writer.close()
            self.shared_writer = None

    def weights_ref(self) -> SyncedWeights:
        """The full weights for actor_infer, passed on by the pipeline unread: written into
        shared memory (`share_weights_in_memory`) or put into the object store in buckets
        of at most `weight_sync_bucket_mb`, each as it is built (weight_buckets.py).

        Every rank goes through the weights (a collective for sharded backends); only rank
        0 writes them. Over a weight group (`join_weight_group`) the sync runs in a thread
        while actor_infer receives it, and this returns at once: the call that next needs
        the parameters unchanged waits for it (`require_onloaded`, `offload` of the model).
        """
        self.require_onloaded("weights", "model")
        return self._publish(self.strategy.weights_for_sync())

    def _publish(self, weights) -> SyncedWeights:
        if self.broadcasts_weights:
            return self._broadcast(weights)
        if self.rank != 0:
            for _ in weights:
                pass
            return []
        if self.shared_writer is not None:
            return self.shared_writer.publish(weights)
        return put_weights(weights, self.weight_sync_bucket_mb << 20)

    def _broadcast(self, weights) -> SyncedWeights:
        group = self.weight_group
        if group is None:  # another rank: it gathers (a collective) while rank 0 sends
            self.sending.start(lambda: [None for _ in weights])
            return []
        sync, self.syncs_sent = self.syncs_sent, self.syncs_sent + 1
        self.sending.start(lambda: send(group, sync, weights, self.weight_sync_bucket_mb << 20))
        return BroadcastWeights(sync)

    def save_synced_weights(self, weights: SyncedWeights, path: str) -> None:
        """Weights synced earlier (a `weights_ref`), into a checkpoint: those actor_infer
        holds while they lag this role's (model_update_frequency > 1)."""
        os.makedirs(path, exist_ok=True)
        torch.save(copied_weights(weights), os.path.join(path, SYNCED_WEIGHTS_FILE))

    def synced_weights_ref(self, path: str) -> SyncedWeights:
        """`save_synced_weights`' weights, published again as `weights_ref` publishes."""
        weights = torch.load(os.path.join(path, SYNCED_WEIGHTS_FILE), weights_only=True)
        return self._publish(weights.items())

    def save(self, path: str) -> None:
        self.require_onloaded("save", "all")
        self.strategy.save(path)

    def load(self, path: str) -> None:
        self.require_onloaded("load", "all")
        self.strategy.load(path)

    # ---- the phase switch of a colocated run (pipelines/loop/phase_switch.py) --------------
    def offload(self, part: str) -> str:
        """`part` (offload.OPTIMIZER, then offload.MODEL after the weight sync) off the
        device while actor_infer generates on it; a second call does nothing."""
        if part == MODEL:
            self.sending.join()
        note = self.strategy.offload(part) if part not in self.offloaded else "already"
        self.offloaded.add(part)
        self.record(f"offload_{part}", note)
        return note

    def onload(self) -> str:
        note = self.strategy.onload() if self.offloaded else "already on the device"
        self.offloaded.clear()
        self.record("onload", note)
        return note

    def require_onloaded(self, call: str, need: str) -> None:
        """Record `call`; it needs `need` ("all", or the "model" part) on the device, and
        anything else is a phase-switch ordering bug: say so."""
        self.sending.join()  # a sync over the weight group reads the parameters
        missing = self.offloaded if need == "all" else self.offloaded & {need}
        if missing:
            raise RuntimeError(f"{self.role} rank {self.rank}: {call} while {sorted(missing)} "
                               "is offloaded (phase switch out of order)")
        self.record(call)
