"""Benchmark: actor_train's train step on the shape of examples/rlvr_smollm2.yaml, with the
padding and per-token work of issue 28 items 3-4 off and on, side by side in one run.

SmolLM2-135M-Instruct on hf_train; the example's step: 8 real prompts of its data file
(examples/data/times_tables_train.jsonl) under its chat template and system prompt, x 8
samples, responses of 1-16 tokens (random tokens: only shapes matter for time), GRPO-like
advantages (one per row), ppo / seq-mean-token-mean, lr 2e-5, clip 1.0, one optimizer step
of 2 micro-batches of 32 rows, old log-probs taken from the training forward (the
worker's path for a one-optimizer-step update, fused_old_logprobs.py). Each variant runs
`--steps` steps from the same weights over the same batches in a process of its own
(its peak RSS is its own); step 1 is a warm-up and left out of tokens/s.

Variants:
  baseline        the head and log-softmax at every position, fixed row micro-batches
  response_head   the head only at response positions (hf_model.sequence_logprobs)
  + dynamic       and micro-batches cut by a token budget (training_args.dynamic_batching)
  + packing       and rows packed end to end, PACK_WIDTH tokens a row
                  (training_args.sequence_packing)
  + bf16          and model_args.dtype bf16 (autocast, fp32 master weights)
  + nockpt        and model_args.disable_gradient_checkpointing (the example's setting)
  + shared        and each prompt once for its 8 samples (sequence_packing with
                  shared_prefix_packing, one group to a pack), micro-batches of 32 rows
                  (4 whole groups; dynamic batching sorts rows by length, which splits them)

The loss curve: the mean log-prob of the batch's response tokens before each step (from
the fused old log-probs) and each step's gradient norm: the first fp32 variants must agree
within fp32 tolerance, bf16 within its rounding.

    PYTHONPATH=. nice -n 19 .venv/bin/python bench/bench_train_step.py [--steps N]

Prints a markdown table and writes bench/results/bench_train_step-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("baseline", "response_head", "response_head+dynamic", "response_head+dynamic+packing",
            "response_head+shared", "response_head+dynamic+bf16",
            "response_head+dynamic+bf16+nockpt", "response_head+bf16+nockpt+shared")
PACK_WIDTH = 128  # packed-row width: 3-4 of the example's 29-44-token rows to a row
PROMPTS, SAMPLES = 8, 8
DATA = Path(__file__).parents[1] / "examples" / "data" / "times_tables_train.jsonl"


def step_batches(tokenizer, steps: int):
    import torch

    from flywheel.pipelines.data.prompt_data import PromptEncoder
    from flywheel.workers.batch import pack_sequences

    records = [json.loads(line) for line in DATA.read_text().splitlines()[:PROMPTS * steps]]
    encode = PromptEncoder(tokenizer, "chat", "Give only the final number.")
    g = torch.Generator().manual_seed(0)
    batches = []
    for s in range(steps):
        prompts, responses = [], []
        for record in records[s * PROMPTS:(s + 1) * PROMPTS]:
            ids = encode(record["prompt"])
            for _ in range(SAMPLES):
                n = int(torch.randint(1, 17, (1,), generator=g))
                prompts.append(ids)
                responses.append(torch.randint(100, tokenizer.vocab_size, (n,),
                                               generator=g).tolist())
        logps = [(-torch.rand(len(r), generator=g) * 3).tolist() for r in responses]
        batch = pack_sequences(prompts, responses, tokenizer.pad_token_id or 0,
                               infer_log_probs=logps)
        adv = torch.randn(PROMPTS, SAMPLES, generator=g)  # [P, S]
        adv = (adv - adv.mean(1, keepdim=True)) / adv.std(1, keepdim=True)  # GRPO groups
        batch.advantages = adv.reshape(-1, 1) * batch.response_mask  # [B, L]
        batches.append(batch)
    return batches


def run_variant(variant: str, steps: int) -> dict:
    import dataclasses

    import torch

    import flywheel.workers.strategies.model_head as model_head
    from flywheel.algorithms import MismatchCorrection, PolicyLossParams
    from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
    from flywheel.platform.models.builtin import resolve_pretrain
    from flywheel.workers.actor_loss import ActorLoss
    from flywheel.workers.strategies.fused_old_logprobs import FusedOldLogProbs
    from flywheel.workers.strategies.hf_model import load_tokenizer
    from flywheel.workers.strategies.hf_train import HFTrainStrategy

    if variant == "baseline":  # the head at every position, as before issue 28
        full = model_head.sequence_logprobs
        model_head.sequence_logprobs = lambda *a: full(*a[:5])
    path = resolve_pretrain("builtin://smollm2-135m-instruct")
    args = TrainingArgs(learning_rate=2e-5, max_grad_norm=1.0, per_device_train_batch_size=32,
                        gradient_accumulation_steps=2,
                        dynamic_batching="dynamic" in variant, max_tokens_per_micro_batch=1024,
                        sequence_packing="packing" in variant or "shared" in variant,
                        max_packed_sequence_length=0 if "shared" in variant else PACK_WIDTH,
                        shared_prefix_packing="shared" in variant)
    cfg = WorkerConfig(training_args=args, infer_batch_size=64,
                       model_args=ModelArgs(dtype="bf16" if "bf16" in variant else "fp32",
                                            disable_gradient_checkpointing="nockpt" in variant))
    torch.manual_seed(0)
    strategy = HFTrainStrategy(path, cfg, seed=0, total_steps=100)
    batches = step_batches(load_tokenizer(path), steps)
    loss = ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean")
    out = {"variant": variant, "steps": []}
    for batch in batches:
        fused = FusedOldLogProbs(loss, MismatchCorrection())
        start = time.perf_counter()
        metrics = strategy.train_step(dataclasses.replace(batch), fused)
        seconds = time.perf_counter() - start
        logp = sum(float((old * mask).sum()) for old, _, mask in fused.seen)
        out["steps"].append({
            "seconds": seconds, "tokens": int(batch.attention_mask.sum()),
            "response_logprob_mean": logp / float(batch.response_mask.sum()),
            "grad_norm": metrics["actor/grad_norm"], "load": os.getloadavg()[0]})
        print(f"{variant}: step {len(out['steps'])} {seconds:.1f} s", file=sys.stderr,
              flush=True)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--variant")  # internal: one variant, JSON out
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.steps)))
        return
    print(f"\nSmolLM2-135M, hf_train, {PROMPTS}x{SAMPLES} rows, one optimizer step per step, "
          f"{args.steps} steps (step 1 warm-up), {os.cpu_count()} cores\n")
    print("| variant | tokens/s | x baseline | peak RSS MiB | response log-prob per step | "
          "grad norm per step | load |\n|---|---|---|---|---|---|---|", flush=True)
    results, base = [], None
    for variant in args.variants.split(","):  # each row printed as its variant ends
        done = subprocess.run([sys.executable, __file__, "--variant", variant, "--steps",
                               str(args.steps)], check=True, capture_output=True, text=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(r)
        timed = r["steps"][1:] or r["steps"]
        rate = sum(s["tokens"] for s in timed) / sum(s["seconds"] for s in timed)
        base = base or rate
        logps = " ".join(f"{s['response_logprob_mean']:.6f}" for s in r["steps"])
        norms = " ".join(f"{s['grad_norm']:.6f}" for s in r["steps"])
        load = max(s["load"] for s in r["steps"])
        print(f"| {r['variant']} | {rate:.1f} | {rate / base:.2f} | {r['peak_rss_mib']:.0f} | "
              f"{logps} | {norms} | {load:.1f} |", flush=True)
    out = Path(__file__).parent / "results" / f"bench_train_step-{int(time.time())}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
