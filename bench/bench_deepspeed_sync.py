"""Benchmark: what deepspeed_train's weight sync costs in time and peak memory, reading the
weights as the full state dict (`state_dict_for_sync`, what the sync did before) against
one tensor at a time (`weights_for_sync`), for ZeRO 2 and 3, on SmolLM2-135M (fp32).

One rank, in this process (gloo on CPU, NCCL on a GPU). The weights go into buckets of
`--bucket-mb` as the object-store carrier cuts them (workers/weight_buckets.py), and each
bucket's bytes are copied once, as `ray.put` copies them into the store, without Ray. Each
path runs in a fresh process: `peak` is the most the process's resident memory (sampled
every 2 ms; CPU) or torch's allocation (GPU) grew during the sync over what the strategy
held before it. The tied lm_head goes once on the new path (hence fewer MB).

    .venv/bin/python bench/bench_deepspeed_sync.py [--bucket-mb 128]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time


def one(stage: int, path: str, bucket_mb: int) -> dict:
    import torch

    from flywheel.config.schema import StrategyArgs, WorkerConfig
    from flywheel.platform.models.builtin import resolve_pretrain
    from flywheel.workers.strategies.deepspeed_train import DeepSpeedTrainStrategy
    from flywheel.workers.weight_buckets import buckets

    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"}.items():
        os.environ.setdefault(key, value)
    model = resolve_pretrain("builtin://smollm2-135m-instruct")
    cfg = WorkerConfig(strategy_args=StrategyArgs(strategy_name="deepspeed_train",
                                                  strategy_config={"zero_stage": stage}))
    strategy = DeepSpeedTrainStrategy(model, cfg, seed=0, total_steps=1)
    cuda = torch.cuda.is_available()
    sampler = RssSampler()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = sampler.start()
    start = time.perf_counter()
    weights = (strategy.state_dict_for_sync().items() if path == "full"
               else strategy.weights_for_sync())
    nbytes = 0
    for bucket in buckets(weights, bucket_mb << 20):
        copied = [array.copy() for array in bucket.data]  # as ray.put copies into the store
        nbytes += sum(a.nbytes for a in copied)
        del copied
    seconds = time.perf_counter() - start
    after = torch.cuda.max_memory_allocated() if cuda else sampler.stop()
    return {"seconds": seconds, "peak_mb": (after - before) / 2**20, "mb": nbytes / 2**20}


class RssSampler:
    """The process's largest resident size while it runs (ru_maxrss is a high-water mark
    of the whole process, loading included, so it would hide the sync's own peak)."""

    def __init__(self):
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.most, self.running = 0, False

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def start(self) -> int:
        self.most, self.running = self.rss(), True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self.most

    def _run(self) -> None:
        while self.running:
            self.most = max(self.most, self.rss())
            time.sleep(0.002)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return max(self.most, self.rss())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bucket-mb", type=int, default=128)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # stage path, in a child
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1], args.bucket_mb)))
        return 0
    print(f"{'zero':>4} {'path':>14} {'MB synced':>10} {'seconds':>8} {'peak MB':>8}")
    for stage in (2, 3):
        for path in ("full", "one-at-a-time"):
            child = subprocess.run(
                [sys.executable, __file__, "--bucket-mb", str(args.bucket_mb), "--one",
                 str(stage), path], capture_output=True, text=True, check=False)
            if child.returncode != 0:
                print(f"{stage:>4} {path:>14} failed:\n{child.stderr[-2000:]}")
                return 1
            r = json.loads(child.stdout.strip().splitlines()[-1])
            print(f"{stage:>4} {path:>14} {r['mb']:>10.0f} {r['seconds']:>8.2f} "
                  f"{r['peak_mb']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
