"""Benchmark: wall time to a target validation accuracy, per layout, over seeds (issue 50).

Asynchronous training is judged by the time it takes to reach an accuracy, not by samples
per second (MM-GRPO: GPU-hours to reach and hold a validation reward of 0.8; AReaL and
ROLL Flash: speed-ups at matched final accuracy). This runs one config under several
override sets (`--set NAME="key=value key=value"`; default: the config as is, `sync`,
against `async_generation_ratio=1 actor_infer.device_mapping=[1]`, `async`), for each of
`--seeds`, interleaved (seed by seed, the sets' order reversed every other seed, so a
shared host's drift over minutes does not favour one set). Per run:

- reach: wall seconds from the start of the first train step to the end of the first
  validation at or above `--target` (of `--metric`), and its step;
- hold: the same to the second of two consecutive validations at or above it;
- both also without validation time: the seconds validation held up training (inline
  validation's time/validate, an overlapped one's time/wait_for_validation; an overlapped
  validation's own time/validate_overlapped is counted up to the end of training, not to
  the end of validation) are subtracted;
- the metric at the last step (`max_steps`: the fixed step budget) and, with `--budget-s`,
  the last one known by that wall time;
- every validation's (wall s, wall s without validation, step, value): the table's source
  and a plot of the metric against wall time per run (one colour per set).

Each run is a process of its own (this file with `--child`), which times the run's rows
as they are written (Tracker.log) and the first train step's start (StepLoop.train_step),
so what is timed is the pipeline, not the start-up; the process's whole wall time is
reported too. Prints markdown, writes bench/results/time_to_accuracy-<timestamp>.json and
.png. Take figures on a quiet machine; each run records the cores busy just before it
(2 s of /proc/stat: other jobs, or the previous run's processes still exiting) and the load
average (which lags: right after a run ends it still counts that run's processes).

    .venv/bin/python bench/bench_time_to_accuracy.py --seeds 42,43,44 --target 0.85 \\
        max_steps=20 eval_steps=2               # ~6 min a run, 2 cores with native bf16
    .venv/bin/python bench/bench_time_to_accuracy.py --config examples/rlvr_sync.yaml \\
        --seeds 1 --target 0.2 max_steps=6 eval_steps=2 val_batch_size=64   # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CONFIG = ROOT / "examples" / "rlvr_smollm2.yaml"
SETS = {"sync": "", "async": "async_generation_ratio=1 actor_infer.device_mapping=[1]"}
COMMON = ["tracking.mlflow=false", "save_steps=0"]


# ---- the child: one run, its rows timed -------------------------------------------------
def child(config: str, overrides: list[str], times_file: Path) -> None:
    """Run the pipeline in this process; write (step, wall time) of every row as it is
    logged, and the first train step's start, to `times_file`."""
    sys.path.insert(0, str(ROOT))
    from flywheel.pipelines.config import load_config
    from flywheel.pipelines.loop.step_loop import StepLoop
    from flywheel.pipelines.run.launch import run
    from flywheel.platform.tracking import Tracker

    out = open(times_file, "w", encoding="utf-8")  # noqa: SIM115 (open for the whole run)
    log, train_step = Tracker.log, StepLoop.train_step

    def timed_log(self, step, metrics):
        log(self, step, metrics)
        out.write(json.dumps({"step": step, "at": time.time()}) + "\n")
        out.flush()

    started: list[float] = []

    def timed_train_step(self, generator):
        if not started:
            started.append(time.time())
            out.write(json.dumps({"first_step_at": started[0]}) + "\n")
            out.flush()
        return train_step(self, generator)

    Tracker.log, StepLoop.train_step = timed_log, timed_train_step
    try:
        run(load_config(config, overrides))
    finally:
        out.close()


# ---- the parent: runs, their timelines, the table ---------------------------------------
@dataclass
class Eval:
    step: int
    wall_s: float  # since the first train step's start, when the figure was known
    wall_s_no_val: float  # the same, less the time validation held training up
    value: float


@dataclass
class Run:
    name: str
    seed: int
    overrides: list[str]
    load_before: float  # 1-minute load average when the run started
    busy_before: float  # cores in use over the 2 s before it (cores_busy)
    process_s: float  # the whole child process, start-up included
    baseline: float | None = None  # the metric before training (step 0)
    evals: list[Eval] = field(default_factory=list)
    blocking_val_s: float = 0.0  # time/validate + time/wait_for_validation, steps >= 1
    # medians over the steps after WARMUP that neither validated nor waited for one
    phases: dict[str, float] = field(default_factory=dict)
    overlapped_val_s: float = 0.0  # time/validate_overlapped, summed
    reach: Eval | None = None
    hold: Eval | None = None
    final: float | None = None  # the metric at the last step
    at_budget: float | None = None  # the last value known by --budget-s


