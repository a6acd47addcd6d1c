"""TRL's DPOTrainer on pairs flywheel encoded: the peer side of bench_vs_trl.py's DPO part.
Runs in `.venv-trl` (make trl-venv), never in flywheel's venv; flywheel is on PYTHONPATH
only for trl_grpo_run's imports (its step clock is shared).

    .venv-trl/bin/python bench/trl_dpo_run.py --model DIR --pairs PAIRS.json --out DIR

PAIRS.json (written by bench_vs_trl.py): the token ids of every pair in the order
flywheel's run takes them (prompt ids through flywheel's template, each response's ids
with eos), and the run's settings (pairs per step, steps, beta, learning rate). TRL's own
tokenization is skipped (`_prepare_dataset` returns the ids as they are) and its sampler
is sequential, so each optimizer step sees the very rows flywheel's step sees.

Writes OUT/steps.json (per optimizer step: loss, reward margin and accuracy as TRL logs
them, wall-clock seconds) and the final weights to OUT/final.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from datasets import Dataset
from torch.utils.data import SequentialSampler
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer
from trl_grpo_run import StepClock  # this folder is on sys.path: the script's own


class GivenIds(DPOTrainer):
    """DPOTrainer on already tokenized pairs, in the given order; each optimizer step's
    loss and reward margin kept as exact floats (TRL's logs round them for display)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows: list[dict] = []

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        return dataset

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if self.model.training:  # one micro-batch per optimizer step here
            loss = out[0] if return_outputs else out
            self.rows.append({"loss": float(loss.detach()),
                              "rewards/margins": self._metrics["train"]["rewards/margins"][-1],
                              "rewards/accuracies":
                                  self._metrics["train"]["rewards/accuracies"][-1]})
        return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--pairs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    spec = json.loads(Path(a.pairs).read_text())
    out = Path(a.out)
    data = Dataset.from_list([{"prompt_ids": r["prompt"], "chosen_ids": r["chosen"],
                               "rejected_ids": r["rejected"]} for r in spec["pairs"]])
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    config = DPOConfig(
        output_dir=str(out / "trainer"), per_device_train_batch_size=spec["pairs_per_step"],
        gradient_accumulation_steps=1, max_steps=spec["steps"], learning_rate=spec["lr"],
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch",
        beta=spec["beta"], loss_type=["sigmoid"], label_smoothing=0.0, max_length=None,
        gradient_checkpointing=False, logging_steps=1, save_strategy="no", report_to=[],
        bf16=False, fp16=False, use_cpu=True, seed=spec["seed"], dataloader_num_workers=0,
        remove_unused_columns=False)
    clock = StepClock()
    trainer = GivenIds(model=model, ref_model=reference, args=config, train_dataset=data,
                       processing_class=tokenizer, callbacks=[clock])
    trainer.train()
    trainer.model.save_pretrained(out / "final")
    tokenizer.save_pretrained(out / "final")
    (out / "steps.json").write_text(json.dumps({"rows": trainer.rows, "step_s": clock.seconds},
                                               indent=1))


if __name__ == "__main__":
    main()
