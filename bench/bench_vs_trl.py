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

The DPO part (`--dpo`, its own functions below): TRL's DPOTrainer (bench/trl_dpo_run.py
in `.venv-trl`) and flywheel's DPO (examples/dpo_smollm2.yaml) on the same pairs as the
same token ids (flywheel encodes them, TRL trains on those ids in that order), the same
model, batch, beta, learning rate (constant) and steps, in fp32: the loss and reward
margin per step (the first 5 must agree to 1e-4), pairs/s of each, and the greedy val
accuracy of the weights each ends with (one evaluator for both).

    .venv/bin/python bench/bench_vs_trl.py --dpo [--steps 20] [--pairs 8] [--val 363]

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


# ---- DPO: TRL's DPOTrainer and flywheel's DPO on the same tokenized pairs (issue 46) -------
DPO_CONFIG = ROOT / "examples" / "dpo_smollm2.yaml"
DPO_TRL_RUN = ROOT / "bench" / "trl_dpo_run.py"
DPO_CHECKED_STEPS = 5  # the loss and margin of these first steps must agree to 1e-4


def dpo_overrides(steps: int, pairs: int, lr: float, beta: float, out: Path) -> list[str]:
    """The example as the comparison runs it: fp32, one optimizer step of `pairs` pairs,
    a constant learning rate from step 1, no validation in the run (both sides are
    validated afterwards by the same evaluator). Its sequence packing stays on (a pair's
    prompt laid once): the same log-probs as TRL's padded rows, fewer tokens computed."""
    return ["actor_train.model_args.dtype=fp32",
            "actor_train.training_args.warmup_steps=0",
            "actor_train.training_args.gradient_accumulation_steps=1",
            f"actor_train.training_args.per_device_train_batch_size={pairs}",
            f"actor_train.training_args.learning_rate={lr}", f"beta={beta}",
            f"max_steps={steps}", f"save_steps={steps}", "eval_steps=0", "validation=null",
            f"output_dir={out}"]


def dpo_pairs_for_trl(cfg, steps: int, pairs: int, path: Path) -> None:
    """Every step's pairs, as flywheel's run takes them (its encoding, its seeded order),
    as token ids for TRL."""
    from flywheel.pipelines.data.prompt_data import PromptOrder
    from flywheel.pipelines.dpo.run import load
    from flywheel.workers.strategies.hf_model import load_tokenizer

    train = load(cfg, "actor_train", load_tokenizer(resolve_pretrain(cfg.pretrain)))
    order = PromptOrder(list(range(len(train))), cfg.seed)
    rows = [{"prompt": train.prompts[i], "chosen": train.chosen[i],
             "rejected": train.rejected[i]}
            for step in range(steps) for i in order.batch(step, pairs)]
    path.write_text(json.dumps({"pairs": rows, "pairs_per_step": pairs, "steps": steps,
                                "lr": cfg.actor_train.training_args.learning_rate,
                                "beta": cfg.beta, "seed": cfg.seed}))


