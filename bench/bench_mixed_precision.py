"""Benchmark: what a bf16 hf_train run keeps of the fp32 run's weight updates, before and
after fp32 master weights (issue 24, item 1; flywheel/workers/strategies/mixed_precision.py).

Three runs of hf_train's update path (`HFTrainStrategy.train_step`: the shared update loop,
clipping at 1.0, AdamW, constant rate) from the same checkpoint on the same batch, each
`--steps` optimizer steps (ppo_epochs = steps, one mini-batch each), per learning rate:

  fp32      model_args.dtype fp32: the reference update.
  bf16 old  what hf_train did before: the weights held in bf16 and AdamW stepping them
            directly, no autocast (reproduced here by casting the fp32 strategy's model to
            bf16 and rebuilding its optimizer over the bf16 parameters, which is what
            loading with dtype bf16 gave).
  bf16 new  model_args.dtype bf16 now: fp32 masters and AdamW state, forward under
            torch.autocast(bf16).

For each bf16 run: the cosine between its update (weights after minus weights before, in
fp32) and the fp32 run's, the ratio of their norms, and the fraction of weights the run left
unchanged (the fp32 run's own fraction is printed beside it: embedding rows of tokens not in
the batch get no gradient in any run). For the new path also the fraction unchanged in the
weights actor_infer receives (the masters cast to bf16): small updates accumulate in the
master and reach the engine once they cross a bf16 rounding boundary. Before training, the
log-probs of the batch's response tokens under each run are compared with fp32's, and the
reference role's (fp32 weights under the same autocast) with the actor's, beside those of
a reference that would hold its weights in bf16 (why mixed_precision.py rejects that).

The batch: times-table prompts of examples/data/times_tables_train.jsonl in the model's chat
template, each with a right answer (advantage +1) and a wrong one (advantage -1); old
log-probs are each run's own (on-policy at the first step). A model without a chat template
(the built-in tiny one) gets random token ids instead.

    .venv/bin/python bench/bench_mixed_precision.py [--model builtin://tiny-qwen2]
        [--lrs 2e-5 1e-6] [--steps 3] [--rows 16] [--threads 1]

Prints markdown tables and writes bench/results/bench_mixed_precision-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from flywheel.algorithms import PolicyLossParams
from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.strategies.hf_model import load_tokenizer
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.train_loop import optimizer_and_schedule

ROOT = Path(__file__).parents[1]
DATA = ROOT / "examples" / "data" / "times_tables_train.jsonl"
SYSTEM = "Give only the final number."  # the SmolLM2 example's system prompt


def chat_batch(path: str, rows: int, seed: int) -> TokenBatch:
    """rows/2 prompts, each with a right (+1) and a wrong (-1) answer."""
    tokenizer = load_tokenizer(path)
    rng = random.Random(seed)
    lines = DATA.read_text().splitlines()
    prompts, responses, advantages = [], [], []
    for line in rng.sample(lines, rows // 2):
        record = json.loads(line)
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": record["prompt"]}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
        answer = int(record["answer"])
        for text, advantage in ((f"{answer}", 1.0),
                                (f"The answer is {answer + rng.randint(1, 9)}.", -1.0)):
            prompts.append(list(ids))
            responses.append(tokenizer(text + "<|im_end|>",
                                       add_special_tokens=False)["input_ids"])
            advantages.append(advantage)
    batch = pack_sequences(prompts, responses, pad_id=tokenizer.pad_token_id or 0)
    batch.advantages = torch.tensor(advantages)[:, None] * batch.response_mask  # [B, L]
    return batch


def random_batch(vocab: int, rows: int, seed: int) -> TokenBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (12,), generator=g).tolist() for _ in range(rows)]
    responses = [torch.randint(3, vocab, (8,), generator=g).tolist() for _ in range(rows)]
    batch = pack_sequences(prompts, responses, pad_id=0)
    batch.advantages = torch.randn(rows, 1, generator=g) * batch.response_mask  # [B, L]
    return batch


def worker_config(dtype: str, lr: float, rows: int) -> WorkerConfig:
    return WorkerConfig(
        model_args=ModelArgs(dtype=dtype), infer_batch_size=rows,
        training_args=TrainingArgs(learning_rate=lr, per_device_train_batch_size=rows,
                                   gradient_accumulation_steps=1, max_grad_norm=1.0))


def new_strategy(path: str, dtype: str, lr: float, rows: int, steps: int) -> HFTrainStrategy:
    return HFTrainStrategy(path, worker_config(dtype, lr, rows), seed=0, total_steps=steps)


def old_bf16_strategy(path: str, lr: float, rows: int, steps: int) -> HFTrainStrategy:
    """hf_train as it was: bf16 weights, AdamW over them, no autocast and no master."""
    strategy = new_strategy(path, "fp32", lr, rows, steps)  # fp32 compute: no autocast
    strategy.model.to(torch.bfloat16)
    strategy.optimizer, strategy.scheduler = optimizer_and_schedule(
        strategy.model, strategy.cfg.training_args, steps, trainable=True)
    return strategy


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


def train(strategy: HFTrainStrategy, batch: TokenBatch, steps: int
          ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], float]:
    """Weights before and after `steps` optimizer steps on `batch`; seconds per step."""
    batch.old_log_probs = strategy.forward_logprobs(batch)  # on-policy at the first step
    before = snapshot(strategy.model)
    start = time.perf_counter()
    metrics = strategy.train_step(batch, ActorLoss("ppo", PolicyLossParams(), "token-mean"),
                                  ppo_epochs=steps)
    seconds = (time.perf_counter() - start) / steps
    assert metrics["actor/optimizer_steps"] == steps, metrics
    return before, snapshot(strategy.model), seconds


def compare(before: dict, after: dict, ref_delta: dict) -> dict[str, float]:
    """Cosine and norm ratio of this run's update against the fp32 run's; the fraction of
    weights unchanged, in the run's own weights and as bf16 (what actor_infer receives)."""
    dot = norm = ref_norm = 0.0
    unchanged = synced_unchanged = total = 0
    for name, ref in ref_delta.items():
        delta = after[name] - before[name]
        dot += float((delta.double() * ref.double()).sum())
        norm += float(delta.double().pow(2).sum())
        ref_norm += float(ref.double().pow(2).sum())
        unchanged += int((delta == 0).sum())
        synced_unchanged += int((after[name].bfloat16() == before[name].bfloat16()).sum())
        total += delta.numel()
    return {"cosine": dot / max(1e-300, (norm * ref_norm) ** 0.5),
            "norm_ratio": (norm / max(1e-300, ref_norm)) ** 0.5,
            "unchanged": unchanged / total, "synced_unchanged": synced_unchanged / total}


