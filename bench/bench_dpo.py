"""Benchmark: offline DPO on SmolLM2-135M-Instruct (examples/dpo_smollm2.yaml, issue 46).

Val accuracy (363 held-out times-table prompts in wordings never trained on, greedy, 16
tokens, equal to the chosen answer) before training (the run's own step-0 validation) and
after one epoch of DPO on the pairs examples/data/times_tables_pairs.py writes; the DPO
metrics of the run (loss, reward margin and accuracy, train and held-out) and seconds per
step (training only: a step's time/step leaves its validation out).

    PYTHONPATH=. nice -n 19 .venv/bin/python bench/bench_dpo.py [--steps 30] [--val 363]
    PYTHONPATH=. .venv/bin/python bench/bench_dpo.py --tiny   # the mechanism, built-in tiny

Online DPO against GRPO (`--online`): examples/online_dpo_smollm2.yaml and
examples/rlvr_smollm2.yaml from the same start with the same samples per step (8 prompts x
8, 16 tokens, math_rule), val accuracy (363 prompts, greedy, the runs' own validation) and
wall time (the steps' time/step summed, validation left out) at steps 0, 5, 10 and 20.

    PYTHONPATH=. nice -n 5 .venv/bin/python bench/bench_dpo.py --online [--steps 20]

The reward model (`--reward-model`): builtin://smollm2-135m-times-rm, built by the
reward_model pipeline from flywheel/workshop/times_reward_model.yaml (on first use; its
build record, held-out pairwise accuracy included, is read from the model folder), then
examples/rlvr_smollm2_reward_model.yaml for `--steps` steps: per step the RM's mean raw
score (reward/rm_raw_score) beside the exact-answer accuracy of the same samples
(reward/correct_rate, math_rule at weight 0).

    PYTHONPATH=. .venv/bin/python bench/bench_dpo.py --reward-model [--steps 20]

Prints a markdown table and writes bench/results/bench_dpo-<timestamp>.json
(bench_dpo_online-<timestamp>.json with --online, bench_dpo_rm-<timestamp>.json with
--reward-model).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dpo_smollm2.yaml"
TINY = ROOT / "examples" / "dpo_tiny.yaml"
RM_RLVR = ROOT / "examples" / "rlvr_smollm2_reward_model.yaml"
ONLINE = {"online DPO": ROOT / "examples" / "online_dpo_smollm2.yaml",
          "GRPO": ROOT / "examples" / "rlvr_smollm2.yaml"}


@torch.no_grad()
def val_accuracy(cfg, model_path: str) -> float:
    """Greedy val/accuracy of `model_path` on the run's validation pairs, as the run's own
    validation measures it (pipelines/dpo/run.py)."""
    from flywheel.pipelines.dpo.run import load
    from flywheel.pipelines.sft.greedy_eval import greedy_complete_ids
    from flywheel.workers.strategies.hf_model import load_tokenizer
    from flywheel.workers.strategies.hf_train import HFTrainStrategy

    tokenizer = load_tokenizer(model_path)
    val = load(cfg, "validation", tokenizer)
    model = HFTrainStrategy(model_path, cfg.actor_train, cfg.seed, total_steps=1,
                            trainable=False).model
    replies = greedy_complete_ids(model, tokenizer, val.prompts, cfg.response_length,
                                  batch_size=cfg.actor_train.infer_batch_size)
    return sum(r.strip() == rec.chosen.strip() for r, rec in zip(replies, val.records)) / len(val)


def drop_checkpoints(run_dir: Path) -> None:
    """The runs' checkpoints (~0.5-1.6 GB each on SmolLM2): the figures are in metrics.jsonl."""
    for checkpoint in run_dir.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)


def online_curve(config: Path, steps: int, val: int, out: Path) -> dict[str, list[float]]:
    """val/accuracy and the training wall time (s) at steps 0, 5, 10, ... of one run."""
    from flywheel.pipelines.config import load_config
    from flywheel.pipelines.run.launch import run

    run_dir = run(load_config(config, [f"output_dir={out}", f"max_steps={steps}",
                                       "eval_steps=5", f"save_steps={steps}",
                                       f"val_batch_size={val}"]))
    drop_checkpoints(run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve: dict[str, list[float]] = {"step": [], "val_accuracy": [], "train_s": []}
    seconds = 0.0
    for row in sorted(rows, key=lambda r: r["step"]):
        seconds += row.get("time/step", 0.0) - row.get("time/validate", 0.0)
        if "val/accuracy" in row:
            curve["step"].append(row["step"])
            curve["val_accuracy"].append(row["val/accuracy"])
            curve["train_s"].append(seconds)
    return curve


def main_online(steps: int, val: int) -> None:
    curves, walls = {}, {}
    for name, config in ONLINE.items():
        start = time.perf_counter()
        curves[name] = online_curve(config, steps, val,
                                    Path(tempfile.mkdtemp(prefix="bench_dpo_online-")))
        walls[name] = time.perf_counter() - start
    print("| run | " + " | ".join(f"step {s}" for s in curves["GRPO"]["step"]) + " |")
    print("|---|" + "---|" * len(curves["GRPO"]["step"]))
    for name, curve in curves.items():
        cells = [f"{a:.3f} ({t:.0f} s)" for a, t in zip(curve["val_accuracy"],
                                                       curve["train_s"])]
        print(f"| {name}: val accuracy (train wall) | " + " | ".join(cells) + " |")
    for name, wall in walls.items():
        print(f"{name}: whole run {wall:.0f} s (start-up and validation included)")
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    path = results / f"bench_dpo_online-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"steps": steps, "val_prompts": val, "curves": curves,
                                "run_wall_s": walls}, indent=2))
    print(f"wrote {path}")


