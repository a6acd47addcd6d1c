"""Peak memory of log-probs at a real vocabulary: a train step and a generate call on
SmolLM2-135M (49k-token vocabulary) at 64 sequences x 256 tokens.

Each measurement runs in a fresh process (peak RSS from getrusage, minus the RSS after
loading the model), once with the shipped code and once with it emulating the old
whole-batch computation: `--whole` sets hf_model.LOGIT_CHUNK_POSITIONS past the batch (one
[B, L, V] logits tensor, as before the chunking) and, for generation, asks transformers
for every step's scores (output_scores), as hf_infer did before.

    .venv/bin/python bench/bench_logprob_memory.py            # all four, ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

ROWS, PROMPT, RESPONSE = 64, 32, 224  # 64 x 256 tokens


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def measure(what: str, whole: bool) -> dict:
    import torch

    from flywheel.algorithms import PolicyLossParams
    from flywheel.config.schema import TrainingArgs, WorkerConfig
    from flywheel.platform.models.builtin import resolve_pretrain
    from flywheel.workers.actor_loss import ActorLoss
    from flywheel.workers.batch import pack_sequences
    from flywheel.workers.strategies import hf_model
    from flywheel.workers.strategies.base import SamplingParams

    torch.set_num_threads(2)
    path = resolve_pretrain("builtin://smollm2-135m-instruct")
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 40000, (PROMPT,), generator=gen).tolist() for _ in range(ROWS)]
    if whole:
        hf_model.LOGIT_CHUNK_POSITIONS = 10**9
    if what == "train":
        from flywheel.workers.strategies.hf_train import HFTrainStrategy

        args = TrainingArgs(per_device_train_batch_size=16, gradient_accumulation_steps=4)
        strategy = HFTrainStrategy(path, WorkerConfig(training_args=args), seed=0,
                                   total_steps=1)
        responses = [torch.randint(100, 40000, (RESPONSE,), generator=gen).tolist()
                     for _ in range(ROWS)]
        batch = pack_sequences(prompts, responses, pad_id=0)
        batch.old_log_probs = torch.zeros_like(batch.response_mask)
        batch.advantages = torch.ones_like(batch.response_mask)
        base, started = rss_mb(), time.time()
        strategy.train_step(batch, ActorLoss("ppo", PolicyLossParams(), "token-mean"))
    else:
        from flywheel.workers.strategies.hf_infer import HFInferStrategy

        strategy = HFInferStrategy(path, WorkerConfig(infer_batch_size=ROWS), seed=0)
        if whole:  # the old path: every step's [B, V] scores kept by generate
            config = strategy.generation_config
            strategy.generation_config = lambda *a: _with_scores(config(*a))
        base, started = rss_mb(), time.time()
        strategy.generate(prompts, SamplingParams(max_new_tokens=RESPONSE, n=1,
                                                  stop_token_ids=[], seed=0))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"what": what, "whole_batch": whole, "peak_above_model_mb": round(peak - base),
            "seconds": round(time.time() - started, 1)}


def _with_scores(config):
    config.output_scores = True
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=2, metavar=("WHAT", "WHOLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], args.one[1] == "1")))
        return
    rows = []
    for what in ("train", "generate"):
        for whole in (True, False):
            out = subprocess.run([sys.executable, __file__, "--one", what, str(int(whole))],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    print("\n| call (64 x 256 tokens, SmolLM2) | whole batch (before) | chunked (now) |")
    print("|---|---|---|")
    for what in ("train", "generate"):
        before = next(r for r in rows if r["what"] == what and r["whole_batch"])
        now = next(r for r in rows if r["what"] == what and not r["whole_batch"])
        print(f"| {what} | {before['peak_above_model_mb']} MB ({before['seconds']} s) "
              f"| {now['peak_above_model_mb']} MB ({now['seconds']} s) |")


if __name__ == "__main__":
    main()