def dpo_val_accuracy(cfg, model_path: str, val_pairs: int) -> float:
    """Greedy accuracy on the example's validation pairs (bench_dpo.py's evaluator, which
    is the DPO run's own validation)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_dpo import val_accuracy

    with_val = load_config(DPO_CONFIG, ["actor_train.model_args.dtype=fp32",
                                        f"val_batch_size={val_pairs}"])
    return val_accuracy(dataclasses.replace(with_val, seed=cfg.seed), model_path)


def run_dpo_side_by_side(steps: int, pairs: int, lr: float, beta: float, val_pairs: int,
                         work: Path) -> dict:
    """Both trainers on the same pairs; their per-step loss and margin, step times and the
    greedy val accuracy of the weights each ends with."""
    flywheel_out = work / "dpo-flywheel"
    cfg = load_config(DPO_CONFIG, dpo_overrides(steps, pairs, lr, beta, flywheel_out))
    pairs_path = work / "dpo-pairs.json"
    dpo_pairs_for_trl(cfg, steps, pairs, pairs_path)
    model = resolve_pretrain(cfg.pretrain)
    trl_out = work / "dpo-trl"
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    with open(work / "trl.log", "a") as log:
        subprocess.run([str(TRL_PYTHON), str(DPO_TRL_RUN), "--model", model, "--pairs",
                        str(pairs_path), "--out", str(trl_out)], check=True, env=env,
                       stdout=log, stderr=subprocess.STDOUT)
    trl_wall = time.perf_counter() - start
    trl = json.loads((trl_out / "steps.json").read_text())
    start = time.perf_counter()
    with open(work / "runs.log", "a") as log:
        stdout, sys.stdout = sys.stdout, log
        try:
            run_dir = run(cfg)
        finally:
            sys.stdout = stdout
    fly_wall = time.perf_counter() - start
    fly = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    before = dpo_val_accuracy(cfg, model, val_pairs)
    after_fly = dpo_val_accuracy(cfg, str(run_dir / f"checkpoint-{steps}"), val_pairs)
    after_trl = dpo_val_accuracy(cfg, str(trl_out / "final"), val_pairs)
    shutil.rmtree(run_dir / f"checkpoint-{steps}")
    shutil.rmtree(trl_out / "final")
    trl_steady = trl["step_s"][WARMUP:] or trl["step_s"]
    fly_steady = [r["time/step"] for r in fly][WARMUP:] or [fly[0]["time/step"]]
    return {
        "steps": steps, "pairs_per_step": pairs, "lr": lr, "beta": beta,
        "flywheel_loss": [r["dpo/loss"] for r in fly],
        "trl_loss": [r["loss"] for r in trl["rows"]],
        "flywheel_margin": [r["dpo/reward_margin"] for r in fly],
        "trl_margin": [r["rewards/margins"] for r in trl["rows"]],
        "flywheel_pairs_per_s": pairs / statistics.fmean(fly_steady),
        "trl_pairs_per_s": pairs / statistics.fmean(trl_steady),
        "flywheel_wall_s": fly_wall, "trl_wall_s": trl_wall, "val_pairs": val_pairs,
        "val_accuracy_before": before, "flywheel_val_accuracy_after": after_fly,
        "trl_val_accuracy_after": after_trl}


def dpo_table(r: dict) -> str:
    n = DPO_CHECKED_STEPS
    loss_gap = max(abs(a - b) for a, b in zip(r["flywheel_loss"][:n], r["trl_loss"][:n]))
    margin_gap = max(abs(a - b) for a, b in zip(r["flywheel_margin"][:n], r["trl_margin"][:n]))
    lines = [f"DPO, SmolLM2-135M-Instruct fp32, {r['pairs_per_step']} pairs/step, beta "
             f"{r['beta']}, lr {r['lr']}, {r['steps']} steps, the same token ids",
             f"first {n} steps: max |loss gap| {loss_gap:.2e}, max |margin gap| "
             f"{margin_gap:.2e} ({'within' if max(loss_gap, margin_gap) <= 1e-4 else 'OVER'}"
             f" 1e-4)", "", "| step | flywheel loss | TRL loss | flywheel margin | TRL margin |",
             "|---|---|---|---|---|"]
    for i, (fl, tl, fm, tm) in enumerate(zip(r["flywheel_loss"], r["trl_loss"],
                                             r["flywheel_margin"], r["trl_margin"]), 1):
        lines.append(f"| {i} | {fl:.6f} | {tl:.6f} | {fm:.6f} | {tm:.6f} |")
    lines += ["", "| | flywheel | TRL DPOTrainer |", "|---|---|---|",
              f"| pairs/s (steady) | {r['flywheel_pairs_per_s']:.2f} | "
              f"{r['trl_pairs_per_s']:.2f} |",
              f"| wall (whole run) | {r['flywheel_wall_s']:.0f} s | {r['trl_wall_s']:.0f} s |",
              f"| val accuracy ({r['val_pairs']} pairs, greedy) {r['val_accuracy_before']:.3f}"
              f" -> | {r['flywheel_val_accuracy_after']:.3f} | "
              f"{r['trl_val_accuracy_after']:.3f} |"]
    return "\n".join(lines)


def main_dpo(a: argparse.Namespace) -> None:
    if not TRL_PYTHON.exists():
        sys.exit("no .venv-trl: run `make trl-venv` first")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / f"vs_trl_dpo-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    result = run_dpo_side_by_side(a.steps, a.pairs, a.lr, a.beta, a.val, work)
    text = dpo_table(result)
    print(text)
    (RESULTS / f"vs_trl_dpo-{stamp}.json").write_text(json.dumps(result | {"table": text},
                                                                 indent=1))


def main() -> None:
    if "--dpo" in sys.argv:
        p = argparse.ArgumentParser(description="the DPO part: TRL's DPOTrainer beside "
                                                "flywheel's DPO")
        p.add_argument("--dpo", action="store_true")
        p.add_argument("--steps", type=int, default=20)
        p.add_argument("--pairs", type=int, default=8, help="pairs per optimizer step")
        p.add_argument("--lr", type=float, default=5e-6)
        p.add_argument("--beta", type=float, default=0.1)
        p.add_argument("--val", type=int, default=363, help="validation pairs")
        main_dpo(p.parse_args())
        return
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
