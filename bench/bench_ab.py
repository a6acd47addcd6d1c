"""Benchmark: the same run on two checkouts, interleaved, to show a change is no slower.

A restructuring (a new step loop, moved modules) must not cost speed. This runs one config
with `platform run` from checkout A and from checkout B (each with its own code on
PYTHONPATH and its own example files), A B A B ... with the order swapped every round, so
a shared host's drift over minutes does not always favour one side. Per run it reads
`metrics.jsonl` and takes the steady state: the mean and median of time/step minus
time/validate over the steps after `--warmup`, and samples/s over them. Per round and
ratio it pairs B with A: B's samples/s over A's (above 1: B is faster); the summary is
the median over rounds.

    .venv/bin/python bench/bench_ab.py --a /path/to/old/checkout --b . \\
        --config examples/rlvr_sync.yaml --ratios 0,1,2 --rounds 3 --warmup 5 \\
        max_steps=40 actor_infer.cpu_affinity=[0] actor_train.cpu_affinity=[1]

Both checkouts run with this interpreter (one virtualenv: the code differs, the packages
do not). Prints a markdown table and writes bench/results/ab-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COMMON = ["tracking.mlflow=false", "save_steps=0"]


@dataclass
class Run:
    side: str  # "A" or "B"
    ratio: float
    round: int
    step_s: float  # steady state, mean
    median_step_s: float
    samples_per_s: float
    wall_s: float  # the whole command, start-up included
    load_before: float


def one_run(side: str, tree: Path, config: str, overrides: list[str], ratio: float,
            rnd: int, warmup: int, work: Path) -> Run:
    out = work / f"{side}-r{ratio:g}-round{rnd}"
    cmd = [sys.executable, "-m", "flywheel", "run", "--config", config, *COMMON, *overrides,
           f"async_generation_ratio={ratio:g}", f"output_dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    load, started = os.getloadavg()[0], time.time()
    with open(work / "runs.log", "a") as log:
        subprocess.run(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                       check=True)
    wall = time.time() - started
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in lines if "time/step" in r][warmup:]
    if not records:
        raise SystemExit(f"{side} ratio {ratio:g}: no steps after {warmup} warm-up steps")
    steps = [r["time/step"] - r.get("time/validate", 0.0) for r in records]
    samples = [r["throughput/samples_per_s"] * r["time/step"] for r in records]
    run = Run(side, ratio, rnd, statistics.fmean(steps), statistics.median(steps),
              sum(samples) / sum(steps), wall, load)
    print(f"[{side} ratio {ratio:g} round {rnd}] step {run.step_s:.3f} s (median "
          f"{run.median_step_s:.3f}), {run.samples_per_s:.2f} samples/s, run {wall:.0f} s, "
          f"load {load:.1f}", flush=True)
    return run


def report(runs: list[Run], ratios: list[float], rounds: int) -> tuple[str, dict]:
    rows = ["| ratio | A step s (median of rounds) | B step s | B/A samples/s per round "
            "| median B/A |", "|---|---|---|---|---|"]
    summary = {}
    for ratio in ratios:
        pairs = []
        for rnd in range(rounds):
            a, b = (next(r for r in runs if r.side == s and r.ratio == ratio and r.round == rnd)
                    for s in "AB")
            pairs.append(b.samples_per_s / a.samples_per_s)
        a_step = statistics.median(r.step_s for r in runs if r.side == "A" and r.ratio == ratio)
        b_step = statistics.median(r.step_s for r in runs if r.side == "B" and r.ratio == ratio)
        median = statistics.median(pairs)
        summary[f"{ratio:g}"] = {"pairs": pairs, "median": median}
        rows.append(f"| {ratio:g} | {a_step:.3f} | {b_step:.3f} | "
                    f"{', '.join(f'{p:.3f}' for p in pairs)} | {median:.3f} |")
    return "\n".join(rows), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B (the change)")
    parser.add_argument("--config", required=True, help="config path inside each checkout")
    parser.add_argument("--ratios", default="0,1,2", help="async_generation_ratio values")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="steps dropped from each run")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value")
    args = parser.parse_args()
    ratios = [float(r) for r in args.ratios.split(",")]
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    work = Path(tempfile.mkdtemp(prefix="bench_ab-"))
    print(f"A = {trees['A']}\nB = {trees['B']}\nrun output and logs: {work}", flush=True)
    runs = []
    for rnd in range(args.rounds):
        order = "AB" if rnd % 2 == 0 else "BA"
        for ratio in ratios:
            runs += [one_run(side, trees[side], args.config, args.overrides, ratio, rnd,
                             args.warmup, work) for side in order]
    table, summary = report(runs, ratios, args.rounds)
    print("\n" + table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"ab-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": {**vars(args), "a": str(args.a), "b": str(args.b)},
                               "summary": summary, "runs": [asdict(r) for r in runs]},
                              indent=1))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