def main_reward_model(steps: int) -> None:
    """The built RM's record, then an RLVR run scored by it: raw score beside accuracy."""
    import flywheel.workers.rewards.registry  # noqa: F401  (registers the RM's name)
    from flywheel.pipelines.config import load_config
    from flywheel.pipelines.run.launch import run
    from flywheel.platform.models.builtin import resolve_pretrain

    folder = Path(resolve_pretrain("builtin://smollm2-135m-times-rm"))
    record = json.loads((folder / "reward_model.json").read_text())
    print(f"reward model: held-out pairwise accuracy {record['held_out_accuracy']:.3f} on "
          f"{record['held_out_pairs']} pairs, built in {record['seconds']} s ({folder})")
    out = Path(tempfile.mkdtemp(prefix="bench_dpo_rm-"))
    run(load_config(RM_RLVR, [f"output_dir={out}", f"max_steps={steps}", "save_steps=0"]))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    per_step = [{"step": r["step"], "rm_raw_score": r["reward/rm_raw_score"],
                 "correct_rate": r["reward/correct_rate"], "time_s": r["time/step"]}
                for r in sorted(rows, key=lambda r: r["step"])]
    print("| step | RM raw score | exact-answer accuracy | s |\n|---|---|---|---|")
    for r in per_step:
        print(f"| {r['step']} | {r['rm_raw_score']:.2f} | {r['correct_rate']:.3f} "
              f"| {r['time_s']:.1f} |")
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    path = results / f"bench_dpo_rm-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"reward_model": record, "rlvr_steps": per_step,
                                "run_dir": str(out)}, indent=2))
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--val", type=int, default=363, help="validation pairs")
    parser.add_argument("--tiny", action="store_true", help="built-in tiny model, 6 steps")
    parser.add_argument("--online", action="store_true",
                        help="online DPO against GRPO on SmolLM2 (20 steps by default)")
    parser.add_argument("--reward-model", action="store_true",
                        help="the times-tables RM's record and an RLVR run on it (20 steps)")
    args = parser.parse_args()
    if args.reward_model:
        main_reward_model(args.steps if args.steps != 30 else 20)
        return
    if args.online:
        main_online(args.steps if args.steps != 30 else 20, args.val)
        return

    from flywheel.pipelines.config import load_config
    from flywheel.pipelines.run.launch import run

    steps = 6 if args.tiny else args.steps
    val = 16 if args.tiny else args.val
    out = Path(tempfile.mkdtemp(prefix="bench_dpo-"))
    cfg = load_config(TINY if args.tiny else EXAMPLE,
                      [f"output_dir={out}", f"max_steps={steps}", f"save_steps={steps}",
                       f"eval_steps={steps}", f"val_batch_size={val}"])
    start = time.perf_counter()
    run(cfg)
    wall = time.perf_counter() - start
    drop_checkpoints(out)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    baseline = next(r for r in rows if r["step"] == 0)  # the run's validation before step 1
    trained = [r for r in rows if r["step"] > 0]
    last = trained[-1]
    steady = [r["time/step"] for r in trained[1:]] or [trained[0]["time/step"]]
    result = {
        "model": cfg.pretrain, "steps": steps, "val_pairs": val,
        "val_accuracy_before": baseline["val/accuracy"],
        "val_accuracy_after": last["val/accuracy"],
        "val_dpo_loss_before": baseline["val/dpo/loss"], "val_dpo_loss_after": last["val/dpo/loss"],
        "val_reward_accuracy_before": baseline["val/dpo/reward_accuracy"],
        "val_reward_accuracy_after": last["val/dpo/reward_accuracy"],
        "val_reward_margin_after": last["val/dpo/reward_margin"],
        "dpo_loss_first": trained[0]["dpo/loss"], "dpo_loss_last": last["dpo/loss"],
        "reward_margin_last": last["dpo/reward_margin"],
        "reward_accuracy_last": last["dpo/reward_accuracy"],
        "epochs": last["dpo/epoch"],
        "seconds_per_step": sum(steady) / len(steady),
        "train_s": sum(r["time/step"] for r in trained), "wall_s": wall, "run_dir": str(out),
    }
    print("| measure | value |\n|---|---|")
    for key, value in result.items():
        print(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |")
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    path = results / f"bench_dpo-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
