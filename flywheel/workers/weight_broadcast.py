"""Weight sync over a collective group: actor_train rank 0 broadcasts each sync, bucket by
bucket, to every actor_infer worker (NCCL between GPUs; gloo on CPU, where the tests run).

Why: on GPUs the object store (weight_buckets.py) and shared memory (weight_shm.py) move
the weights through host memory every sync. Here they go device to device, as in verl,
OpenRLHF, ROLL and slime: rank 0 packs a bucket of tensors into one flat buffer of bounded
size (reused across buckets and syncs), broadcasts it, and every receiver loads the views
of its own receive buffer in place before the next bucket comes. No host copy, no file.

The group: actor_train rank 0 is group rank 0, actor_infer worker i is group rank 1 + i.
It is built from a TCPStore on rank 0's node and a gloo or NCCL backend constructed
directly on it, never through `init_process_group`: deepspeed and megatron ranks already
hold the default group of their own world, and this one must not touch it. The store also
carries each bucket's layout (names, dtypes, shapes, offsets) ahead of its bytes: a
sharded backend gathers its tensors while the sync runs, so the layout is not known
before.

Both ends must run at once. The pipeline starts the receivers where it starts
`update_weights` today; the sender runs in a thread that `TrainWorker.weights_ref` starts
and the worker's next call that touches the weights joins (the parameters must not change
under the broadcast). The sender waits until every receiver has said it started this sync,
and a receiver waits for each layout, both at most `timeout_s`, then raise naming the role
and what they waited for: no hang without a message.

Not here: CUDA IPC for colocated roles (NCCL refuses two ranks on one GPU, so roles/roles.py
chooses this path only when actor_train and actor_infer hold devices of their own), and a
copy of the weights kept for a checkpoint (model_update_frequency > 1 keeps the other
carriers). The NCCL path is written against torch's ProcessGroupNCCL and has not moved
bytes on a GPU yet: the only GPU machine it met had one GPU, and NCCL 2.28 refused two
ranks on it ("invalid usage", bench/gpu_checks.py), as it should. The gloo path runs in
tests/workers/test_weight_broadcast.py; the group's construction (store, backend) ran on
the H100 up to that refusal.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist

from flywheel.workers.weight_buckets import DTYPES, cut, tensor_bytes

Backend = Literal["gloo", "nccl"]
ALIGN = 64  # bytes: every tensor starts at a multiple, so its view needs no copy


@dataclass(frozen=True)
class GroupAddress:
    """Where the group meets (actor_train rank 0's node) and how it talks."""

    host: str
    port: int
    world_size: int  # 1 + actor_infer workers
    backend: Backend
    timeout_s: float


@dataclass(frozen=True)
class BroadcastWeights:
    """One sync as actor_infer receives it: its number; the bytes come over the group."""

    sync: int


@dataclass(frozen=True)
class BucketLayout:
    """Where each tensor of one bucket lies in the flat buffer; `end` closes a sync."""

    names: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()  # str(torch.dtype)
    shapes: tuple[tuple[int, ...], ...] = ()
    offsets: tuple[int, ...] = ()
    nbytes: int = 0  # bytes of the buffer the bucket fills
    end: bool = False

    def encode(self) -> bytes:
        """JSON, not pickle: the store listens on a TCP port, and what it carries is data."""
        return json.dumps([self.names, self.dtypes, self.shapes, self.offsets, self.nbytes,
                           self.end]).encode()

    @classmethod
    def decode(cls, raw: bytes) -> BucketLayout:
        names, dtypes, shapes, offsets, nbytes, end = json.loads(raw)
        if any(d not in DTYPES for d in dtypes):
            raise ValueError(f"weight broadcast: unknown dtype in a bucket layout: {dtypes}")
        return cls(tuple(names), tuple(dtypes), tuple(tuple(s) for s in shapes),
                   tuple(offsets), nbytes, end)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _raw(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def plan_buckets(named_tensors: Iterable[tuple[str, torch.Tensor]], max_bytes: int
                 ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of tensors filling at most `max_bytes` of aligned buffer each (a
    larger tensor travels alone, and the buffer grows to hold it)."""
    return cut(named_tensors, max_bytes, lambda named: _aligned(tensor_bytes(named)))


def pack(bucket: list[tuple[str, torch.Tensor]], buffer: torch.Tensor) -> BucketLayout:
    """The bucket's bytes copied into `buffer` (flat uint8, large enough); its layout."""
    offsets, offset, end = [], 0, 0
    for _, tensor in bucket:
        raw = _raw(tensor)
        end = offset + raw.numel()
        buffer[offset:end].copy_(raw)
        offsets.append(offset)
        offset = _aligned(end)
    return BucketLayout(tuple(n for n, _ in bucket), tuple(str(t.dtype) for _, t in bucket),
                        tuple(tuple(t.shape) for _, t in bucket), tuple(offsets), end)


def unpack(buffer: torch.Tensor, layout: BucketLayout) -> dict[str, torch.Tensor]:
    """Views of `buffer` as the bucket's tensors (valid until it is written again)."""
    out = {}
    for name, dtype, shape, offset in zip(layout.names, layout.dtypes, layout.shapes,
                                          layout.offsets):
        dtype_ = DTYPES[dtype]
        size = torch.Size(shape).numel() * dtype_.itemsize
        out[name] = buffer[offset:offset + size].view(dtype_).reshape(shape)
    return out


def bucket_size_needed(bucket: list[tuple[str, torch.Tensor]]) -> int:
    return sum(_aligned(t.numel() * t.element_size()) for _, t in bucket)


class WeightGroup:
    """This process's end of the group: the store, the backend, and two buffers that only
    grow (the sender uses one; a receiver alternates, so a bucket's views stay valid while
    the next one arrives: sglang loads each bucket only once the next is there)."""

    def __init__(self, address: GroupAddress, rank: int, who: str):
        self.rank, self.who = rank, who  # who: "actor_train rank 0", for messages
        self.timeout = timedelta(seconds=address.timeout_s)
        self.device = torch.device("cuda", torch.cuda.current_device()
                                   ) if address.backend == "nccl" else torch.device("cpu")
        store = dist.TCPStore(address.host, address.port, address.world_size, rank == 0,
                              timeout=self.timeout)
        self.store = dist.PrefixStore("flywheel-weights/", store)
        self.backend = _backend(address.backend, dist.PrefixStore("pg/", store), rank,
                                address.world_size, self.timeout)
        self.world_size = address.world_size
        self.buffers = [torch.empty(0, dtype=torch.uint8, device=self.device)] * 2

    def room(self, nbytes: int, slot: int = 0) -> torch.Tensor:
        if self.buffers[slot].numel() < nbytes:
            self.buffers[slot] = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return self.buffers[slot]

    def broadcast(self, tensor: torch.Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        opts.timeout = self.timeout
        self.backend.broadcast([tensor], opts).wait()

    def wait(self, key: str, what: str) -> None:
        try:
            self.store.wait([key], self.timeout)
        except dist.DistStoreError:
            raise TimeoutError(f"{self.who}: waited {self.timeout.total_seconds():.0f} s "
                               f"for {what} (weight sync over {self.describe()})") from None

    def describe(self) -> str:
        return f"a {type(self.backend).__name__} group of {self.world_size}"


def _backend(name: Backend, store: dist.Store, rank: int, size: int, timeout: timedelta):
    if name == "gloo":
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    # Not yet run across two GPUs (module docstring): torch's NCCL backend, built
    # directly on the store like the gloo one, so the role's default group is left alone.
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timeout
    return dist.ProcessGroupNCCL(store, rank, size, options)


def _ready_key(sync: int, rank: int) -> str:
    return f"ready/{sync}/{rank}"


def _layout_key(sync: int, index: int) -> str:
    return f"layout/{sync}/{index}"


def send(group: WeightGroup, sync: int, named_tensors: Iterable[tuple[str, torch.Tensor]],
         bucket_bytes: int) -> int:
    """Sync `sync`, once every receiver has started it: each bucket's layout through the
    store, then its bytes through the group. The number of buckets."""
    for rank in range(1, group.world_size):
        group.wait(_ready_key(sync, rank), f"actor_infer worker {rank - 1} to start "
                   f"receiving sync {sync}")
    if sync > 0:  # every receiver is past the previous sync: its keys can go
        _forget(group, sync - 1)
    index = 0
    for bucket in plan_buckets(named_tensors, bucket_bytes):
        buffer = group.room(bucket_size_needed(bucket))
        layout = pack(bucket, buffer)
        group.store.set(_layout_key(sync, index), layout.encode())
        group.broadcast(buffer[:layout.nbytes])
        index += 1
    group.store.set(_layout_key(sync, index), BucketLayout(end=True).encode())
    return index


def _forget(group: WeightGroup, sync: int) -> None:
    index = 0
    while group.store.delete_key(_layout_key(sync, index)):
        index += 1
    for rank in range(1, group.world_size):
        group.store.delete_key(_ready_key(sync, rank))


def receive(group: WeightGroup, weights: BroadcastWeights) -> Iterator[dict[str, torch.Tensor]]:
    """Sync `weights.sync`, bucket by bucket, as views of this receiver's buffers: copy
    from each before asking for the one after next (buffers alternate). Read it to the
    end: the sender waits for every receiver at every bucket."""
    group.store.set(_ready_key(weights.sync, group.rank), b"1")
    index = 0
    while True:
        key = _layout_key(weights.sync, index)
        group.wait(key, f"bucket {index} of sync {weights.sync} from actor_train rank 0")
        layout = BucketLayout.decode(group.store.get(key))
        if layout.end:
            return
        buffer = group.room(layout.nbytes, slot=index % 2)[:layout.nbytes]
        group.broadcast(buffer)
        yield unpack(buffer, layout)
        index += 1


@dataclass
class SendInFlight:
    """A sync running in a thread of actor_train, joined before its weights change."""

    who: str  # "actor_train rank 0", for messages
    thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self, run: Callable[[], object]) -> None:
        self.join()

        def body() -> None:
            try:
                run()
            except BaseException as e:  # re-raised by the next join, in the worker's call
                self.error = e

        self.thread = threading.Thread(target=body, name="weight-broadcast", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is None:
            return
        self.thread.join()
        self.thread = None
        error, self.error = self.error, None
        if error is not None:
            raise RuntimeError(f"{self.who}: the previous weight sync failed: "
                               f"{error}") from error
