"""Benchmark: full fine-tuning against LoRA on the shape of examples/rlvr_smollm2.yaml, side
by side in one run (issue 27).

Three parts, each variant in a process of its own (its peak RSS is its own):

  step   actor_train alone (hf_train, SmolLM2-135M-Instruct, fp32): seconds per train step
         on the example's step (the second; the first warms up): 8 prompts x 8 samples,
         1-16 response tokens, one optimizer step of 2 micro-batches of 32 rows
         (bench_train_step.py's batches); peak RSS; and
         what one weight sync sends and how long reading it out takes: every weight for the
         full fine-tune; for LoRA the merged weights (lora_sync: merged) or A and B alone
         (lora_sync: adapter). Full: lr 2e-5; LoRA: rank 32, alpha 32, lr 2e-4 (the
         examples' settings: rlvr_smollm2_lora.yaml says why 10x).
  serve  actor_infer alone (vllm): loading one sync (merged weights streamed into the
         engine, or a new adapter) and greedy generation of the example's 64 rows x 16
         tokens on the base model, merged weights, and the served adapter (vLLM adds
         (alpha / r) B A x per adapted layer at run time).
  runs   `platform run` of examples/rlvr_smollm2.yaml and rlvr_smollm2_lora.yaml (and the
         latter with lora_sync: adapter when --adapter-run), --steps steps each, one after
         the other: seconds per step (steady: steps 2..N), time/train, time/weight_sync,
         and validation accuracy (363 held-out prompts, greedy) at step 0 and step N.

    PYTHONPATH=. nice -n 19 .venv/bin/python bench/bench_lora.py [--parts step,serve,runs]
        [--steps 10] [--adapter-run]

Prints markdown tables and writes bench/results/bench_lora-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
TRAIN_VARIANTS = ("full", "lora merged", "lora adapter")
LORA = {"lora_target": "all-linear", "lora_rank": 32, "lora_alpha": 32.0}


def trainer(variant: str):
    from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
    from flywheel.platform.models.builtin import resolve_pretrain
    from flywheel.workers.strategies.hf_train import HFTrainStrategy

    path = resolve_pretrain("builtin://smollm2-135m-instruct")
    lora = {} if variant == "full" else {**LORA, "lora_sync": variant.split()[1]}
    args = TrainingArgs(learning_rate=2e-5 if variant == "full" else 2e-4, max_grad_norm=1.0,
                        per_device_train_batch_size=32, gradient_accumulation_steps=2)
    cfg = WorkerConfig(training_args=args, infer_batch_size=64,
                       model_args=ModelArgs(dtype="fp32", **lora))
    return path, HFTrainStrategy(path, cfg, seed=0, total_steps=100)


def run_step(variant: str, steps: int) -> dict:
    import dataclasses

    import torch
    from bench_train_step import step_batches

    from flywheel.algorithms import MismatchCorrection, PolicyLossParams
    from flywheel.workers.actor_loss import ActorLoss
    from flywheel.workers.strategies.fused_old_logprobs import FusedOldLogProbs
    from flywheel.workers.strategies.hf_model import load_tokenizer

    torch.manual_seed(0)
    path, strategy = trainer(variant)
    loss = ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean")
    seconds = []
    for batch in step_batches(load_tokenizer(path), steps):
        start = time.perf_counter()
        strategy.train_step(dataclasses.replace(batch), FusedOldLogProbs(loss,
                                                                         MismatchCorrection()))
        seconds.append(time.perf_counter() - start)
    start = time.perf_counter()
    synced = {k: v.to("cpu", copy=True) for k, v in strategy.weights_for_sync()}
    read_s = time.perf_counter() - start
    return {"variant": variant, "step_s": seconds, "sync_read_s": read_s,
            "sync_mb": sum(t.numel() * t.element_size() for t in synced.values()) / 2**20,
            "sync_tensors": len(synced),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load": os.getloadavg()[0]}


def run_serve() -> dict:
    """One vllm engine serving adapters: load times and greedy generation rates."""
    import torch

    from flywheel.config.schema import WorkerConfig
    from flywheel.pipelines.data.prompt_data import PromptEncoder
    from flywheel.workers.strategies.base import SamplingParams
    from flywheel.workers.strategies.hf_model import load_tokenizer
    from flywheel.workers.strategies.vllm_adapters import AdapterSpec
    from flywheel.workers.strategies.vllm_infer import VLLMInferStrategy

    path, merged_trainer = trainer("lora merged")
    _, adapter_trainer = trainer("lora adapter")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # an adapter that moved, as after training (B != 0)
        for a, b in zip(merged_trainer.model.parameters(), adapter_trainer.model.parameters()):
            if a.requires_grad:
                a.add_(torch.randn(a.shape, generator=generator) * 0.01)
                b.copy_(a)
    merged = {k: v.to("cpu", copy=True) for k, v in merged_trainer.weights_for_sync()}
    adapter = {k: v.to("cpu", copy=True) for k, v in adapter_trainer.weights_for_sync()}
    del merged_trainer, adapter_trainer
    encode = PromptEncoder(load_tokenizer(path), "chat", "Give only the final number.")
    prompts = [encode(f"What is {a} times {b}?") for a in range(2, 10) for b in range(2, 10)]
    greedy = SamplingParams(max_new_tokens=16, n=1, do_sample=False)
    out = {}
    for name, spec, weights in (("merged", None, merged),
                                ("adapter", AdapterSpec(32, 32.0), adapter)):
        engine = VLLMInferStrategy(path, WorkerConfig(), seed=0, context_length=80,
                                   lora_adapter=spec)
        engine.generate(prompts[:4], greedy)  # warm-up
        start = time.perf_counter()
        gens = engine.generate(prompts, greedy)
        base_s = time.perf_counter() - start
        start = time.perf_counter()
        engine.update_weights(weights, version=1)
        load_s = time.perf_counter() - start
        engine.generate(prompts[:4], greedy)
        start = time.perf_counter()
        gens = engine.generate(prompts, greedy)
        tuned_s = time.perf_counter() - start
        tokens = sum(len(g.token_ids) for g in gens)
        out[name] = {"load_s": load_s, "base_gen_s": base_s, "gen_s": tuned_s,
                     "tokens": tokens, "greedy": [g.token_ids for g in gens]}
        engine.loop.exclusive(lambda: None)
        del engine
    out["same_greedy"] = out["merged"]["greedy"] == out["adapter"]["greedy"]
    for name in ("merged", "adapter"):
        del out[name]["greedy"]
    return out


# The full fine-tune in the LoRA example's layout and precision (r = 1, vllm on core 1 and
# hf_train on core 0, fp32, gradient checkpointing), which rlvr_smollm2.yaml shipped until
# it moved to r = 0 in bf16: the two runs differ only in what trains.
LORA_EXAMPLE_LAYOUT = [
    "async_generation_ratio=1", "actor_infer.device_mapping=[1]",
    "actor_train.cpu_affinity=[0]", "actor_infer.cpu_affinity=[1]", "prefetch_cpu_affinity=[1]",
    "rewards.math_rule.cpu_affinity=[1]", "actor_train.model_args.dtype=fp32",
    "actor_infer.model_args.dtype=fp32",
    "actor_train.model_args.disable_gradient_checkpointing=false"]


def run_config(config: str, steps: int, work: Path, extra: list[str]) -> dict:
    out = work / Path(config).stem / ("_".join(extra) or "run")
    command = [sys.executable, "-m", "flywheel", "run", "--config", config,
               f"output_dir={out}", f"max_steps={steps}", f"eval_steps={steps}",
               "save_steps=0", "tracking.mlflow=false", *extra]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = [r for r in rows if r["step"] >= 2]

    def mean(key: str) -> float:
        values = [r[key] for r in steady if key in r]
        return sum(values) / len(values) if values else float("nan")

    val = {r["step"]: r["val/accuracy"] for r in rows if "val/accuracy" in r}
    return {"config": config, "extra": extra, "wall_s": wall, "step_s": mean("time/step"),
            "train_s": mean("time/train"), "sync_s": mean("time/weight_sync"),
            "val_start": val.get(0), "val_end": val.get(steps)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="step,serve,runs")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--adapter-run", action="store_true")
    parser.add_argument("--variant")  # internal: one train variant, JSON out
    parser.add_argument("--serve", action="store_true")  # internal: the serve part
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_step(args.variant, 2)))
        return
    if args.serve:
        print(json.dumps(run_serve()))
        return
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'bench'}"}
    parts, results = args.parts.split(","), {}
    print(f"SmolLM2-135M-Instruct, examples/rlvr_smollm2*.yaml shape, {os.cpu_count()} cores\n")
    if "step" in parts:
        print("| actor_train | s/step (step 2) | peak RSS MiB | sync MiB | sync tensors | "
              "sync read s |\n|---|---|---|---|---|---|", flush=True)
        results["step"] = []
        for variant in TRAIN_VARIANTS:
            done = subprocess.run([sys.executable, __file__, "--variant", variant], env=env,
                                  check=True, capture_output=True, text=True)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            results["step"].append(r)
            timed = r["step_s"][1:]
            print(f"| {variant} | {sum(timed) / len(timed):.2f} | {r['peak_rss_mib']:.0f} | "
                  f"{r['sync_mb']:.1f} | {r['sync_tensors']} | {r['sync_read_s']:.2f} |",
                  flush=True)
    if "serve" in parts:
        done = subprocess.run([sys.executable, __file__, "--serve"], env=env, check=True,
                              capture_output=True, text=True)
        r = results["serve"] = json.loads(done.stdout.strip().splitlines()[-1])
        print("\n| vllm sync | load s | greedy 64x16 s, base | s, after the sync | tokens |"
              "\n|---|---|---|---|---|")
        for name in ("merged", "adapter"):
            s = r[name]
            print(f"| {name} | {s['load_s']:.2f} | {s['base_gen_s']:.2f} | {s['gen_s']:.2f} | "
                  f"{s['tokens']} |")
        print(f"\nsame greedy tokens, merged vs adapter: {r['same_greedy']}", flush=True)
    if "runs" in parts:
        work = Path(tempfile.mkdtemp(prefix="bench_lora-"))
        runs = [("examples/rlvr_smollm2.yaml", LORA_EXAMPLE_LAYOUT),
                ("examples/rlvr_smollm2_lora.yaml", [])]
        if args.adapter_run:
            runs.append(("examples/rlvr_smollm2_lora.yaml",
                         ["actor_train.model_args.lora_sync=adapter"]))
        print(f"\n| run ({args.steps} steps) | wall s | s/step | train s | sync s | "
              f"val acc step 0 | val acc step {args.steps} |\n|---|---|---|---|---|---|---|",
              flush=True)
        results["runs"] = []
        for config, extra in runs:
            r = run_config(config, args.steps, work, extra)
            results["runs"].append(r)
            print(f"| {Path(config).stem} {' '.join(extra)} | {r['wall_s']:.0f} | "
                  f"{r['step_s']:.1f} | {r['train_s']:.1f} | {r['sync_s']:.2f} | "
                  f"{r['val_start']:.3f} | {r['val_end']:.3f} |", flush=True)
    out = ROOT / "bench" / "results" / f"bench_lora-{int(time.time())}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