def logprob_gap(a: torch.Tensor, b: torch.Tensor, batch: TokenBatch) -> dict[str, float]:
    """|a - b| over the batch's response tokens."""
    mask = batch.response_mask.bool()
    gap = (a[mask] - b[mask]).abs()
    return {"mean_abs": float(gap.mean()), "max_abs": float(gap.max())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="builtin://smollm2-135m-instruct")
    parser.add_argument("--lrs", type=float, nargs="+", default=[2e-5, 1e-6])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    path = resolve_pretrain(args.model)
    probe = new_strategy(path, "fp32", 1e-6, args.rows, 1)
    has_template = getattr(load_tokenizer(path), "chat_template", None)
    batch = (chat_batch(path, args.rows, seed=0) if has_template
             else random_batch(probe.model.config.vocab_size, args.rows, seed=0))
    params = sum(p.numel() for p in probe.model.parameters())
    tokens = int(batch.attention_mask.sum())
    print(f"{args.model}: {params / 1e6:.1f}M parameters; batch {len(batch)} rows, "
          f"{tokens} tokens; {args.steps} optimizer steps per run; {args.threads} thread(s)",
          flush=True)

    # log-probs of the batch before any step, against fp32
    fp32_lp = probe.forward_logprobs(batch)
    del probe
    old = old_bf16_strategy(path, 1e-6, args.rows, 1).forward_logprobs(batch)
    actor = new_strategy(path, "bf16", 1e-6, args.rows, 1).forward_logprobs(batch)
    reference = HFTrainStrategy(path, worker_config("bf16", 1e-6, args.rows), seed=0,
                                total_steps=1, trainable=False)
    same = reference.forward_logprobs(batch)
    reference.model.to(torch.bfloat16)  # the design not taken: a reference held in bf16
    bf16_reference = reference.forward_logprobs(batch)
    gaps = {name: logprob_gap(a, b, batch) for name, a, b in (
        ("bf16 old (bf16 weights, no autocast) vs fp32", old, fp32_lp),
        ("bf16 new actor (fp32 masters, autocast) vs fp32", actor, fp32_lp),
        ("bf16 new reference (fp32 weights, autocast) vs bf16 new actor", same, actor),
        ("a reference held in bf16 (autocast) vs bf16 new actor", bf16_reference, actor))}
    print("\nlog-probs of the batch's response tokens before training\n")
    print("| forwards compared | mean abs diff | max abs diff |\n|---|---|---|")
    for name, g in gaps.items():
        print(f"| {name} | {g['mean_abs']:.2e} | {g['max_abs']:.2e} |")

    results = []
    for lr in args.lrs:
        before, after, seconds = train(new_strategy(path, "fp32", lr, args.rows, args.steps),
                                       batch, args.steps)
        ref_delta = {n: after[n] - before[n] for n in before}
        fp32_row = compare(before, after, ref_delta) | {"seconds_per_step": seconds}
        results.append({"lr": lr, "run": "fp32", **fp32_row})
        print(f"lr {lr:g} fp32: {seconds:.1f} s/step, unchanged {fp32_row['unchanged']:.4f}",
              flush=True)
        del before, after
        for run in ("bf16 old", "bf16 new"):
            strategy = (old_bf16_strategy(path, lr, args.rows, args.steps) if run == "bf16 old"
                        else new_strategy(path, "bf16", lr, args.rows, args.steps))
            before, after, seconds = train(strategy, batch, args.steps)
            del strategy
            row = compare(before, after, ref_delta) | {"seconds_per_step": seconds}
            results.append({"lr": lr, "run": run, **row})
            print(f"lr {lr:g} {run}: {seconds:.1f} s/step, cosine {row['cosine']:.4f}, "
                  f"unchanged {row['unchanged']:.4f}", flush=True)
            del before, after
        del ref_delta

    print(f"\nweight updates after {args.steps} optimizer steps, against the fp32 run's\n")
    print("| lr | run | cosine to fp32 update | norm ratio | weights unchanged "
          "| unchanged as synced (bf16) | s/step |\n|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['lr']:g} | {r['run']} | {r['cosine']:.4f} | {r['norm_ratio']:.4f} | "
              f"{r['unchanged']:.4f} | {r['synced_unchanged']:.4f} | "
              f"{r['seconds_per_step']:.1f} |")
    out = ROOT / "bench" / "results" / f"bench_mixed_precision-{int(time.time())}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "parameters": params, "rows": len(batch),
                               "tokens": tokens, "steps": args.steps, "threads": args.threads,
                               "logprob_gap_vs_fp32": gaps, "runs": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
