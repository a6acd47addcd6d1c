"""code_sandbox cost: sandbox start-up per sample and scoring throughput.

    .venv/bin/python bench/bench_code_sandbox.py            # ~1 min
    .venv/bin/python bench/bench_code_sandbox.py --runs 50  # fewer start-ups

Start-up: the median wall time of running an empty Python program (`pass`) in a fresh
bubblewrap sandbox (sandbox.run_sandboxed), against the same program as a plain
subprocess; the difference is what the sandbox adds per test case. Throughput: samples/s
through the reward worker's TimeLimitedScorer (the hard per-sample limit included) for an
a + b program with 3 stdin/stdout cases, with 1 and 2 scoring processes. Prints a table and
writes bench/results/bench_code_sandbox-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from flywheel.config.schema import CodeSandboxArgs, RewardConfig
from flywheel.sandbox.bwrap import run_sandboxed
from flywheel.workers.rewards.time_limit import TimeLimitedScorer

RESULTS = Path(__file__).parent / "results"
TESTS = json.dumps({"inputs": ["1 2\n", "10 20\n", "5 5\n"], "outputs": ["3\n", "30\n", "10\n"]})
PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def median_seconds(run, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(processes: int, samples: int) -> float:
    scorer = TimeLimitedScorer(RewardConfig(reward_type="code_sandbox",
                                            scoring_processes=processes))
    try:
        t0 = time.perf_counter()
        results = scorer.score([("q", PROGRAM, TESTS)] * samples)
        seconds = time.perf_counter() - t0
    finally:
        scorer.close()
    assert all(r.score == 1.0 for r in results), results[:3]
    return samples / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="start-ups timed per variant")
    parser.add_argument("--samples", type=int, default=60, help="samples per throughput run")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    limits = CodeSandboxArgs()
    sandboxed = median_seconds(lambda: run_sandboxed("pass", "", limits), args.runs)
    plain = median_seconds(lambda: subprocess.run(["/usr/bin/python3", "-I", "-B", "-c", "pass"],
                                                  check=True), args.runs)
    rates = {p: throughput(p, args.samples) for p in (1, 2)}
    report = {"sandboxed_start_median_s": sandboxed, "plain_start_median_s": plain,
              "sandbox_overhead_s": sandboxed - plain, "tests_per_sample": 3,
              "samples_per_s": {str(p): r for p, r in rates.items()},
              "cpus": os.cpu_count(), "load_after": os.getloadavg()[0]}
    print("| measure | value |\n|---|---|")
    print(f"| empty program in a sandbox, median | {sandboxed * 1000:.1f} ms |")
    print(f"| same, plain subprocess, median | {plain * 1000:.1f} ms |")
    print(f"| sandbox start-up cost per test case | {(sandboxed - plain) * 1000:.1f} ms |")
    for p, r in rates.items():
        print(f"| samples/s (3 cases each), {p} scoring process(es) | {r:.1f} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench_code_sandbox-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
