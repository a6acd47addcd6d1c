"""Benchmark: SmolLM2-135M-Instruct on multiply-with-a-calculator as a plain `openai`
client agent (examples/agents/multiply_agent.py) trained through flywheel's endpoint
(examples/agent_smollm2_multiply_openai.yaml), beside the built-in agentic pipeline's
figures for the same task and warm start (examples/agent_smollm2_multiply_tools.yaml,
README "Agentic pipeline": greedy success 0.328 at step 0 -> 1.000 at steps 10 and 20).

Both start from the 4-step SFT warm start (examples/sft_smollm2_tool_calls.yaml); the
endpoint renders the OpenAI tool list and results in the Hermes format that warm start
learned (agent.tool_format: hermes), so step 0 is the same start
(tests/pipelines/test_agent_token_continuity.py holds the prompt ids equal). Prints
val/agent/reward (greedy success on the 64 held-out products of
examples/data/multiply_tasks_val.jsonl: 64 products of their own, not the built-in
pipeline's env seeds) at each validation step, the step times, and per episode the calls,
the training rows and the ids they hold (agent.rows: episode packs an episode's calls into
one row; one row per call would hold agent/prompt_tokens + agent/completion_tokens).

    # the warm start (~5 min), then the RL run (~30 min on the 2-core CPU: run it idle)
    platform run --config examples/sft_smollm2_tool_calls.yaml
    PYTHONPATH=. .venv/bin/python bench/bench_agent_multiply.py \
        --pretrain runs/sft_smollm2_tool_calls/<timestamp>/checkpoint-4
    # the mechanism only: 1 step, 4 held-out products (a few minutes)
    PYTHONPATH=. .venv/bin/python bench/bench_agent_multiply.py --tiny

Writes bench/results/agent_multiply-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "agent_smollm2_multiply_openai.yaml"
BUILTIN = {0: 0.328, 10: 1.0, 20: 1.0}  # README, examples/agent_smollm2_multiply_tools.yaml


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrain", default="", help="the SFT warm start's checkpoint")
    parser.add_argument("--tiny", action="store_true", help="1 step, 4 held-out products")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="agent_multiply_"))
    overrides = [f"output_dir={out}", f"max_steps={args.steps}"]
    if args.pretrain:
        overrides.append(f"pretrain={args.pretrain}")
    if args.tiny:
        val = out / "val.jsonl"
        val.write_text("".join((ROOT / "examples/data/multiply_tasks_val.jsonl").read_text()
                               .splitlines(keepends=True)[:4]))
        overrides += ["max_steps=1", "eval_steps=1", "save_steps=0", f"agent.val_tasks={val}"]
    cfg = load_config(str(CONFIG), overrides)
    started = time.time()
    run_dir = run(cfg)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text()
               .splitlines()]
    val = {r["step"]: r["val/agent/reward"] for r in records if "val/agent/reward" in r}
    failed = {r["step"]: r.get("val/agent/failed", 0.0) for r in records
              if "val/agent/reward" in r}
    tasks = len((ROOT / "examples/data/multiply_tasks_val.jsonl").read_text().splitlines()) \
        if not args.tiny else 4
    steps = [r["time/step"] for r in records if "time/step" in r]
    # val/agent/reward averages the episodes that ran to the end; the built-in pipeline
    # counts a failed episode as unsuccessful, so the comparison column does too
    print("| step | success, failed as 0 (endpoint agent) | val/agent/reward | failed | "
          "built-in agentic pipeline |")
    print("|---|---|---|---|---|")
    for step, reward in sorted(val.items()):
        over_all = reward * (tasks - failed[step]) / tasks
        print(f"| {step} | {over_all:.3f} | {reward:.3f} | {failed[step]:.0f} | "
              f"{BUILTIN.get(step, float('nan')):.3f} |")
    for r in records:
        if "agent/reward" in r:
            print(f"step {r['step']}: train agent/reward {r['agent/reward']:.3f}, "
                  f"time/step {r.get('time/step', float('nan')):.0f} s")
    print(f"wall {time.time() - started:.0f} s; mean step {sum(steps) / max(len(steps), 1):.1f} s")
    trained = [r for r in records if "agent/row_tokens" in r]
    if trained:  # agent.rows: episode packs an episode's calls; per call = prompt + completion
        def mean(key: str) -> float:
            return sum(r[key] for r in trained) / len(trained)
        per_call = mean("agent/prompt_tokens") + mean("agent/completion_tokens")
        rows = mean("agent/rows") / cfg.rollout_batch_size
        print(f"per episode: {mean('agent/calls'):.2f} calls, {rows:.2f} "
              f"rows, {mean('agent/row_tokens'):.0f} row tokens trained (one row per call: "
              f"{per_call:.0f})")
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / f"agent_multiply-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({"val": val, "step_s": steps, "pretrain": args.pretrain,
                    "tiny": args.tiny, "steps": trained}, indent=1))


if __name__ == "__main__":
    main()
