"""Benchmark: the RLVR pipeline on a real model, SmolLM2-135M-Instruct (fp32), vllm
generating on core 1 and hf_train training on core 0, at async_generation_ratio 0, 1, 2.

The shape of issue 18: 2 prompts x 8 samples = 16 samples of up to 24 tokens per step
(examples/rlvr_smollm2.yaml with the overrides in SHAPE), no validation, no checkpoints.
Each role is pinned to its own core in every mode, and what feeds generation (the prefetch
thread, the reward worker) sits beside it on core 1, so the modes differ only in overlap.

Per mode, over the steady steps (the first WARMUP dropped): step time (mean and median),
samples/s and the ratio to ratio 0 of the same round, and the phases:

- G = time/generate (actor_infer busy generating), T = time/logprobs + time/train;
- sync = time/weight_sync (the training side writing the weights) + time/weight_load (the
  engine loading them), and its share of the step;
- for ratio 0, step / (G + T): what the pipeline adds beyond generation and training;
- the bound on the async speedup, (G + T) / max(G, T), from ratio 0's G and T.

Generation speed: response tokens / time/generate inside the pipeline at ratio 0, against
raw vLLM (`vllm.LLM` in a Ray actor pinned to the same core, the same engine settings and
sampling, no flywheel in between) generating batches of the same shape from the same
prompt file, a new batch every call as in a run (repeating one batch would let vLLM's
prefix cache skip the prefill, which a run, resetting the cache at every weight update,
never gets).

    .venv/bin/python bench/bench_smollm2_async.py [--rounds 1] [--steps 8]

About 3 minutes per run (start-up included), so ~10 minutes a round; prints markdown and
writes bench/results/smollm2_async-<timestamp>.json. Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import ray

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_async import RESULTS, bound, markdown  # noqa: E402

from flywheel.config.schema import RayConfig  # noqa: E402
from flywheel.pipelines.config import load_config  # noqa: E402
from flywheel.pipelines.run.launch import run  # noqa: E402
from flywheel.platform.ray_runtime import start_ray  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "rlvr_smollm2.yaml"
RATIOS = (0, 1, 2)
WARMUP = 2
SHAPE = ["rollout_batch_size=2", "response_length=24",
         "actor_train.training_args.per_device_train_batch_size=16",
         "actor_train.training_args.gradient_accumulation_steps=1",
         "eval_steps=0", "validation=null", "save_steps=0", "tracking.mlflow=false",
         # every mode: training on core 0, generation and what feeds it on core 1
         "actor_train.cpu_affinity=[0]", "actor_infer.cpu_affinity=[1]",
         "prefetch_cpu_affinity=[1]", "rewards.math_rule.cpu_affinity=[1]"]
RAW_REPEATS = 6


@dataclasses.dataclass
class Run:
    ratio: int
    round: int
    step_s: float
    median_step_s: float
    samples_per_s: float
    generate_s: float  # G
    train_s: float  # T
    wait_s: float
    weight_sync_s: float
    weight_load_s: float
    gen_tokens_per_s: float  # response tokens / time/generate
    load_before: float
    load_after: float
    steps: list[dict]


def steady_mean(records: list[dict], key: str) -> float:
    return statistics.fmean(r.get(key, 0.0) for r in records[WARMUP:])


def one_run(ratio: int, rnd: int, steps: int, work: Path) -> Run:
    out = work / f"r{ratio}-round{rnd}"
    overrides = [*SHAPE, f"max_steps={steps}", f"async_generation_ratio={ratio}",
                 f"output_dir={out}"]
    load_before = os.getloadavg()[0]
    with open(work / "runs.log", "a") as log:
        stdout, sys.stdout = sys.stdout, log
        try:
            run_dir = run(load_config(CONFIG, overrides))
        finally:
            sys.stdout = stdout
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in lines if "time/step" in r]
    step_times = [r["time/step"] for r in records[WARMUP:]]
    samples = records[-1]["throughput/samples_per_s"] * records[-1]["time/step"]
    # over the steady steps together: with overlap a step's window may hold no generation
    gen_tps = (sum(r["response/length_mean"] * samples for r in records[WARMUP:])
               / max(1e-9, sum(r["time/generate"] for r in records[WARMUP:])))
    res = Run(ratio, rnd, statistics.fmean(step_times), statistics.median(step_times),
              samples / statistics.fmean(step_times), steady_mean(records, "time/generate"),
              steady_mean(records, "time/logprobs") + steady_mean(records, "time/train"),
              steady_mean(records, "time/wait_for_batch"),
              steady_mean(records, "time/weight_sync"),
              steady_mean(records, "time/weight_load"), gen_tps, load_before,
              os.getloadavg()[0],
              [{k: v for k, v in r.items() if k.startswith(("time/", "throughput/"))}
               for r in records])
    print(f"[ratio {ratio} round {rnd}] step {res.step_s:.2f} s (median "
          f"{res.median_step_s:.2f}), {res.samples_per_s:.2f} samples/s, G {res.generate_s:.2f}"
          f" T {res.train_s:.2f} wait {res.wait_s:.2f} sync {res.weight_sync_s:.3f}+"
          f"{res.weight_load_s:.3f} s, load {load_before:.1f}->{res.load_after:.1f}",
          flush=True)
    return res


@ray.remote(num_cpus=0)
class RawVLLM:
    """vLLM with the pipeline's engine settings and nothing of flywheel around it."""

    def __init__(self, model_path: str, context_length: int, seed: int):
        os.sched_setaffinity(0, {1})
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        import torch
        import vllm

        torch.set_num_threads(1)
        self.vllm = vllm
        self.llm = vllm.LLM(model=model_path, dtype="float32", seed=seed, enforce_eager=True,
                            kv_cache_memory_bytes=256 << 20, max_model_len=context_length,
                            logprobs_mode="processed_logprobs", generation_config="vllm")

    def tokens_per_s(self, batches: list[list[list[int]]], n: int, max_tokens: int
                     ) -> list[float]:
        """tokens/s of each call but the first (a warm-up), one batch of prompts a call."""
        from vllm.inputs import TokensPrompt

        rates = []
        for rep, prompts in enumerate(batches):
            params = [self.vllm.SamplingParams(n=n, max_tokens=max_tokens, temperature=1.0,
                                               seed=1000 * rep + i, logprobs=0,
                                               detokenize=False)
                      for i in range(len(prompts))]
            begin = time.perf_counter()
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                     params, use_tqdm=False)
            seconds = time.perf_counter() - begin
            tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
            if rep:
                rates.append(tokens / seconds)
        return rates


