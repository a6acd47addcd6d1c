"""Benchmark: one weight sync from actor_train (hf_train) to actor_infer (vllm), old path
against the bucketed one, on a real model (SmolLM2-135M-Instruct, fp32).

Two Ray actors, as in a run: a TrainWorker holding the model and an InferWorker running
vLLM in its own process. Each round does every path, in alternating order (forward on
even rounds, backward on odd ones), so drift on a shared machine hits all alike. Per sync:

- old (the path before workers/weight_buckets.py, replayed here as it was): rank 0 copies
  the full state dict and `ray.put`s it as one object; the infer worker `ray.get`s all of
  it, copies it to the engine's dtype, writes one safetensors file under /dev/shm and vLLM
  reloads from the file (`reload_weights(weights_path=...)`).
- new: rank 0 puts buckets of `--bucket-mb` into the object store as it builds them
  (workers/weight_buckets.py); the infer worker reads bucket after bucket and vLLM loads
  each in place (`update_weights_from_buckets`, vLLM's layerwise
  `reload_weights(weights_iterator=...)`).
- shm: what a run on one node does (workers/weight_shm.py): rank 0 writes the weights into
  a /dev/shm file reused from sync to sync; the infer worker maps it and vLLM loads bucket
  views in place as above.

Columns: `put` (train side: building and putting the weights), `get` (infer side: reading
them out of the object store), `transfer` = put + get; `engine` = the engine's own load
(old: file write + vLLM's reload from it; new and shm: vLLM's in-place load of buckets
already read, measured on its own in an extra call on the same weights); `sync` = the whole call
as the pipeline sees it (put + the infer worker's update_weights). `memcpy`: copying the
same bytes in memory once (torch `copy_` into buffers already touched, in the train
process), the floor the transfer is compared with (target: transfer <= 2x memcpy);
`alloc+memcpy`: the same into freshly allocated buffers (page faults included), what the
old path's full state-dict copy costs.

    .venv/bin/python bench/bench_weight_sync.py [--rounds 5 --bucket-mb 128]

Prints a markdown table of medians and writes bench/results/weight_sync-<timestamp>.json.
The 1-minute load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import ray
import torch

from flywheel.config.schema import RayConfig, StrategyArgs, WorkerConfig
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.models.weight_size import weight_bytes
from flywheel.platform.ray_runtime import start_ray
from flywheel.workers.infer_worker import InferWorker
from flywheel.workers.role_worker import PROGRESS_GROUP
from flywheel.workers.train_worker import TrainWorker
from flywheel.workers.weight_buckets import put_weights
from flywheel.workers.weight_shm import SharedWeights
from flywheel.workers.weight_transfer import finished_reading, received_buckets

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
MODEL = "builtin://smollm2-135m-instruct"
PATHS = ("old", "new", "shm")
WARMUP_ROUNDS = 2


class TrainBench(TrainWorker):
    def memcpy_s(self, path: str) -> dict[str, float]:
        """One in-memory copy of the weights a sync sends (old: the full state dict, the
        tied head twice; new and shm: each tensor once)."""
        tensors = ([t for _, t in self.strategy.weights_for_sync()] if path != "old" else
                   [t.detach() for t in self.strategy.model.state_dict().values()])
        begin = time.perf_counter()
        copies = [torch.empty_like(t) for t in tensors]
        for c, t in zip(copies, tensors):
            c.copy_(t)
        fresh = time.perf_counter() - begin
        begin = time.perf_counter()  # again into the same, touched, pages
        for c, t in zip(copies, tensors):
            c.copy_(t)
        return {"memcpy": time.perf_counter() - begin, "alloc+memcpy": fresh}

    def put_old(self) -> tuple[list[ray.ObjectRef], float]:
        begin = time.perf_counter()
        refs = [ray.put(self.strategy.state_dict_for_sync())]
        return refs, time.perf_counter() - begin

    def put_new(self) -> tuple[list[ray.ObjectRef], float]:
        begin = time.perf_counter()  # weights_ref's object-store path, whatever the carrier
        refs = put_weights(self.strategy.weights_for_sync(), self.weight_sync_bucket_mb << 20)
        return refs, time.perf_counter() - begin

    def put_shm(self) -> tuple[SharedWeights, float]:
        if self.shared_writer is None:
            self.share_weights_in_memory(readers=1)
        begin = time.perf_counter()
        handle = self.weights_ref()
        return handle, time.perf_counter() - begin


class InferBench(InferWorker):
    def update_old(self, refs: list[ray.ObjectRef], version: int) -> dict[str, float]:
        """The vllm strategy's update before buckets, step by step."""
        engine = self.strategy
        begin = time.perf_counter()
        named = ray.get(refs[0])
        got = time.perf_counter()
        tensors = {k: v.detach().to("cpu", engine.torch_dtype, copy=True).contiguous()
                   for k, v in named.items()}
        if engine.tied and "lm_head.weight" not in tensors:
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        from safetensors.torch import save_file

        folder = tempfile.mkdtemp(prefix="flywheel-bench-", dir="/dev/shm")
        try:
            save_file(tensors, os.path.join(folder, "model.safetensors"))
            written = time.perf_counter()
            engine.llm.collective_rpc("reload_weights", kwargs={"weights_path": folder})
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        engine.llm.reset_prefix_cache()
        engine.version = self.version = version
        end = time.perf_counter()
        return {"get": got - begin, "engine": end - got, "write": written - got,
                "update": end - begin}

    def update_new(self, refs: list[ray.ObjectRef], version: int) -> dict[str, float]:
        """`update_weights` as the pipeline calls it; reading the carrier timed apart."""
        return self._timed_update(refs, version)

    def update_shm(self, handle: SharedWeights, version: int) -> dict[str, float]:
        return self._timed_update(handle, version)

    def _timed_update(self, weights, version: int) -> dict[str, float]:
        fetch = [0.0]

        def timed(buckets):
            while True:
                begin = time.perf_counter()
                bucket = next(buckets, None)
                fetch[0] += time.perf_counter() - begin
                if bucket is None:
                    return
                yield bucket

        begin = time.perf_counter()
        self.strategy.update_weights_from_buckets(timed(received_buckets(weights)), version)
        finished_reading(weights, self.rank)
        self.version = version
        return {"get": fetch[0], "update": time.perf_counter() - begin}

    def load_only_new(self, weights, version: int) -> float:
        """vLLM's in-place load of buckets already read out of the carrier."""
        buckets = list(received_buckets(weights))
        for b in buckets:  # fault the pages in: time the engine, not the mapping
            for t in b.values():
                t.sum()
        begin = time.perf_counter()
        self.strategy.update_weights_from_buckets(buckets, version)
        finished_reading(weights, self.rank)
        return time.perf_counter() - begin