def timeline(rows: list[dict], times: list[dict], metric: str) -> tuple[list[Eval], float,
                                                                        float]:
    """Every validation after the baseline as an Eval, plus the blocking and overlapped
    validation seconds of the run."""
    first = next(t["first_step_at"] for t in times if "first_step_at" in t)
    logged = {t["step"]: t["at"] for t in times if "step" in t}  # one row per step
    blocking = overlapped = 0.0
    evals = []
    for row in sorted((r for r in rows if r["step"] >= 1), key=lambda r: r["step"]):
        blocking += row.get("time/validate", 0.0) + row.get("time/wait_for_validation", 0.0)
        beside = row.get("time/validate_overlapped", 0.0)
        overlapped += beside
        if metric in row:
            known = logged[row["step"]] - first
            # an overlapped validation ran after its step's training: not waited for
            evals.append(Eval(row["step"], known, known - beside - blocking, row[metric]))
    return evals, blocking, overlapped


WARMUP = 2  # steps left out of the phase medians (the first cannot overlap)
PHASES = ("time/step", "time/generate", "time/logprobs", "time/train", "time/wait_for_batch",
          "time/weight_sync", "time/weight_load", "idle/actor_infer", "idle/actor_train")


def phase_medians(rows: list[dict]) -> dict[str, float]:
    """Where a plain step's time goes: medians over steps after WARMUP with no validation
    in them (issue 50 item 3, the per-step gap)."""
    plain = [r for r in rows if r["step"] > WARMUP and "time/step" in r
             and not any(k in r for k in ("time/validate", "time/wait_for_validation"))]
    return {k: statistics.median(r.get(k, 0.0) for r in plain) for k in PHASES} if plain else {}


def reached(evals: list[Eval], target: float, consecutive: int) -> Eval | None:
    """The eval that completes the first run of `consecutive` evals at or above target."""
    streak = 0
    for e in evals:
        streak = streak + 1 if e.value >= target else 0
        if streak == consecutive:
            return e
    return None


def cores_busy(window_s: float = 2.0) -> float:
    """Cores in use over the next `window_s`, from /proc/stat's aggregate line: what other
    work holds the machine now, where the load average still remembers the last minute."""
    def ticks() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    total0, idle0 = ticks()
    time.sleep(window_s)
    total1, idle1 = ticks()
    spent = total1 - total0
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / spent) if spent else 0.0


def one_run(name: str, overrides: list[str], seed: int, args, work: Path) -> Run:
    out = work / f"{name}-seed{seed}"
    times_file = work / f"{name}-seed{seed}.times.jsonl"
    run_overrides = [*COMMON, *args.overrides, *overrides, f"seed={seed}",
                     f"output_dir={out}"]
    cmd = [sys.executable, __file__, "--child", "--config", str(args.config),
           "--times", str(times_file), *run_overrides]
    busy, load, started = cores_busy(), os.getloadavg()[0], time.time()
    with open(work / "runs.log", "a") as log:
        log.write(f"\n==== {name} seed {seed}: {shlex.join(cmd)}\n")
        log.flush()
        subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    times = [json.loads(x) for x in times_file.read_text().splitlines()]
    result = Run(name, seed, overrides, load, busy, time.time() - started)
    result.evals, result.blocking_val_s, result.overlapped_val_s = timeline(rows, times,
                                                                            args.metric)
    result.phases = phase_medians(rows)
    result.reach = reached(result.evals, args.target, 1)
    result.hold = reached(result.evals, args.target, 2)
    result.baseline = next((r[args.metric] for r in rows if r["step"] == 0
                            and args.metric in r), None)
    last = max(r["step"] for r in rows)
    result.final = next((r[args.metric] for r in rows if r["step"] == last
                         and args.metric in r), None)
    if args.budget_s:
        known = [e.value for e in result.evals if e.wall_s <= args.budget_s]
        result.at_budget = known[-1] if known else None
    print(f"[{name} seed {seed}] reach {fmt_eval(result.reach)}, hold {fmt_eval(result.hold)}, "
          f"final {fmt(result.final, '.3f')}, validation blocking {result.blocking_val_s:.0f} s "
          f"(beside training {result.overlapped_val_s:.0f} s), process {result.process_s:.0f} s, "
          f"cores busy before {busy:.1f}, load {load:.1f}", flush=True)
    return result


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def fmt_eval(e: Eval | None) -> str:
    if e is None:
        return "-"
    return f"step {e.step}, {e.wall_s:.0f} s ({e.wall_s_no_val:.0f} s w/o val)"


def median_of(values: list[float | None]) -> float | None:
    """The median over seeds; None (not reached) counts as later than any time."""
    if not values or sum(v is None for v in values) * 2 >= len(values):
        return None
    return statistics.median(float("inf") if v is None else v for v in values)


