"""Asynchronous training: how far generation runs ahead, partial rollouts, offloading between
phases and how weights travel.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class AsyncKeys:
    """How generation and training overlap, and how weights reach the generating copy."""

    # How many batches generation may run ahead of training; 0 is synchronous.
    # A batch trained at step t only holds samples started at policy version
    # >= t - (ceil(ratio) + model_update_frequency - 1) (weights reach actor_infer only
    # every model_update_frequency steps); older ones are dropped and counted.
    async_generation_ratio: float = 0.0
    # Sync trainer weights to actor_infer every N train steps.
    model_update_frequency: int = 1
    # Colocated (hybrid) mode: free device memory between phases when actor_train and
    # actor_infer share devices in a synchronous run (pipelines/loop/phase_switch.py): the
    # engine sleeps while training runs (vllm sleep mode, sglang memory release, hf_infer
    # model to CPU) and actor_train moves optimizer state and parameters to CPU while the
    # engine generates. auto: on exactly when the two roles share a device (and then
    # async_generation_ratio is 0, which sharing requires); true: the same, but refused
    # when they share none; false: never (both phases' memory stays resident). On CPU
    # nothing is freed; the switch still runs in order (each call says it is a no-op).
    # ROLL's `is_offload_states` maps here. Refused by SFT (one role, no phases).
    offload_between_phases: Literal["auto", True, False] = "auto"
    # Weight sync bucket size in MiB, >= 1: actor_train's rank 0 cuts the weights into
    # buckets of at most this size (a larger tensor travels alone), puts each into Ray's
    # object store as it is built, and actor_infer loads each in place as it reads it
    # (workers/weight_buckets.py). Bounds the extra memory a sync takes on either side
    # beyond the object store's copy; smaller buckets cost a little more overhead per sync.
    # Bit-identical weights whatever the size. Refused by SFT (no weight sync there).
    weight_sync_bucket_mb: int = 128
    # How weight syncs travel from actor_train's rank 0 to actor_infer (pipelines/roles/
    # handles.py). auto: a collective broadcast (NCCL) when both run on CUDA on devices of
    # their own and each sync is loaded at once (model_update_frequency 1), else shared
    # memory (/dev/shm) when all sit on one node with room, else Ray's object store.
    # collective: a broadcast group always (NCCL on CUDA, gloo on CPU), refused with a
    # model_update_frequency > 1 (a broadcast keeps no copy for a checkpoint) or devices the
    # two roles share; shared_memory: refused at start where it cannot be used;
    # object_store: always. Each carries the same weights bit for bit.
    weight_sync_carrier: Literal["auto", "collective", "shared_memory", "object_store"] = "auto"
    # Pin the driver's prefetch thread (it feeds actor_infer and hands finished groups to
    # the reward workers) to these CPU cores (Linux); unset: no pinning. On a CPU-only
    # machine, keep it on actor_infer's cores so that it does not take time from training.
    prefetch_cpu_affinity: list[int] | None = None
    # Pause in-flight generations at a weight sync and continue them on new weights
    # (RLVR, needs async_generation_ratio > 0). Each token then carries the version that
    # produced it; a sample's staleness is still counted from its first token's version.
    partial_rollout: bool = False
    # With partial_rollout: new tokens per generation request, in 1..max_new_tokens. An
    # unfinished response comes back after this many and continues as a new request, on
    # whatever weights are newest by then. Smaller picks up new weights sooner but re-reads
    # the prompt (a prefill) per segment. Unset: a quarter of actor_infer's max_new_tokens.
    # Not for vllm, which needs no segments (running requests continue on new weights).
    partial_rollout_segment_tokens: int | None = None
