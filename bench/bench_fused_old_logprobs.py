"""Benchmark: actor_train's train step with the old log-probs fused into the training
forward (flywheel/workers/strategies/fused_old_logprobs.py) against the separate pass.

SmolLM2-135M-Instruct, fp32, hf_train, one thread pinned to one core; a train step of
16 rows x ~59 tokens (random prompts and responses: only the shapes matter for time) as
one optimizer step of 2 micro-batches of 8 (the condition under which the fusion applies).
One worker, toggled between the two paths: rounds alternate which path goes first, and
every step's 1-minute load average is recorded (other jobs share the machine's cores).
The first step is a warm-up and not counted.

    .venv/bin/python bench/bench_fused_old_logprobs.py [--rounds N] [--core C]

Prints a markdown table and writes bench/results/bench_fused_old_logprobs-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

import torch

from flywheel.algorithms import MismatchCorrection, PolicyLossParams
from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.train_worker import TrainWorker

ROWS = 16


def synthetic_batch(vocab: int, seed: int = 0) -> TokenBatch:
    """16 rows: prompts of 24-35 and responses of 20-37 tokens (~59 on average)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(100, vocab, (int(torch.randint(24, 36, (1,), generator=g)),),
                             generator=g).tolist() for _ in range(ROWS)]
    responses = [torch.randint(100, vocab, (int(torch.randint(20, 38, (1,), generator=g)),),
                               generator=g).tolist() for _ in range(ROWS)]
    logps = [(-torch.rand(len(r), generator=g) * 3).tolist() for r in responses]
    batch = pack_sequences(prompts, responses, pad_id=0, infer_log_probs=logps)
    batch.advantages = torch.randn(ROWS, 1, generator=g) * batch.response_mask  # [B, L]
    return batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--core", type=int, default=1)
    args = parser.parse_args()

    path = resolve_pretrain("builtin://smollm2-135m-instruct")
    cfg = WorkerConfig(infer_batch_size=16, training_args=TrainingArgs(
        learning_rate=2e-5, per_device_train_batch_size=8, gradient_accumulation_steps=2))
    worker = TrainWorker("actor_train", 0, 1, path, cfg, seed=0, total_steps=100,
                         trainable=True, num_threads=1, cpu_affinity=[args.core])
    strategy = worker.strategy
    vocab = strategy.model.config.vocab_size
    batch = synthetic_batch(vocab)
    tokens = float(batch.attention_mask.sum()) / ROWS
    loss = ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean")
    correction = MismatchCorrection()
    fusable, forward = strategy.fuses_old_logprobs, strategy.forward_logprobs
    forward_s = []

    def timed_forward(b: TokenBatch) -> torch.Tensor:
        start = time.perf_counter()
        out = forward(b)
        forward_s.append(time.perf_counter() - start)
        return out

    strategy.forward_logprobs = timed_forward

    def step(fused: bool) -> dict:
        strategy.fuses_old_logprobs = fusable if fused else (lambda rows, epochs: False)
        forward_s.clear()
        load = os.getloadavg()[0]
        start = time.perf_counter()
        metrics = worker.train_step(dataclasses.replace(batch), loss, 1, old_log_probs=correction)
        seconds = time.perf_counter() - start
        assert metrics["actor/old_logprobs_fused"] == float(fused)
        return {"fused": fused, "seconds": seconds, "separate_forward_s": sum(forward_s),
                "load_before": load, "load_after": os.getloadavg()[0]}

    step(True)  # warm-up
    runs = []
    for r in range(args.rounds):
        for fused in ((True, False) if r % 2 == 0 else (False, True)):
            runs.append(step(fused) | {"round": r})
            run = runs[-1]
            print(f"round {r} {'fused  ' if fused else 'unfused'} {run['seconds']:.2f} s "
                  f"(separate forward {run['separate_forward_s']:.2f} s; load "
                  f"{run['load_before']:.2f} -> {run['load_after']:.2f})", flush=True)

    summary = {}
    for name, fused in (("unfused", False), ("fused", True)):
        times = [x["seconds"] for x in runs if x["fused"] == fused]
        forwards = [x["separate_forward_s"] for x in runs if x["fused"] == fused]
        summary[name] = {"median_s": statistics.median(times), "min_s": min(times),
                         "max_s": max(times), "forward_median_s": statistics.median(forwards)}
    saved = 1 - summary["fused"]["median_s"] / summary["unfused"]["median_s"]
    print(f"\n16 rows x {tokens:.1f} tokens, SmolLM2-135M fp32, hf_train, 1 thread on core "
          f"{args.core}, {args.rounds} rounds\n")
    print("| path | median s | min s | max s | separate forward, median s |\n"
          "|---|---|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['median_s']:.2f} | {s['min_s']:.2f} | {s['max_s']:.2f} | "
              f"{s['forward_median_s']:.2f} |")
    print(f"\nfused saves {100 * saved:.1f}% of the median step")
    out = Path(__file__).parent / "results" / f"bench_fused_old_logprobs-{int(time.time())}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"tokens_per_row": tokens, "runs": runs, "summary": summary,
                               "saved_fraction": saved}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
