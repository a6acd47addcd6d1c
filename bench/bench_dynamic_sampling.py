"""Dynamic sampling benchmark: what does dropping uniform groups (DAPO) buy on the tiny task?

Runs the built-in arithmetic task (examples/rlvr_sync.yaml, the SFT-warm-started tiny
model) for the same number of train steps twice, with the same seed: without a group
filter, and with `drop_uniform_groups: true` (groups whose samples all scored the same
are dropped as they are scored and more prompts are generated in their stead, up to
`max_num_gen_batches`). For each run it prints:

- zero-adv groups trained: share of the trained groups whose samples all scored the same
  (`rollout/uniform_frac`, GRPO advantage 0: they cost a train step and teach nothing).
  With the filter it must be 0 (unless the refill cap was reached: `cap kept`).
- generated samples: the samples generation spent on the trained batches (trained plus
  filtered, from samples.jsonl), the filtered ones among them, and apart from them those
  left over when the run stopped (ledger fate `aborted`: generated ahead for a step that
  never came, including groups filtered after the last step; a longer run uses them).
- validation accuracy (greedy, `--val` prompts) before and after training, and the gain
  per 1000 generated samples: accuracy per unit of generation, the price the filter pays.
- train reward: mean score of the trained samples over the run.

    .venv/bin/python bench/bench_dynamic_sampling.py            # 2 runs x 20 steps (~4 min quiet)
    .venv/bin/python bench/bench_dynamic_sampling.py --quick    # smoke test

Results go to bench/results/dynamic_sampling.json. Runs are sequential: each takes the
machine; the 1-minute load average is printed beside each (figures taken under load are
not comparable in time, only in samples and accuracy).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rlvr_sync.yaml"


def one_run(work: Path, args: argparse.Namespace, filtered: bool) -> dict:
    name = "filter" if filtered else "no-filter"
    overrides = [f"max_steps={args.steps}", f"eval_steps={args.steps}", f"seed={args.seed}",
                 f"rollout_batch_size={args.batch}", f"num_return_sequences_in_group={args.n}",
                 f"val_batch_size={args.val}", f"output_dir={work / name}",
                 "tracking.mlflow=false", "save_steps=0", f"logging_steps={args.steps}",
                 f"drop_uniform_groups={str(filtered).lower()}"]
    load = os.getloadavg()[0]
    started = time.time()
    with open(work / "runs.log", "a") as log, contextlib.redirect_stdout(log):
        run_dir = run(load_config(EXAMPLE, overrides))
    seconds = time.time() - started
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    ledger = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    accuracy = [r["val/accuracy"] for r in rows if "val/accuracy" in r]
    generated = sum(r["samples"] for r in ledger)
    out = {
        "run": name, "steps": len(steps), "seconds": seconds, "load_before": load,
        "zero_adv_frac": sum(r["rollout/uniform_frac"] for r in steps) / len(steps),
        "generated_samples": generated,
        "trained_samples": sum(r["samples"] for r in ledger if r["fate"] == "trained"),
        "filtered_samples": sum(r["samples"] for r in ledger if r["fate"] == "filtered"),
        "cap_kept_samples": sum(r["rollout/filter_cap_kept"] for r in steps),
        "val_first": accuracy[0], "val_last": accuracy[-1],
        "train_reward": sum(r["reward/mean"] for r in steps) / len(steps),
    }
    out["left_over_samples"] = generated - out["trained_samples"] - out["filtered_samples"]
    out["gain_per_1k_generated"] = gain_per_1k(out)
    print(f"[{name}] {seconds:.0f} s (load {load:.1f}), val {out['val_first']:.3f} -> "
          f"{out['val_last']:.3f}", flush=True)
    return out


def gain_per_1k(r: dict) -> float:
    """Validation accuracy gained per 1000 samples generated for the trained batches."""
    spent = r["trained_samples"] + r["filtered_samples"]
    return 1000 * (r["val_last"] - r["val_first"]) / spent


def table(results: list[dict]) -> str:
    rows = [("", *(r["run"] for r in results)),
            ("zero-adv groups trained", *(f"{r['zero_adv_frac']:.3f}" for r in results)),
            ("generated samples", *(str(r["trained_samples"] + r["filtered_samples"])
                                    for r in results)),
            ("  trained", *(str(r["trained_samples"]) for r in results)),
            ("  filtered", *(str(r["filtered_samples"]) for r in results)),
            ("  cap kept (trained)", *(f"{r['cap_kept_samples']:.0f}" for r in results)),
            ("left over at the end", *(str(r["left_over_samples"]) for r in results)),
            ("val accuracy before", *(f"{r['val_first']:.3f}" for r in results)),
            ("val accuracy after", *(f"{r['val_last']:.3f}" for r in results)),
            ("val gain / 1k generated", *(f"{gain_per_1k(r):+.4f}" for r in results)),
            ("train reward (mean)", *(f"{r['train_reward']:.3f}" for r in results)),
            ("wall seconds", *(f"{r['seconds']:.0f}" for r in results))]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{r[0]:<{width}}  " + "  ".join(f"{c:>10}" for c in r[1:]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--val", type=int, default=200, help="validation prompts")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--quick", action="store_true", help="2 steps, 8 prompts: smoke test")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.batch, args.val = 2, 8, 32
    with tempfile.TemporaryDirectory(prefix="bench_dynamic_sampling_") as tmp:
        results = [one_run(Path(tmp), args, filtered) for filtered in (False, True)]
    print(f"\n{args.steps} steps x {args.batch} prompts x {args.n} samples, seed {args.seed}:")
    print(table(results))
    out = ROOT / "bench" / "results" / "dynamic_sampling.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