def table(runs: list[Run], names: list[str], target: float, budget: bool) -> str:
    head = ["set", "seeds", f"reach >= {target:g}: step, s (median)", "s w/o val",
            "hold (2 evals): s", "s w/o val", "final", "val blocking s", "val beside s"]
    if budget:
        head.append("at budget")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        rs = [r for r in runs if r.name == name]
        reach_step = median_of([r.reach.step if r.reach else None for r in rs])
        cells = [name, ",".join(str(r.seed) for r in rs),
                 f"{fmt(reach_step, '.0f')}, "
                 f"{fmt(median_of([r.reach.wall_s if r.reach else None for r in rs]), '.0f')}",
                 fmt(median_of([r.reach.wall_s_no_val if r.reach else None for r in rs]), ".0f"),
                 fmt(median_of([r.hold.wall_s if r.hold else None for r in rs]), ".0f"),
                 fmt(median_of([r.hold.wall_s_no_val if r.hold else None for r in rs]), ".0f"),
                 fmt(median_of([r.final for r in rs]), ".3f"),
                 fmt(statistics.median(r.blocking_val_s for r in rs), ".0f"),
                 fmt(statistics.median(r.overlapped_val_s for r in rs), ".0f")]
        if budget:
            cells.append(fmt(median_of([r.at_budget for r in rs]), ".3f"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def phase_table(runs: list[Run], names: list[str]) -> str:
    """Per set, the median over seeds of each run's plain-step phase medians."""
    short = [k.split("/", 1)[1] for k in PHASES]
    lines = ["| set | " + " | ".join(short) + " |", "|" + "---|" * (len(PHASES) + 1)]
    for name in names:
        rs = [r for r in runs if r.name == name and r.phases]
        if rs:
            lines.append(f"| {name} | " + " | ".join(
                f"{statistics.median(r.phases[k] for r in rs):.2f}" for k in PHASES) + " |")
    return "\n".join(lines)


def plot(runs: list[Run], names: list[str], metric: str, target: float, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), dpi=100)
    ax = fig.add_subplot()
    colours = {name: f"C{i}" for i, name in enumerate(names)}
    for r in runs:
        start = [(0.0, r.baseline)] if r.baseline is not None else []  # before training
        points = start + [(e.wall_s, e.value) for e in r.evals]
        ax.plot([t for t, _ in points], [v for _, v in points], marker="o",
                color=colours[r.name], alpha=0.8, label=f"{r.name} seed {r.seed}")
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("wall s since the first train step (validation included)")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path)


def parse_sets(specs: list[str] | None) -> dict[str, list[str]]:
    if not specs:
        return {name: shlex.split(o) for name, o in SETS.items()}
    sets = {}
    for spec in specs:
        name, sep, overrides = spec.partition("=")
        if not sep or not name:
            raise SystemExit(f"--set {spec!r}: expected NAME=\"key=value key=value\"")
        sets[name] = shlex.split(overrides)
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--set", action="append", dest="sets", metavar='NAME="k=v ..."',
                        help="an override set (repeat); default: sync and async r=1")
    parser.add_argument("--seeds", default="42,43,44")
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--metric", default="val/accuracy")
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="also report the metric known by this wall time")
    parser.add_argument("--work", type=Path, help="where runs and their logs go (a new "
                        "folder inside it; default: the system's temporary folder)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--times", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", metavar="key.path=value",
                        help="overrides for every set (e.g. max_steps=20 eval_steps=2)")
    args = parser.parse_args()
    if args.child:
        child(str(args.config), args.overrides, args.times)
        return
    sets = parse_sets(args.sets)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_tta-", dir=args.work))
    print(f"config {args.config}, sets {sets}, seeds {seeds}\nrun output and logs: {work}",
          flush=True)
    names = list(sets)
    runs = []
    for i, seed in enumerate(seeds):
        for name in (names if i % 2 == 0 else names[::-1]):
            runs.append(one_run(name, sets[name], seed, args, work))
    text = (table(runs, names, args.target, bool(args.budget_s))
            + f"\n\nplain steps (no validation, after step {WARMUP}), medians:\n\n"
            + phase_table(runs, names))
    print("\n" + text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"time_to_accuracy-{time.strftime('%Y%m%d-%H%M%S')}"
    plot(runs, names, args.metric, args.target, stem.with_suffix(".png"))
    stem.with_suffix(".json").write_text(json.dumps(
        {"args": {**vars(args), "config": str(args.config), "times": None,
                  "work": str(work)}, "sets": sets,
         "table": text, "runs": [asdict(r) for r in runs]}, indent=1))
    print(f"\nresults: {stem}.json, plot {stem}.png")


if __name__ == "__main__":
    main()
