"""The ways one sync's weights travel from actor_train to actor_infer, behind one
interface: Ray's object store (weight_buckets.py: any layout of nodes), shared memory
(weight_shm.py: rank 0 and every reader on one node, no page faults per sync) and a
collective group (weight_broadcast.py: device to device, NCCL on GPUs). The pipeline
passes the handle along unread; the readers and the checkpoint code read it here.
"""

from __future__ import annotations

from collections.abc import Iterator

import ray
import torch

from flywheel.workers.weight_broadcast import BroadcastWeights, WeightGroup, receive
from flywheel.workers.weight_buckets import stream_weights
from flywheel.workers.weight_shm import SharedWeights, mark_loaded, read_buckets

SyncedWeights = list[ray.ObjectRef] | SharedWeights | BroadcastWeights


def received_buckets(weights: SyncedWeights, group: WeightGroup | None = None
                     ) -> Iterator[dict[str, torch.Tensor]]:
    """The sync's tensors, bucket by bucket, as read-only views (copy from them before
    the bucket after next); over a collective, `group` is the reader's end of it."""
    if isinstance(weights, BroadcastWeights):
        if group is None:
            raise RuntimeError("weights sent over a collective group reach only its "
                               "members (actor_infer workers that joined it)")
        return receive(group, weights)
    if isinstance(weights, SharedWeights):
        return read_buckets(weights)
    return stream_weights(weights)


def finished_reading(weights: SyncedWeights, reader: int) -> None:
    """Reader `reader` (an actor_infer rank) holds the sync now: the writer may reuse what
    carried it (the object store frees its copy by itself)."""
    if isinstance(weights, SharedWeights):
        mark_loaded(weights, reader)


def copied_weights(weights: SyncedWeights) -> dict[str, torch.Tensor]:
    """Every tensor of the sync, copied out (a checkpoint keeps them). A sync over a
    collective group is gone once received: roles/roles.py never chooses that carrier when a
    checkpoint may need it (model_update_frequency > 1)."""
    if isinstance(weights, BroadcastWeights):
        raise RuntimeError("a weight sync over a collective group keeps no copy to save; "
                           "it is used only with model_update_frequency: 1")
    return {name: tensor.clone() for bucket in received_buckets(weights)
            for name, tensor in bucket.items()}