def one_round(train, infer, path: str, version: int) -> dict[str, float]:
    begin = time.perf_counter()
    refs, put_s = ray.get(getattr(train, f"put_{path}").remote())
    row = {"put": put_s}
    row.update(ray.get(getattr(infer, f"update_{path}").remote(refs, version)))
    row["sync"] = time.perf_counter() - begin
    row["transfer"] = row["put"] + row["get"]
    if path != "old":
        row["engine"] = ray.get(infer.load_only_new.remote(refs, version))
    del refs
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bucket-mb", type=int, default=128)
    parser.add_argument("--prefault-store", action="store_true",
                        help="Ray touches the object store's pages at start "
                             "(RAY_preallocate_plasma_memory=1)")
    args = parser.parse_args()
    if args.prefault_store:
        os.environ["RAY_preallocate_plasma_memory"] = "1"  # noqa: SIM112 (Ray spells it so)
    load_before = os.getloadavg()[0]
    path = resolve_pretrain(MODEL)
    size = weight_bytes(path, "fp32")
    start_ray(RayConfig(num_cpus=2), num_slots=2, weight_bytes=size)
    cfg = WorkerConfig()
    infer_cfg = WorkerConfig(strategy_args=StrategyArgs("vllm"))
    train = ray.remote(concurrency_groups={PROGRESS_GROUP: 1})(TrainBench).options(
        num_cpus=0).remote(
        "actor_train", 0, 1, path, cfg, seed=0, total_steps=1, trainable=False,
        num_threads=1, weight_sync_bucket_mb=args.bucket_mb)
    infer = ray.remote(concurrency_groups={PROGRESS_GROUP: 1})(InferBench).options(
        num_cpus=0).remote(
        "actor_infer", 0, 1, path, infer_cfg, seed=0, num_threads=1, context_length=512)
    memcpy = {p: [ray.get(train.memcpy_s.remote(p))] for p in PATHS}
    rows: dict[str, list[dict]] = {p: [] for p in PATHS}
    # Rounds 0 and 1 warm every path up, not reported: shm maps and first touches each of
    # its two files there (a run's first two syncs pay that once).
    for r in range(args.rounds + WARMUP_ROUNDS):
        order = PATHS if r % 2 == 0 else PATHS[::-1]
        for p in order:
            row = one_round(train, infer, p, version=len(PATHS) * r + PATHS.index(p))
            if r >= WARMUP_ROUNDS:
                rows[p].append(row)
        for p in PATHS:
            memcpy[p].append(ray.get(train.memcpy_s.remote(p)))
    load_after = os.getloadavg()[0]
    ray.shutdown()

    med = {p: {k: statistics.median(row[k] for row in rows[p]) for k in rows[p][0]}
           for p in rows}
    copies = {p: {k: statistics.median(m[k] for m in memcpy[p]) for k in memcpy[p][0]}
              for p in PATHS}
    copy_s = {p: copies[p]["memcpy"] for p in PATHS}
    mib = (size or 0) / 2**20
    print(f"\nweight sync, {MODEL} fp32 ({mib:.0f} MiB of checkpoint weights), "
          f"vllm actor <- hf_train actor, buckets of {args.bucket_mb} MiB, "
          f"{args.rounds} rounds interleaved, store prefaulted: {args.prefault_store}, "
          f"medians (s); load avg {load_before:.1f} -> "
          f"{load_after:.1f} on {os.cpu_count()} cores (shared machine)\n")
    keys = ["put", "get", "transfer", "engine", "sync"]
    print("| path | memcpy | alloc+memcpy | " + " | ".join(keys) + " | transfer / memcpy |")
    print("|---" * (len(keys) + 4) + "|")
    for p in PATHS:
        cells = " | ".join(f"{med[p][k]:.3f}" for k in keys)
        print(f"| {p} | {copy_s[p]:.3f} | {copies[p]['alloc+memcpy']:.3f} | {cells} | "
              f"{med[p]['transfer'] / copy_s[p]:.2f} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"weight_sync-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"model": MODEL, "weight_bytes": size,
                               "bucket_mb": args.bucket_mb, "memcpy_s": memcpy,
                               "prefault_store": args.prefault_store,
                               "rounds": rows, "medians": med,
                               "load_avg": [load_before, load_after]}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