def raw_vllm_rate() -> list[float]:
    """Raw vLLM's tokens/s on the run's prompts (encoded as the pipeline encodes them),
    a new batch every call, 8 samples each, up to 24 tokens."""
    from flywheel.pipelines.data.prompt_data import load_prompts, prompt_encoder
    from flywheel.platform.models.builtin import resolve_pretrain
    from flywheel.workers.strategies.hf_model import load_tokenizer

    cfg = load_config(CONFIG, [*SHAPE, "max_steps=1"])
    path = resolve_pretrain(cfg.pretrain)
    tokenizer = load_tokenizer(path)
    records = load_prompts(cfg.actor_train.data_args, "actor_train", tokenizer,
                           cfg.prompt_length).records
    encode = prompt_encoder(tokenizer, cfg.actor_train.data_args)
    size = cfg.rollout_batch_size  # new prompts every call, as in a run (no prefix hits)
    batches = [[encode(r.prompt) for r in records[i * size:(i + 1) * size]]
               for i in range(RAW_REPEATS + 1)]
    engine = RawVLLM.remote(path, cfg.prompt_length + cfg.response_length, cfg.seed)
    try:
        return ray.get(engine.tokens_per_s.remote(batches, cfg.num_return_sequences_in_group,
                                                  cfg.response_length))
    finally:
        ray.kill(engine)


def report(runs: list[Run], raw: list[float]) -> tuple[str, dict]:
    rows, summary = [], {}
    for r in runs:
        sync = next(s for s in runs if s.ratio == 0 and s.round == r.round)
        g, t = sync.generate_s, sync.train_s
        share = (r.weight_sync_s + r.weight_load_s) / r.step_s
        rows.append([str(r.round), str(r.ratio), f"{r.step_s:.2f}", f"{r.median_step_s:.2f}",
                     f"{r.samples_per_s:.2f}", f"{r.samples_per_s / sync.samples_per_s:.2f}x",
                     f"{bound(g, t):.2f}x", f"{r.generate_s:.2f}", f"{r.train_s:.2f}",
                     f"{r.wait_s:.2f}", f"{r.weight_sync_s:.3f}", f"{r.weight_load_s:.3f}",
                     f"{share:.1%}",
                     f"{r.step_s / (r.generate_s + r.train_s):.2f}" if r.ratio == 0 else "-",
                     f"{r.gen_tokens_per_s:.0f}", f"{r.load_before:.1f}/{r.load_after:.1f}"])
        summary.setdefault(r.ratio, []).append(
            {"speedup": r.samples_per_s / sync.samples_per_s, "bound": bound(g, t),
             "sync_share": share, "step_over_g_plus_t": r.step_s / (r.generate_s + r.train_s)})
    table = markdown(["round", "ratio", "step s", "median", "samples/s", "vs ratio 0",
                      "bound", "G s", "T s", "wait s", "weight_sync s", "weight_load s",
                      "sync share", "step/(G+T)", "gen tok/s", "load"], rows)
    pipeline = statistics.median(r.gen_tokens_per_s for r in runs if r.ratio == 0)
    raw_rate = statistics.median(raw)
    table += (f"\n\nGeneration at ratio 0: {pipeline:.0f} tokens/s inside the pipeline "
              f"(response tokens / time/generate) vs raw vLLM {raw_rate:.0f} tokens/s "
              f"(median of {len(raw)} calls, same prompts and core): "
              f"{pipeline / raw_rate:.2f} of raw.")
    return table, {"per_ratio": summary, "pipeline_tokens_per_s": pipeline,
                   "raw_vllm_tokens_per_s": raw, "pipeline_over_raw": pipeline / raw_rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8, help="max_steps per run")
    args = parser.parse_args()
    if args.steps <= WARMUP or args.rounds < 1:
        parser.error(f"--steps must exceed the {WARMUP} warm-up steps; --rounds >= 1")
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
          flush=True)
    start_ray(RayConfig(), num_slots=2)
    work = Path(tempfile.mkdtemp(prefix="bench_smollm2-"))
    print(f"run output and logs: {work}", flush=True)
    runs = []
    try:
        for rnd in range(args.rounds):
            order = RATIOS if rnd % 2 == 0 else RATIOS[::-1]
            runs += [one_run(ratio, rnd, args.steps, work) for ratio in order]
        raw = raw_vllm_rate()
    finally:
        ray.shutdown()
    table, figures = report(runs, raw)
    print("\n" + table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"smollm2_async-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "shape": SHAPE, "figures": figures,
                               "runs": [dataclasses.asdict(r) for r in runs]}, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
