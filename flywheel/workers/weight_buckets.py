"""Weight sync in buckets: actor_train's weights cut into bounded pieces, each put into
Ray's object store as it is built, and read back by actor_infer one piece at a time.

Why: the whole-model path built a full copy of the state dict on the train rank, pickled it
into the object store as one object (a second full copy), and every infer worker held all
of it before loading. Here the train rank never holds more than one bucket beyond its own
parameters, and an infer worker loads each bucket into its engine (in place) and lets it go
before reading the next.

Format: a `WeightBucket` holds each tensor's bytes as a flat uint8 numpy array (any torch
dtype, bf16 included, with its dtype and shape beside it). Ray serialises numpy arrays out
of band: `ray.put` copies each array's bytes into the object store once, and `ray.get` on
the same node returns read-only views of the store's memory, no copy. `tensors()` views
them back as torch tensors; a strategy copies them into its parameters.

Bucket size: `max_bytes` bounds a bucket, except that a tensor larger than it travels
alone in its own bucket (a tensor is never split). A backend whose parameters alias one
another (tied embeddings: `lm_head.weight` is `model.embed_tokens.weight`) sends them once
(`TrainStrategy.weights_for_sync`); the receivers re-tie (hf_infer ties, vllm and sglang
load the head from the embedding).

Not here: the GPU path (NCCL broadcast from train rank 0 to the engines' ranks), and a
stream between the two roles while the train rank is still producing (the buckets of one
sync are all in the store before actor_infer is told of them, so the store holds one copy
of the weights per sync in flight: platform/ray_runtime.py sizes it from the model).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import torch

if TYPE_CHECKING:  # the bucket cutting is also weight_broadcast.py's, which needs no Ray
    import ray

T = TypeVar("T")
DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16, torch.float64,
                               torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)}


@dataclass
class WeightBucket:
    """Named tensors as raw bytes: what travels through the object store."""

    names: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)  # str(torch.dtype), e.g. "torch.float32"
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    data: list[np.ndarray] = field(default_factory=list)  # flat uint8, one per tensor
    nbytes: int = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        tensor = tensor.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        flat = tensor.contiguous().reshape(-1).view(torch.uint8)
        self.names.append(name)
        self.dtypes.append(str(tensor.dtype))
        self.shapes.append(tuple(tensor.shape))
        self.data.append(flat.numpy())  # a view: ray.put copies it into the store
        self.nbytes += flat.numel()

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) views of the bucket's bytes (read-only when they come from the
        object store: copy from them, never write to them)."""
        with warnings.catch_warnings():  # torch warns once about read-only numpy arrays
            warnings.filterwarnings("ignore", message=".*not writable.*")
            views = [torch.from_numpy(a) for a in self.data]
        for name, dtype, shape, raw in zip(self.names, self.dtypes, self.shapes, views):
            yield name, raw.view(DTYPES[dtype]).reshape(shape)


def cut(items: Iterable[T], max_bytes: int, size: Callable[[T], int]) -> Iterator[list[T]]:
    """Consecutive runs of `items` of at most `max_bytes` by `size` (an item larger than
    that alone): the one bucketing rule of every carrier (here, weight_shm.py,
    weight_broadcast.py)."""
    if max_bytes <= 0:
        raise ValueError(f"bucket size must be positive, got {max_bytes} bytes")
    run: list[T] = []
    used = 0
    for item in items:
        n = size(item)
        if run and used + n > max_bytes:
            yield run
            run, used = [], 0
        run.append(item)
        used += n
    if run:
        yield run


def tensor_bytes(named: tuple[str, torch.Tensor]) -> int:
    return named[1].numel() * named[1].element_size()


def buckets(named_tensors: Iterable[tuple[str, torch.Tensor]],
            max_bytes: int) -> Iterator[WeightBucket]:
    """Consecutive buckets of at most `max_bytes` each (one larger tensor travels alone)."""
    for run in cut(named_tensors, max_bytes, tensor_bytes):
        bucket = WeightBucket()
        for name, tensor in run:
            bucket.add(name, tensor)
        yield bucket


def put_weights(named_tensors: Iterable[tuple[str, torch.Tensor]],
                max_bytes: int) -> list[ray.ObjectRef]:
    """Each bucket into the object store as soon as it is built; the refs, in order."""
    import ray

    return [ray.put(b) for b in buckets(named_tensors, max_bytes)]


def stream_weights(refs: Iterable[ray.ObjectRef]) -> Iterator[dict[str, torch.Tensor]]:
    """The buckets behind `refs`, one at a time, each fetched when the previous one is
    done with (a bucket's memory is released once its tensors are no longer referenced)."""
    import ray

    for ref in refs:
        yield dict(ray.get(ref).tensors())


def gather_weights(refs: Iterable[ray.ObjectRef]) -> dict[str, torch.Tensor]:
    """All of `put_weights`' tensors as one dict (views; a checkpoint or a test reads it)."""
    return {k: v for bucket in stream_weights(refs) for k, v in bucket.items()}
