"""Benchmark: generation throughput and weight-sync time of the inference backends.

Same model, same prompts, each backend in this one process (no Ray, so the figures are the
engines' own): `P` prompts x n samples x up to `T` new tokens, sampled at temperature 1.
The first call warms up (vLLM compiles/plans on it); the second is timed and its
generated tokens (stop tokens end a sample early) divided by its wall time is tokens/s.
Weight sync: `update_weights` with a trainer's full state dict (hf_train's, HF names),
repeated, median reported; for vllm this is write-to-/dev/shm + in-place reload + prefix
cache reset. Also the largest |log-prob| gap between what each backend reported while
sampling and hf_train's forward on the same sequences (the train/infer mismatch floor).

hf_infer runs first: vLLM's CPU worker replaces torch.set_num_threads process-wide.
The 1-minute load average is recorded before and after: other jobs distort the figures.

    .venv/bin/python bench/bench_inference.py [--prompts 64 --n 8 --tokens 32]

Prints a markdown table and writes bench/results/bench_inference-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

import torch

from flywheel.config.schema import WorkerConfig
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.registry import strategy_class

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
SYNC_REPEATS = 5


def prompts_for(count: int) -> list[list[int]]:
    """`count` arithmetic-shaped prompts of the char tokenizer's ids (bos, digits, +, =)."""
    return [[1, 20 + i % 10, 21 + (i // 10) % 9, 15, 22 + i % 7, 23 + i % 5, 33]
            for i in range(count)]


def bench_backend(name: str, model_path: str, prompts: list[list[int]], n: int, tokens: int,
                  trainer: HFTrainStrategy) -> dict:
    started = time.perf_counter()
    strategy = strategy_class(name)(model_path, WorkerConfig(infer_batch_size=len(prompts)),
                                    seed=0)
    result: dict = {"backend": name, "start_s": time.perf_counter() - started}
    for call in ("first", "second"):
        sampling = SamplingParams(max_new_tokens=tokens, n=n, seed=len(call))
        begin = time.perf_counter()
        gens = strategy.generate(prompts, sampling)
        seconds = time.perf_counter() - begin
        generated = sum(len(g.token_ids) for g in gens)
        result[f"{call}_call_s"] = seconds
        result[f"{call}_tokens_per_s"] = generated / seconds
    result["generated_tokens"] = generated
    batch = pack_sequences([prompts[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                           pad_id=0, infer_log_probs=[g.log_probs for g in gens])
    mask = batch.response_mask.bool()
    gap = (trainer.forward_logprobs(batch) - batch.infer_log_probs)[mask].abs().max()
    result["logprob_gap_vs_hf_train"] = float(gap)
    weights = trainer.state_dict_for_sync()
    times = []
    for version in range(1, SYNC_REPEATS + 1):
        begin = time.perf_counter()
        strategy.update_weights(weights, version)
        times.append(time.perf_counter() - begin)
    result["weight_sync_ms_median"] = 1000 * statistics.median(times)
    result["weight_sync_ms_all"] = [1000 * t for t in times]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default="builtin://tiny-qwen2")
    args = parser.parse_args()
    model_path = resolve_pretrain(args.model)
    prompts = prompts_for(args.prompts)
    trainer = HFTrainStrategy(model_path, WorkerConfig(infer_batch_size=64), seed=0,
                              total_steps=1, trainable=False)
    backends = ["hf_infer"] + (["vllm"] if importlib.util.find_spec("vllm") else [])
    load_before = os.getloadavg()[0]
    rows = [bench_backend(b, model_path, prompts, args.n, args.tokens, trainer)
            for b in backends]
    report = {"model": args.model, "prompts": args.prompts, "n": args.n,
              "max_new_tokens": args.tokens, "torch_threads": torch.get_num_threads(),
              "cpu_count": os.cpu_count(), "load_avg_1m_before": load_before,
              "load_avg_1m_after": os.getloadavg()[0], "results": rows}
    print(f"\n{args.prompts} prompts x n={args.n} x <= {args.tokens} new tokens, "
          f"{args.model}; load avg {load_before:.1f} -> {report['load_avg_1m_after']:.1f}\n")
    print("| backend | start s | 1st call tok/s | 2nd call tok/s | weight sync ms (median) "
          "| log-prob gap vs hf_train |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['backend']} | {r['start_s']:.1f} | {r['first_tokens_per_s']:,.0f} | "
              f"{r['second_tokens_per_s']:,.0f} | {r['weight_sync_ms_median']:.1f} | "
              f"{r['logprob_gap_vs_hf_train']:.1e} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bench_inference-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
