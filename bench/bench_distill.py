"""Benchmark: on-policy distillation against RL from the same start, and self-distillation.

Three runs on one RLVR shape (examples/rlvr_smollm2.yaml, the times tables; --tiny: the
built-in tiny model on examples/rlvr_sync.yaml, shrunk), one after the other:

  rl     RL (the example as shipped: GRPO on the exact-answer reward) from the base model
         for --steps steps; its last checkpoint, exported, is the teacher of the next run
         (the teacher's cost is this run's wall time, reported with it)
  opd    pure OPD from the same base model with that teacher (teacher.rl, its own device
         slot), the same samples per step
  self   self-distillation: the base model as its own teacher with the answer in the
         teacher's context (weights: student, context_template), the same samples per step

For each: val/accuracy and the wall time since the run's start at the steps in --at (step
0 is the baseline every run validates first). The field reports that OPD reaches the
teacher's level in far fewer steps than RL (a dense per-token signal); the table says
whether it does here. Offline distillation (the third comparison of issue 45) has no
pipeline yet and is not run.

    .venv/bin/python bench/bench_distill.py [--tiny] [--steps 20] [--at 0,2,5,10,20]

Prints a markdown table and writes bench/results/bench_distill-<timestamp>.json. The
SmolLM2 shape costs roughly three RL runs of --steps steps (about an hour for 20 steps on
a 2-core CPU); run it on a quiet machine. The RL baseline's shape is
examples/rlvr_smollm2.yaml at the commit the JSON records (`git_commit`).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
import time
from pathlib import Path

import ray

from flywheel.config.schema import RayConfig
from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.export import export
from flywheel.pipelines.run.launch import run
from flywheel.platform.ray_runtime import start_ray

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SMOLLM2 = ROOT / "examples" / "rlvr_smollm2.yaml"
TINY = ROOT / "examples" / "rlvr_sync.yaml"
COMMON = ["tracking.mlflow=false", "logging_steps=1"]
TINY_SHAPE = ["rollout_batch_size=8", "num_return_sequences_in_group=4",
              "actor_train.training_args.per_device_train_batch_size=16",
              "actor_train.training_args.gradient_accumulation_steps=2",
              "val_batch_size=64"]
# the teacher's privileged context: the question, its answer, the question again
SELF_TEMPLATE = "'{prompt}{answer}\n{prompt}'"


def one_run(name: str, config: Path, overrides: list[str], out: Path) -> dict:
    started = time.time()
    run_dir = run(load_config(config, COMMON + overrides + [f"output_dir={out / name}"]))
    wall = time.time() - started
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"name": name, "run_dir": str(run_dir), "wall_s": wall, "records": records}


def curve(result: dict, at: list[int]) -> dict[int, tuple[float | None, float | None]]:
    """step -> (val/accuracy, seconds of training steps up to it: start-up excluded)."""
    elapsed, total = {}, 0.0
    for r in result["records"]:
        total += r.get("time/step", 0.0)
        elapsed[r["step"]] = total
    accuracy = {r["step"]: r["val/accuracy"] for r in result["records"] if "val/accuracy" in r}
    return {s: (accuracy.get(s), elapsed.get(s)) for s in at}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the built-in tiny model")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--at", default="0,2,5,10,20")
    args = parser.parse_args()
    at = [int(s) for s in args.at.split(",") if int(s) <= args.steps]
    config = TINY if args.tiny else SMOLLM2
    # validation at every step of --at: every gcd of them (the default 0,2,5,10,20: every
    # step, which on SmolLM2 is most of a run's time; --at 0,2,4,10,20 halves it)
    shape = (TINY_SHAPE if args.tiny else []) + [
        f"max_steps={args.steps}", "save_steps=0",
        f"eval_steps={math.gcd(*[s for s in at if s > 0]) or args.steps}"]
    start_ray(RayConfig(), num_slots=2)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_distill_") as tmp:
            out = Path(tmp)
            rl = one_run("rl", config, shape, out)
            teacher = out / "teacher"  # the RL run's last checkpoint, as a model folder
            export(Path(rl["run_dir"]), teacher)
            results.append(rl)
            results.append(one_run("opd", config, shape + [
                f"teacher.rl.model_args.model_name_or_path={teacher}",
                "teacher.rl.device_mapping=[1]"], out))
            results.append(one_run("self", config, shape + [
                "teacher.self.weights=student",
                f"teacher.self.context_template={SELF_TEMPLATE}"], out))
    finally:
        ray.shutdown()
    rows = ["| run | wall s | " + " | ".join(f"step {s}: val acc (s)" for s in at) + " |",
            "|---|---|" + "---|" * len(at)]
    table = {}
    for r in results:
        points = curve(r, at)
        table[r["name"]] = {"wall_s": r["wall_s"], "at": points}
        cells = [f"{a:.3f} ({t:.0f})" if a is not None and t is not None else "-"
                 for a, t in points.values()]
        rows.append(f"| {r['name']} | {r['wall_s']:.0f} | " + " | ".join(cells) + " |")
    print("\n".join(rows))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bench_distill-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"config": str(config.relative_to(ROOT)), "git_commit": commit,
                                "steps": args.steps, "table": table,
                                "runs": [{k: v for k, v in r.items() if k != "run_dir"}
                                         for r in results]}, indent=1))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
