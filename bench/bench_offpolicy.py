"""Off-policy learning benchmark: does asynchronous generation learn as well as sync?

Runs the built-in arithmetic task (examples/rlvr_async.yaml) for `--steps` train steps at
async_generation_ratio 0, 1 and 2, `--seeds` seeds each, with the same samples per step,
and prints the final validation accuracy per ratio (mean and standard error over seeds),
and the gap of each ratio to sync in pooled standard errors. With `--variants`, each
pg_variant at ratio 1 (first -> last validation accuracy). The off-policy correction is
the default (`infer_is_correction: auto`: token-truncate when generation runs ahead);
`--correction none` measures without it.

    .venv/bin/python bench/bench_offpolicy.py                  # 3 ratios x 5 seeds
    .venv/bin/python bench/bench_offpolicy.py --variants       # + the pg_variant table
    .venv/bin/python bench/bench_offpolicy.py --quick          # smoke test

Results go to bench/results/offpolicy.json. Runs are sequential: each takes the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rlvr_async.yaml"
VARIANTS = ("vanilla", "ppo", "tis", "topr", "cispo", "kimi15")


def one_run(work: Path, steps: int, ratio: float, seed: int, variant: str | None,
            correction: str) -> dict:
    tag = f"r{ratio:g}-s{seed}-{variant or 'default'}-{correction}"
    overrides = [f"max_steps={steps}", f"eval_steps={steps}", f"seed={seed}",
                 f"async_generation_ratio={ratio}", f"output_dir={work / tag}",
                 f"infer_is_correction={correction}", "tracking.mlflow=false",
                 "save_steps=0", f"logging_steps={steps}"]
    if variant:
        overrides.append(f"pg_variant={variant}")
    started = time.time()
    with open(work / "runs.log", "a") as log, contextlib.redirect_stdout(log):
        run_dir = run(load_config(EXAMPLE, overrides))
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    accuracy = [r["val/accuracy"] for r in rows if "val/accuracy" in r]
    out = {"ratio": ratio, "seed": seed, "variant": variant, "correction": correction,
           "first": accuracy[0], "last": accuracy[-1], "seconds": time.time() - started,
           "staleness_mean": statistics.fmean(r.get("staleness/mean", 0.0) for r in rows
                                              if "staleness/mean" in r)}
    print(f"[{tag}] val accuracy {out['first']:.3f} -> {out['last']:.3f} "
          f"({out['seconds']:.0f} s)", flush=True)
    return out


def mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean, se


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+n-1")
    parser.add_argument("--ratios", default="0,1,2")
    parser.add_argument("--correction", default="auto")
    parser.add_argument("--variants", action="store_true", help="pg_variant table at r=1")
    parser.add_argument("--only-variants", action="store_true")
    parser.add_argument("--quick", action="store_true", help="4 steps, 1 seed")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.seeds = 4, 1
    work = Path(tempfile.mkdtemp(prefix="bench_offpolicy_"))
    print(f"runs under {work}", flush=True)
    results = []
    if not args.only_variants:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for ratio in (float(r) for r in args.ratios.split(",")):
                results.append(one_run(work, args.steps, ratio, seed, None, args.correction))
    if args.variants or args.only_variants:
        for variant in VARIANTS:
            results.append(one_run(work, args.steps, 1, 0, variant, args.correction))
    report(results, args.correction)
    out = ROOT / "bench" / "results" / f"offpolicy-{args.first_seed}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"results: {out}")


def report(results: list[dict], correction: str) -> None:
    by_ratio: dict[float, list[float]] = {}
    for r in results:
        if r["variant"] is None:
            by_ratio.setdefault(r["ratio"], []).append(r["last"])
    if by_ratio:
        print(f"\n| ratio | seeds | final val accuracy (mean ± SE) | gap to sync in pooled SE "
              f"| correction {correction} |\n|---|---|---|---|---|")
        sync = by_ratio.get(0.0)
        for ratio, values in sorted(by_ratio.items()):
            mean, se = mean_se(values)
            gap = ""
            if sync and ratio != 0.0 and len(values) > 1:
                s_mean, s_se = mean_se(sync)
                pooled = math.sqrt(se**2 + s_se**2)
                gap = f"{(s_mean - mean) / pooled:+.2f}" if pooled > 0 else "n/a"
            print(f"| {ratio:g} | {len(values)} | {mean:.3f} ± {se:.3f} | {gap} | |")
    variants = [r for r in results if r["variant"]]
    if variants:
        print("\n| pg_variant (r=1) | first -> last val accuracy |\n|---|---|")
        for r in variants:
            print(f"| {r['variant']} | {r['first']:.3f} -> {r['last']:.3f} |")


if __name__ == "__main__":
    main()
