"""Benchmark: flywheel against TRL's GRPOTrainer, the peer a user would pick on one
machine, on the task of examples/rlvr_smollm2.yaml (issue 28, item 2).

Per seed, one after the other: TRL (bench/trl_grpo_run.py in `.venv-trl`, `make
trl-venv`; 2 threads, transformers' generate), flywheel at async_generation_ratio 0
(the example as shipped: both roles on both cores, taking turns, bf16) and at ratio 1
(the same, split: vllm on core 1, hf_train on core 0, as the example shipped before).
Same model, data, chat template and system prompt, 8 prompts x 8 samples
per step, 16 new tokens, T=1, lr 2e-5, one optimizer step per 64 samples, no KL,
flywheel's math_rule as the reward on both sides.

Accuracy: one greedy evaluator for all - flywheel's validation (363 prompts, vllm, greedy)
on the weights before training (each flywheel run's step 0) and after N steps (flywheel's
last step; TRL's saved final folder, validated by a flywheel run of max_steps=0).

    .venv/bin/python bench/bench_vs_trl.py [--steps 5] [--seeds 1]

Each run is several minutes on 2 cores; prints one markdown table and writes
bench/results/vs_trl-<timestamp>.json. Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run
from flywheel.platform.models.builtin import resolve_pretrain

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "rlvr_smollm2.yaml"
TRAIN_DATA = ROOT / "examples" / "data" / "times_tables_train.jsonl"
TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"
RESULTS = ROOT / "bench" / "results"
WARMUP = 1  # steps left out of the steady figure (model load, first compilation)
SAMPLES_PER_STEP = 64
COMMON = ["save_steps=0", "tracking.mlflow=false"]
LAYOUTS = {
    # as shipped: both roles on both cores, taking turns (the phase switch), bf16
    "flywheel r=0": [],
    # the async split the example shipped before: vllm and what feeds it on core 1,
    # hf_train on core 0, generation one step ahead
    "flywheel r=1": ["async_generation_ratio=1", "actor_infer.device_mapping=[1]",
                     "actor_train.cpu_affinity=[0]", "actor_infer.cpu_affinity=[1]",
                     "prefetch_cpu_affinity=[1]", "rewards.math_rule.cpu_affinity=[1]"],
    # one step ahead with both roles on both cores: generation shares the training cores
    "flywheel r=1 shared": ["async_generation_ratio=1", "actor_infer.device_mapping=[1]"],
}


@dataclasses.dataclass
class Result:
    system: str
    seed: int
    step_s: list[float]
    val_before: float
    val_after: float
    wall_s: float

    @property
    def steady_s(self) -> float:
        return statistics.fmean(self.step_s[WARMUP:] or self.step_s)

    @property
    def samples_per_s(self) -> float:
        return SAMPLES_PER_STEP / self.steady_s


def flywheel_run(overrides: list[str], out: Path) -> list[dict]:
    """One `platform run` of the example with `overrides`; its metrics.jsonl records."""
    with open(out.parent / "runs.log", "a") as log:
        stdout, sys.stdout = sys.stdout, log
        try:
            run_dir = run(load_config(CONFIG, [*COMMON, *overrides, f"output_dir={out}"]))
        finally:
            sys.stdout = stdout
    for checkpoint in run_dir.glob("checkpoint-*"):  # ~1.6 GB each: a 3-seed run made 17 GB
        shutil.rmtree(checkpoint)
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def validation(records: list[dict], step: int) -> float:
    return next(r["val/accuracy"] for r in records
                if r.get("step") == step and "val/accuracy" in r)


def run_flywheel(name: str, seed: int, steps: int, work: Path) -> Result:
    start = time.perf_counter()
    records = flywheel_run([*LAYOUTS[name], f"seed={seed}", f"max_steps={steps}",
                            f"eval_steps={steps}"], work / f"{name.replace(' ', '_')}-{seed}")
    wall = time.perf_counter() - start
    # a step's own time: the validation that ends the last step is not part of training
    step_s = [r["time/step"] - r.get("time/validate", 0.0) for r in records
              if "time/step" in r]
    return Result(name, seed, step_s, validation(records, 0), validation(records, steps), wall)


def run_trl(model: str, seed: int, steps: int, work: Path) -> Result:
    out = work / f"trl-{seed}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"}
    start = time.perf_counter()
    with open(work / "trl.log", "a") as log:
        subprocess.run([str(TRL_PYTHON), str(ROOT / "bench" / "trl_grpo_run.py"),
                        "--model", model, "--data", str(TRAIN_DATA), "--out", str(out),
                        "--steps", str(steps), "--seed", str(seed), "--threads", "2"],
                       check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    step_s = json.loads((out / "steps.json").read_text())["step_s"]
    # the same evaluator as flywheel's runs: its validation, on TRL's final weights
    records = flywheel_run([*LAYOUTS["flywheel r=0"], f"pretrain={out / 'final'}",
                            "max_steps=0", "eval_steps=1"], work / f"trl-eval-{seed}")
    after = validation(records, 0)
    shutil.rmtree(out / "final")  # TRL's weights, validated
    return Result("TRL GRPOTrainer", seed, step_s, float("nan"), after, wall)


def table(results: list[Result], steps: int) -> str:
    before = [r.val_before for r in results if r.val_before == r.val_before]
    base = statistics.fmean(before) if before else float("nan")
    rows = [f"| {steps} steps, seed | s/step (steady) | samples/s | val accuracy step 0 -> "
            f"{steps} (greedy, flywheel's validation) | wall |", "|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.system}, seed {r.seed} | {r.steady_s:.1f} | {r.samples_per_s:.2f} "
                    f"| {base:.3f} -> {r.val_after:.3f} | {r.wall_s:.0f} s |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seeds", type=int, default=1, help="seeds 1..N (the issue asks for 3)")
    p.add_argument("--from-seed", type=int, default=1, help="start at this seed (a split run)")
    p.add_argument("--only", nargs="*", default=["trl", *LAYOUTS],
                   help="subset of: trl, 'flywheel r=0', 'flywheel r=1', "
                        "'flywheel r=1 shared'")
    a = p.parse_args()
    if "trl" in a.only and not TRL_PYTHON.exists():
        sys.exit("no .venv-trl: run `make trl-venv` first")
    model = resolve_pretrain("builtin://smollm2-135m-instruct")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / f"vs_trl-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in range(a.from_seed, a.seeds + 1):
        for name in [n for n in ("trl", *LAYOUTS) if n in a.only]:
            load = os.getloadavg()[0]
            res = (run_trl(model, seed, a.steps, work) if name == "trl"
                   else run_flywheel(name, seed, a.steps, work))
            print(f"[{res.system} seed {seed}] {res.steady_s:.1f} s/step, "
                  f"val after {res.val_after:.3f}, load {load:.1f}->{os.getloadavg()[0]:.1f}",
                  flush=True)
            results.append(res)
    text = table(results, a.steps)
    print(text)
    (RESULTS / f"vs_trl-{stamp}.json").write_text(json.dumps(
        {"steps": a.steps, "table": text,
         "runs": [dataclasses.asdict(r) | {"steady_s": r.steady_s,
                                           "samples_per_s": r.samples_per_s}
                  for r in results]}, indent=1))


if __name__ == "__main__":
    main()
