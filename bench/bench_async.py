"""Benchmark: what the async prefetch generator (`async_generation_ratio`) buys.

The same RLVR pipeline runs at ratio 0 (synchronous), 1 and 2; for each run it reports the
steady-state step time, samples/s and the ratio to ratio 0. Two parts:

sim   Latency-only backends (sim_infer, sim_train; bench/configs/async_sim.yaml): generating
      one batch takes G seconds, a train step T seconds, exactly. Perfect overlap turns a
      sync step of G + T into max(G, T), so the bound on the speedup is
      (G + T) / max(G, T); we report achieved / bound for G:T = 1:1, 2:1 and 1:2.
      Pass criterion: at 1:1, ratio 1 reaches >= 95% of the bound.
real  The built-in tiny model on the 2-core CPU (examples/rlvr_sync.yaml with overrides):
      actor_infer pinned to core 0, actor_train to core 1, in every mode, so sync and async
      get the same cores. Three shapes: "shipped" (the example's batch sizes), "balanced"
      (2-prompt generation chunks, old log-probs in one forward, training unchanged: G
      grows toward T, which raises the bound) and "2-minibatch" (4-prompt chunks, 2 PPO
      mini-batches per step instead of 4: the same samples, fewer optimizer steps, and
      generation no slower than shipped). What feeds generation (the driver's prefetch
      thread and the reward worker, ~0.2 core) either sits beside it on core 0 or floats
      with the driver's main thread and Ray: ratio 0 runs both ways and the faster is the
      baseline; ratios 1 and 2 run with it beside generation, which keeps it off the
      training core when both cores are busy. The bound comes from that baseline:
      G = time/wait_for_batch, T = the rest of the step. Also val/accuracy after the same
      max_steps, sync vs async.

Rounds (--rounds N): every round runs a shape's modes back to back (odd rounds in reverse
order) and pairs each run with its own round's baseline; the summary gives the median and
range over rounds. A shared host's speed drifts by 10-20% over minutes, so one round
can put a run above its own bound; read the median, and distrust a figure above the bound.

How steady state is measured: the first `warmup` steps (the first is unoverlappable: the
trainer waits for a whole batch; the next fill the prefetch queue) are dropped, and the
step time is the mean of time/step - time/validate over the remaining steps; samples/s is
samples per step over that. The real part also gives the median step time: on a shared
machine other jobs add multi-second spikes that the mean absorbs and the median does not
(the bound is given from both). Ray is started once and shared; roles restart for every
run, so start-up is paid once per run but is outside the measurement. Every run uses the same
disjoint device_mapping ([0] train, [1] infer). The 1-minute load average before and after
each run is recorded: other jobs on the machine distort the figures.

    .venv/bin/python bench/bench_async.py [--quick] [--only sim|real] [--shapes a,b] [--rounds N]

Prints markdown tables and writes bench/results/bench_async-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import ray

from flywheel.config.schema import RayConfig
from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run
from flywheel.platform.ray_runtime import start_ray

ROOT = Path(__file__).resolve().parents[1]
SIM_CONFIG = ROOT / "bench" / "configs" / "async_sim.yaml"
REAL_CONFIG = ROOT / "examples" / "rlvr_sync.yaml"
RESULTS = ROOT / "bench" / "results"
RATIOS = (0, 1, 2)
COMMON = ["tracking.mlflow=false", "save_steps=0",
          "actor_train.device_mapping=[0]", "actor_infer.device_mapping=[1]"]

SIM_BATCH = 8  # prompts per step: seconds_per_prompt = G / SIM_BATCH
SIM_SHAPES = {"1:1": (1.0, 1.0), "2:1": (1.0, 0.5), "1:2": (0.5, 1.0)}  # G:T -> (G, T) s

# Generation on core 0, training on core 1, in every run.
REAL_PINNING = ["actor_infer.cpu_affinity=[0]", "actor_train.cpu_affinity=[1]"]
# What feeds generation (the driver's prefetch thread, the reward worker) beside it on core
# 0, or floating with the driver's main thread and Ray. Ratio 0 runs both ways and the
# faster one is the baseline; ratios 1 and 2 run with feeding work beside generation.
AUX_LAYOUTS = {"beside generation": ["prefetch_cpu_affinity=[0]",
                                     "rewards.math_rule.cpu_affinity=[0]"],
               "floating": []}
REAL_SHAPES = {
    "shipped": [],
    "balanced": [  # training (optimizer steps, micro-batches) exactly as shipped
        "actor_infer.infer_batch_size=2",  # 16 chunks of 2 prompts x 8 samples: G grows
        "actor_train.infer_batch_size=256",  # old log-probs in one forward: T shrinks
    ],
    "2-minibatch": [  # closest to 1:1 without slowing generation down: 8 chunks of 4
        "actor_infer.infer_batch_size=4",  # prompts, old log-probs in one forward, and 2
        "actor_train.infer_batch_size=256",  # PPO mini-batches of 128 per step instead of
        "actor_train.training_args.per_device_train_batch_size=128",  # 4 of 64
    ],
}
# (warm-up steps dropped, max_steps) per part and mode
STEPS = {("sim", False): (3, 15), ("sim", True): (2, 6),
         ("real", False): (5, 100), ("real", True): (3, 15)}


@dataclasses.dataclass
class Result:
    part: str
    shape: str
    ratio: float
    warmup: int
    max_steps: int
    step_s: float  # steady-state seconds per step (validation excluded), mean
    median_step_s: float  # robust to spikes from other jobs on a shared machine
    samples_per_s: float
    wait_s: float  # time/wait_for_batch: trainer blocked on generation
    generate_s: float  # time/generate: actor_infer busy within the step
    train_s: float  # time/logprobs + time/train
    idle_infer: float
    idle_train: float
    staleness: float
    val_accuracy: float | None  # after the last step
    wall_s: float  # whole run, start-up included
    load_before: float
    load_after: float
    step_times: list[float]  # every step, warm-up included
    train_times: list[float]  # time/logprobs + time/train, every step
    wait_times: list[float]  # time/wait_for_batch, every step
    val_accuracy_start: float | None = None  # step-0 validation, before training
    round: int = 0  # --rounds: which repetition; speedups pair runs of the same round
    layout: str = ""  # AUX_LAYOUTS key (real part only)


def summarise(part: str, shape: str, ratio: float, warmup: int, records: list[dict],
              wall_s: float, loads: tuple[float, float]) -> Result:
    steady = records[warmup:]

    def mean(key: str) -> float:
        return statistics.fmean(r.get(key, 0.0) for r in steady)

    step_times = [r["time/step"] - r.get("time/validate", 0.0) for r in records]
    step_s = statistics.fmean(step_times[warmup:])
    samples = records[-1]["throughput/samples_per_s"] * records[-1]["time/step"]
    return Result(part, shape, ratio, warmup, len(records), step_s,
                  statistics.median(step_times[warmup:]), samples / step_s,
                  mean("time/wait_for_batch"), mean("time/generate"),
                  mean("time/logprobs") + mean("time/train"), mean("idle/actor_infer"),
                  mean("idle/actor_train"), mean("staleness/mean"),
                  records[-1].get("val/accuracy"), wall_s, *loads,
                  [round(t, 4) for t in step_times],
                  [round(r["time/logprobs"] + r["time/train"], 4) for r in records],
                  [round(r["time/wait_for_batch"], 4) for r in records])


def run_one(part: str, shape: str, ratio: float, config: Path, overrides: list[str],
            warmup: int, work: Path, rnd: int = 0, layout: str = "") -> Result:
    tag = f"{part}-{shape}-r{ratio}-round{rnd}-{layout}".replace(":", "_").replace(" ", "_")
    out = work / tag  # fresh every run: an existing output_dir would resume
    overrides = [*COMMON, *overrides, f"async_generation_ratio={ratio}", f"output_dir={out}"]
    load_before, started = os.getloadavg()[0], time.time()
    with open(work / "runs.log", "a") as log, contextlib.redirect_stdout(log):
        run_dir = run(load_config(config, overrides))
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in lines if "time/step" in r]  # not the step-0 baseline validation
    res = summarise(part, shape, ratio, warmup, records, time.time() - started,
                    (load_before, os.getloadavg()[0]))
    res.val_accuracy_start = next((r["val/accuracy"] for r in lines
                                   if r["step"] == 0 and "val/accuracy" in r), None)
    res.round = rnd
    res.layout = layout
    acc = "" if res.val_accuracy is None else f", val/accuracy {res.val_accuracy:.3f}"
    where = f", feeding work {layout}" if layout else ""
    print(f"[{part} {shape} ratio {ratio:g} round {rnd}{where}] step {res.step_s:.3f} s "
          f"(median {res.median_step_s:.3f}), "
          f"{res.samples_per_s:.1f} samples/s, wait {res.wait_s:.3f} s, gen {res.generate_s:.3f}"
          f" s, train {res.train_s:.3f} s, idle infer/train {res.idle_infer:.2f}/"
          f"{res.idle_train:.2f}, staleness {res.staleness:.2f}{acc} "
          f"(run {res.wall_s:.0f} s, load {load_before:.1f}->{res.load_after:.1f})", flush=True)
    return res


def bench_sim(quick: bool, work: Path) -> list[Result]:
    warmup, steps = STEPS[("sim", quick)]
    results = []
    for shape, (g, t) in SIM_SHAPES.items():
        latency = "strategy_args.strategy_config"
        overrides = [f"max_steps={steps}", f"rollout_batch_size={SIM_BATCH}",
                     f"actor_infer.{latency}.seconds_per_prompt={g / SIM_BATCH}",
                     f"actor_train.{latency}.seconds_per_step={t}"]
        results += [run_one("sim", shape, r, SIM_CONFIG, overrides, warmup, work)
                    for r in RATIOS]
    return results


def bench_real(quick: bool, work: Path, shapes: list[str], rounds: int) -> list[Result]:
    """Every round runs each shape's modes back to back, so a speedup compares runs a
    minute or two apart: a shared host's speed drifts by 10-20% over longer spans. Odd
    rounds run the modes in reverse order, so a drift does not always favour one mode."""
    warmup, steps = STEPS[("real", quick)]
    modes = [(0, "beside generation"), (0, "floating"), *((r, "beside generation")
                                                          for r in RATIOS if r)]
    results = []
    for rnd in range(rounds):
        for shape in shapes:
            for ratio, layout in (modes if rnd % 2 == 0 else modes[::-1]):
                overrides = [*REAL_PINNING, *AUX_LAYOUTS[layout], *REAL_SHAPES[shape],
                             f"max_steps={steps}", f"eval_steps={steps}",
                             f"logging_steps={steps}"]
                results.append(run_one("real", shape, ratio, REAL_CONFIG, overrides, warmup,
                                       work, rnd, layout))
    return results


def bound(g: float, t: float) -> float:
    """Speedup over sync (step G + T) that perfect overlap (step max(G, T)) gives."""
    return (g + t) / max(g, t)


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def sim_report(results: list[Result]) -> tuple[str, dict]:
    rows, rates = [], {}
    for r in results:
        g, t = SIM_SHAPES[r.shape]
        sync = next(s for s in results if s.shape == r.shape and s.ratio == 0)
        speedup = sync.step_s / r.step_s
        of_bound = speedup / bound(g, t)
        rates[f"{r.shape} ratio {r.ratio:g}"] = {"speedup": speedup, "of_bound": of_bound}
        rows.append([r.shape, f"{g:g}", f"{t:g}", f"{r.ratio:g}", f"{r.step_s:.3f}",
                     f"{r.samples_per_s:.1f}", f"{speedup:.2f}x", f"{bound(g, t):.2f}x",
                     "-" if r.ratio == 0 else f"{of_bound:.1%}", f"{r.wait_s:.3f}",
                     f"{r.idle_infer:.2f}", f"{r.idle_train:.2f}", f"{r.staleness:.2f}"])
    table = markdown(["G:T", "G s", "T s", "ratio", "step s", "samples/s", "vs sync",
                      "bound", "achieved/bound", "wait s", "idle infer", "idle train",
                      "staleness"], rows)
    key = "1:1 ratio 1"
    if key in rates:
        ok = rates[key]["of_bound"] >= 0.95
        table += (f"\n\nPass criterion (G:T 1:1, ratio 1 >= 95% of bound): "
                  f"{rates[key]['of_bound']:.1%} -> {'PASS' if ok else 'FAIL'}")
    return table, rates


def real_report(results: list[Result]) -> tuple[str, dict]:
    rows, bounds, speedups = [], {}, {}
    for r in results:
        sync = min((s for s in results
                    if s.shape == r.shape and s.ratio == 0 and s.round == r.round),
                   key=lambda s: s.step_s)  # the faster layout of the round
        g, t = sync.wait_s, sync.step_s - sync.wait_s
        steady = slice(sync.warmup, None)  # medians: the same, robust to spikes
        g_med = statistics.median(sync.wait_times[steady])
        t_med = statistics.median(s - w for s, w in zip(sync.step_times[steady],
                                                         sync.wait_times[steady]))
        bounds[f"{r.shape} round {r.round}"] = {"sync_layout": sync.layout,
            "G_s": g, "T_s": t, "bound": bound(g, t), "G_median_s": g_med,
            "T_median_s": t_med, "bound_median": bound(g_med, t_med),
            "sync_generate_s": sync.generate_s, "sync_train_s": sync.train_s}
        speedup = r.samples_per_s / sync.samples_per_s
        speedups.setdefault((r.shape, r.ratio, r.layout), []).append((speedup, bound(g, t), r))
        acc = "->".join(f"{a:.3f}" for a in (r.val_accuracy_start, r.val_accuracy)
                        if a is not None) or "-"
        rows.append([r.shape, str(r.round), f"{r.ratio:g}", r.layout, f"{r.step_s:.3f}",
                     f"{r.median_step_s:.3f}", f"{r.samples_per_s:.0f}", f"{speedup:.2f}x",
                     f"{sync.median_step_s / r.median_step_s:.2f}x", f"{bound(g, t):.2f}x",
                     f"{r.wait_s:.3f}", f"{r.generate_s:.3f}", f"{r.train_s:.3f}",
                     f"{r.idle_infer:.2f}", f"{r.idle_train:.2f}", f"{r.staleness:.2f}",
                     acc, f"{r.load_before:.1f}/{r.load_after:.1f}"])
    table = markdown(["shape", "round", "ratio", "feeding work", "step s", "median",
                      "samples/s", "vs ratio 0",
                      "vs 0 (median)", "bound", "wait s", "gen s", "train s", "idle infer",
                      "idle train", "staleness", "val acc (start->end)", "load"], rows)
    summary, rates = [], {}
    for (shape, ratio, layout), runs in speedups.items():
        ups = [u for u, _, _ in runs]
        accs = [r.val_accuracy for _, _, r in runs if r.val_accuracy is not None]
        key = f"{shape} ratio {ratio:g}, feeding work {layout}"
        rates[key] = {
            "speedups": ups, "median_speedup": statistics.median(ups),
            "median_bound": statistics.median(b for _, b, _ in runs),
            "median_step_s": statistics.median(r.step_s for _, _, r in runs),
            "val_accuracy": accs}
        summary.append([shape, f"{ratio:g}", layout, str(len(runs)),
                        f"{rates[key]['median_step_s']:.3f}",
                        f"{statistics.median(ups):.2f}x", f"{min(ups):.2f}x-{max(ups):.2f}x",
                        f"{rates[key]['median_bound']:.2f}x",
                        " / ".join(f"{a:.3f}" for a in accs) or "-"])
    table = markdown(["shape", "ratio", "feeding work", "rounds", "median step s",
                      "median vs faster ratio 0", "range", "median bound",
                      "val acc per round"], summary) + "\n\n" + table
    return table, {"bounds": bounds, "speedups": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (smoke test)")
    parser.add_argument("--only", choices=("sim", "real"), help="run one part only")
    parser.add_argument("--shapes", default=",".join(REAL_SHAPES),
                        help=f"real part: comma-separated, of {', '.join(REAL_SHAPES)}")
    parser.add_argument("--rounds", type=int, default=1,
                        help="real part: repeat every shape's ratio 0/1/2 runs this often")
    args = parser.parse_args()
    shapes = [x for x in args.shapes.split(",") if x]
    unknown = [x for x in shapes if x not in REAL_SHAPES]
    if unknown or args.rounds < 1:
        parser.error(f"--shapes: unknown {unknown}" if unknown else "--rounds: at least 1")
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} "
          f"{load_start[2]:.2f} on {os.cpu_count()} CPUs", flush=True)
    report: dict = {"args": vars(args), "cpus": os.cpu_count(), "load_start": load_start,
                    "overrides": {"common": COMMON, "real_pinning": REAL_PINNING,
                                  "aux_layouts": AUX_LAYOUTS,
                                  "real_shapes": REAL_SHAPES, "sim_shapes_G_T": SIM_SHAPES}}
    start_ray(RayConfig(), num_slots=2)  # shared by every run; roles restart per run
    work = Path(tempfile.mkdtemp(prefix="bench_async-"))
    print(f"run output and logs: {work} (removed if every run succeeds)", flush=True)
    tables = []
    try:
        if args.only in (None, "sim"):
            sim = bench_sim(args.quick, work)
            table, report["sim_speedups"] = sim_report(sim)
            report["sim"] = [dataclasses.asdict(r) for r in sim]
            tables.append("## Simulated backends (steady state)\n\n" + table)
        if args.only in (None, "real"):
            real = bench_real(args.quick, work, shapes, args.rounds)
            table, report["real_summary"] = real_report(real)
            report["real"] = [dataclasses.asdict(r) for r in real]
            tables.append("## Tiny model, 2-core CPU, one core per role\n\n" + table)
    finally:
        ray.shutdown()
    shutil.rmtree(work)
    report["load_end"] = os.getloadavg()
    print("\n" + "\n\n".join(tables))
    print(f"\nload average at end: {report['load_end'][0]:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bench_async-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
