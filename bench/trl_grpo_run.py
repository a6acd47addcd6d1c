"""TRL's GRPOTrainer on the task of examples/rlvr_smollm2.yaml: the peer side of
bench_vs_trl.py. Runs in `.venv-trl` (make trl-venv), never in flywheel's venv; flywheel
is on PYTHONPATH only for its math_rule reward, so both sides score with the same code.

    .venv-trl/bin/python bench/trl_grpo_run.py --model DIR --out DIR --steps 5 --seed 1

Writes the final weights to OUT/final (evaluated by flywheel's validation afterwards) and
OUT/steps.json: the wall-clock seconds of each optimizer step.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from flywheel.workers.rewards.math_rule import score

SYSTEM_PROMPT = "Give only the final number."  # the example's data_args.system_prompt


def times_tables(path: Path) -> Dataset:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return Dataset.from_list([
        {"prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": r["prompt"]}],
         "answer": r["answer"]} for r in rows])


def math_rule_reward(prompts, completions, answer, **_) -> list[float]:
    """flywheel's math_rule on each completion (TRL's reward function signature)."""
    return [score("", c[-1]["content"], a).score for c, a in zip(completions, answer)]


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.seconds: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.seconds.append(now - self.last)
        self.last = now


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    # the example's settings: 8 prompts x 8 samples, one optimizer step per 64 samples
    # (2 x 32), 16 new tokens at T=1, lr 2e-5 constant, clip 1.0, no KL, GRPO group
    # normalisation, token mean per sequence then mean over sequences (seq-mean-token-mean)
    cfg = GRPOConfig(
        output_dir=str(out), max_steps=a.steps, seed=a.seed, use_cpu=True, bf16=False,
        per_device_train_batch_size=32, gradient_accumulation_steps=2, num_generations=8,
        max_completion_length=16, temperature=1.0, top_p=1.0, learning_rate=2e-5,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group", num_iterations=1,
        logging_steps=1, save_strategy="no", report_to="none")
    clock = StepClock()
    trainer = GRPOTrainer(model=a.model, reward_funcs=math_rule_reward, args=cfg,
                          train_dataset=times_tables(Path(a.data)), callbacks=[clock])
    clock.last = time.perf_counter()
    trainer.train()
    trainer.save_model(str(out / "final"))
    trainer.processing_class.save_pretrained(str(out / "final"))
    (out / "steps.json").write_text(json.dumps({"step_s": clock.seconds,
                                                "log": trainer.state.log_history}))


if __name__ == "__main__":
    main()
