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
whether it does here.

Then offline distillation (--offline-records N, 0 to skip): the teacher's greedy replies
to the first N training prompts become fixed records; from the base model, one epoch of
pure forward KL to the teacher's top-k (pipeline_type distill, distill_loss_weight 1)
beside one epoch of plain SFT on the same replies (pipeline_type sft); each checkpoint
scored on the RL run's validation prompts by the same reward (pipeline_type evaluate,
greedy), so its accuracy reads as the RL table's.

    .venv/bin/python bench/bench_distill.py [--tiny] [--steps 20] [--at 0,2,5,10,20]
        [--offline-records 256] [key.path=value ...]

Trailing overrides apply to the RL-shape config of every run and stage, e.g.
`actor_train.model_args.dtype=fp32 actor_infer.model_args.dtype=fp32` on a CPU that
emulates bf16 (no avx512_bf16/amx_bf16: the example's bf16 is many times slower there).

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
from flywheel.pipelines.config import load_config, load_config_dict
from flywheel.pipelines.rlvr.rollout import load_prompt_sets
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
# The teacher's privileged context: the question with its answer. Single-quoted YAML (the
# override's value is YAML), so no newline inside: YAML folds one into a space.
SELF_TEMPLATE = "'{prompt} (the answer is {answer})'"


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


def teacher_records(config: Path, overrides: list[str], teacher: Path, n: int,
                    path: Path) -> Path:
    """The teacher's greedy replies to the first `n` training prompts, as JSONL records."""
    import torch

    from flywheel.config.schema import ModelArgs
    from flywheel.pipelines.data.prompt_data import prompt_encoder
    from flywheel.pipelines.sft.greedy_eval import greedy_complete_ids
    from flywheel.workers.strategies.hf_model import load_causal_lm, load_tokenizer

    cfg = load_config(config, COMMON + overrides)
    tokenizer = load_tokenizer(str(teacher))
    records = load_prompt_sets(cfg, tokenizer).train[:n]
    encode = prompt_encoder(tokenizer, cfg.actor_train.data_args)
    model = load_causal_lm(str(teacher), ModelArgs(dtype="fp32"), torch.device("cpu")).eval()
    replies = greedy_complete_ids(model, tokenizer, [encode(r.prompt, r.tag) for r in records],
                                  cfg.response_length, batch_size=32)
    path.write_text("".join(json.dumps({"prompt": r.prompt, "answer": reply.strip()}) + "\n"
                            for r, reply in zip(records, replies)))
    return path


def offline_runs(config: Path, overrides: list[str], teacher: Path, records: Path, out: Path,
                 tiny: bool) -> list:
    """One epoch of forward KL to the teacher, one of SFT, each checkpoint evaluated."""
    cfg = load_config(config, COMMON + overrides)
    data = cfg.actor_train.data_args
    args = {"file_name": str(records), "template": data.template,
            "system_prompt": data.system_prompt}
    common = {"seed": cfg.seed, "pretrain": cfg.pretrain, "prompt_length": cfg.prompt_length,
              "response_length": cfg.response_length, "save_steps": 0, "eval_steps": 0,
              "logging_steps": 1, "tracking": {"mlflow": False},
              "actor_train": {"data_args": args, "model_args": {
                  "dtype": cfg.actor_train.model_args.dtype},
                  "training_args": {"learning_rate": 1e-4 if tiny else 2e-5,
                                    "per_device_train_batch_size": 16,
                                    "num_train_epochs": 1.0}}}
    kinds = {"offline_kd": {"pipeline_type": "distill", "kd_objective": "forward_kl",
                            "distill_loss_weight": 1.0, "logits_topk": 8 if tiny else 64,
                            "teacher": {"rl": {"model_args": {
                                "model_name_or_path": str(teacher)}}}},
             "offline_sft": {"pipeline_type": "sft"}}
    val = cfg.validation.data_args if cfg.validation else data
    results = []
    for name, kind in kinds.items():
        started = time.time()
        run_dir = run(load_config_dict(common | kind | {"output_dir": str(out / name)}))
        wall = time.time() - started
        steps = max(json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text()
                    .splitlines())
        scored = run(load_config_dict({
            "pipeline_type": "evaluate", "seed": cfg.seed,
            "pretrain": str(run_dir / f"checkpoint-{steps}"),
            "prompt_length": cfg.prompt_length, "response_length": cfg.response_length,
            "val_batch_size": cfg.val_batch_size, "output_dir": str(out / f"{name}_eval"),
            "actor_train": {"data_args": {"file_name": val.file_name,
                                          "template": data.template,
                                          "system_prompt": data.system_prompt}},
            "actor_infer": {"generating_args": {"do_sample": False},
                            "strategy_args": {"strategy_name": "hf_infer"},
                            "infer_batch_size": 64},
            "rewards": {n: {"reward_type": r.reward_type} for n, r in cfg.rewards.items()},
            "tracking": {"mlflow": False}}))
        row = json.loads((scored / "metrics.jsonl").read_text().splitlines()[0])
        results.append({"name": name, "wall_s": wall, "steps": steps,
                        "val_accuracy": row["eval/accuracy"]})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the built-in tiny model")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--at", default="0,2,5,10,20")
    parser.add_argument("--offline-records", type=int, default=256,
                        help="training prompts the teacher answers for offline "
                             "distillation (0: skip it)")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value",
                        help="applied to the RL-shape config of every run")
    args = parser.parse_args()
    at = [int(s) for s in args.at.split(",") if int(s) <= args.steps]
    config = TINY if args.tiny else SMOLLM2
    # validation at every step of --at: every gcd of them (the default 0,2,5,10,20: every
    # step, which on SmolLM2 is most of a run's time; --at 0,2,4,10,20 halves it)
    shape = (TINY_SHAPE if args.tiny else []) + args.overrides + [
        f"max_steps={args.steps}", "save_steps=0",
        f"eval_steps={math.gcd(*[s for s in at if s > 0]) or args.steps}"]
    start_ray(RayConfig(), num_slots=2)
    results, offline = [], []
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
            if args.offline_records:
                records = teacher_records(config, args.overrides, teacher,
                                          args.offline_records, out / "teacher_records.jsonl")
                offline = offline_runs(config, args.overrides, teacher, records, out,
                                       args.tiny)
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
    if offline:
        print(f"\noffline, one epoch over the teacher's replies to {args.offline_records} "
              f"training prompts (validation: the RL table's prompts and reward, greedy)")
        print("| run | steps | wall s | val acc |\n|---|---|---|---|")
        for r in offline:
            print(f"| {r['name']} | {r['steps']} | {r['wall_s']:.0f} | "
                  f"{r['val_accuracy']:.3f} |")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bench_distill-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"config": str(config.relative_to(ROOT)), "git_commit": commit,
                                "overrides": args.overrides, "steps": args.steps,
                                "table": table, "offline": offline,
                                "runs": [{k: v for k, v in r.items() if k != "run_dir"}
                                         for r in results]}, indent=1))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
