"""Weight sync through shared memory, when actor_train's rank 0 and every actor_infer
worker run on one node.

Why not only the object store (weight_buckets.py): a `ray.put` allocates fresh store memory
every sync, and on CPU the first touch of each page costs more than the copy itself (the
SmolLM2 benchmark, bench/bench_weight_sync.py, measured put at 2-4x an in-memory copy).
Here rank 0 keeps a few files under /dev/shm mapped and copies each sync into one whose
pages it has touched before (a plain memory copy: `os.pwrite` into tmpfs measured ~3x
slower), and a reader maps the file and hands the engine read-only views, bucket by
bucket: one copy in all, the engine's own load aside.

Reuse without a race: every sync has a generation number. Each reader records in a small
control file the generation it last finished loading. A file may be overwritten when every
reader has finished a generation at least as new as the one it holds (a reader never goes
back to an older sync, and one that skipped a sync, because a newer one arrived first, has
passed it too), and never while it holds the newest sync: the pipeline keeps that one for a
checkpoint (model_update_frequency > 1). So two files suffice in a synchronous run and a
third appears only when a reader lags.

Lifetime: the files are named after the writer's process id; the writer removes them when
it closes, and every writer removes the files of writers no longer alive (a killed worker
leaves its files behind). Not for GPUs: there the transfer belongs on NCCL.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from flywheel.workers.weight_buckets import DTYPES, cut

SHM_DIR = "/dev/shm"
PREFIX = "flywheel-weights-"
_OWNED = re.compile(rf"^{PREFIX}(\d+)-")


@dataclass(frozen=True)
class TensorSlot:
    name: str
    dtype: str  # str(torch.dtype)
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class SharedWeights:
    """One sync as actor_infer receives it: which file, which generation of it, its layout."""

    path: str
    control: str  # the readers' control file (generations loaded, one int64 per reader)
    generation: int
    slots: tuple[TensorSlot, ...]
    bucket_bytes: int  # how much the reader hands the engine at a time


def shared_memory_room(needed: int, directory: str = SHM_DIR) -> str | None:
    """Why shared memory cannot carry `needed` bytes per file here, or None when it can
    (three files' worth must fit: a container's /dev/shm is often 64 MiB)."""
    if not os.path.isdir(directory):
        return f"{directory} does not exist"
    free = os.statvfs(directory)
    room = free.f_bavail * free.f_frsize
    if room < 3 * needed:
        return (f"{directory} has {room >> 20} MiB free, fewer than 3 x {needed >> 20} MiB "
                "of weights")
    return None


def remove_orphans(directory: str = SHM_DIR) -> None:
    """Delete the files of writers whose process is gone."""
    for name in os.listdir(directory):
        owner = _OWNED.match(name)
        if owner and not _alive(int(owner.group(1))):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to clean
        return True
    return True


class SharedWeightWriter:
    """actor_train rank 0's side: files under /dev/shm reused from sync to sync."""

    def __init__(self, readers: int, bucket_bytes: int, directory: str = SHM_DIR):
        if readers < 1:
            raise ValueError(f"shared-memory weight sync needs at least one reader, got {readers}")
        remove_orphans(directory)
        self.directory = directory
        self.bucket_bytes = bucket_bytes
        self.base = os.path.join(directory, f"{PREFIX}{os.getpid()}-{id(self):x}")
        self.control = self.base + "-control"
        with open(self.control, "wb") as f:
            f.write(np.full(readers, -1, dtype=np.int64).tobytes())
        self._loaded = np.memmap(self.control, dtype=np.int64, mode="r", shape=(readers,))
        self.files: list[tuple[str, int]] = []  # (path, generation it holds)
        self._maps: dict[str, torch.Tensor] = {}  # path -> the file, mapped for writing
        self.nbytes = 0  # one sync's bytes, once known
        self.generation = 0

    def publish(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> SharedWeights:
        """Copy the tensors into a file no reader needs any more; its handle."""
        self.generation += 1
        path = self._free_file()
        slots, offset = [], 0
        target = self._mapping(path, self.nbytes)
        for name, tensor in named_tensors:
            tensor = tensor.detach()
            if tensor.device.type != "cpu":
                tensor = tensor.cpu()
            raw = tensor.contiguous().reshape(-1).view(torch.uint8)
            if offset + raw.numel() > target.numel():  # the first sync learns the size
                target = self._mapping(path, max(2 * target.numel(), offset + raw.numel()))
            target[offset:offset + raw.numel()].copy_(raw)
            slots.append(TensorSlot(name, str(tensor.dtype), tuple(tensor.shape), offset,
                                    raw.numel()))
            offset += raw.numel()
        self.nbytes = max(self.nbytes, offset)
        self.files = [(p, g) if p != path else (p, self.generation) for p, g in self.files]
        return SharedWeights(path, self.control, self.generation, tuple(slots),
                             self.bucket_bytes)

    def _mapping(self, path: str, size: int) -> torch.Tensor:
        """The file as a writable byte tensor of at least `size` bytes (grown, and mapped
        again, when smaller). The mapping stays: later syncs copy into touched pages."""
        held = self._maps.get(path)
        if held is None or held.numel() < size:
            with open(path, "r+b" if os.path.exists(path) else "w+b") as f:
                os.ftruncate(f.fileno(), max(size, 1 << 20))
                mapped = mmap.mmap(f.fileno(), 0)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*non-writable.*")
                self._maps[path] = torch.frombuffer(mapped, dtype=torch.uint8)
        return self._maps[path]

    def _free_file(self) -> str:
        newest = max((g for _, g in self.files), default=0)
        done = int(self._loaded.min())
        for path, generation in self.files:
            if generation != newest and generation <= done:
                return path
        path = f"{self.base}-{len(self.files)}"
        self.files.append((path, 0))
        return path

    def close(self) -> None:
        self._maps = {}
        for path in [p for p, _ in self.files] + [self.control]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.files = []


_maps: dict[str, tuple[int, mmap.mmap]] = {}  # path -> (inode, map): a reader's open maps


def _mapped(path: str) -> mmap.mmap:
    """The file's current contents, mapped read-only (mapped again when it was replaced
    or has grown)."""
    stat = os.stat(path)
    held = _maps.get(path)
    if held is None or held[0] != stat.st_ino or len(held[1]) != stat.st_size:
        with open(path, "rb") as f:
            _maps[path] = (stat.st_ino, mmap.mmap(f.fileno(), stat.st_size,
                                                  prot=mmap.PROT_READ))
    return _maps[path][1]


def read_buckets(weights: SharedWeights) -> Iterator[dict[str, torch.Tensor]]:
    """The sync's tensors as read-only views of the shared file, in buckets of at most
    `bucket_bytes` (a larger tensor alone). Copy from them; do not keep them past
    `mark_loaded`, after which the writer may overwrite the file."""
    buffer = np.frombuffer(_mapped(weights.path), dtype=np.uint8)
    for run in cut(weights.slots, weights.bucket_bytes, lambda slot: slot.nbytes):
        with warnings.catch_warnings():  # torch warns once about read-only numpy arrays
            warnings.filterwarnings("ignore", message=".*not writable.*")
            raws = [torch.from_numpy(buffer[s.offset:s.offset + s.nbytes]) for s in run]
        yield {slot.name: raw.view(DTYPES[slot.dtype]).reshape(slot.shape)
               for slot, raw in zip(run, raws)}


def mark_loaded(weights: SharedWeights, reader: int) -> None:
    """Reader `reader` is done with this sync and every older one."""
    loaded = np.memmap(weights.control, dtype=np.int64, mode="r+")
    loaded[reader] = weights.generation
    loaded.flush()
