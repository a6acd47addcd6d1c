"""`pipeline_type: sft` with LoRA (actor_train.model_args.lora_target, the RL keys): a short
run of examples/sft_tiny.yaml trains only the adapter, its checkpoint holds the adapter (not
a whole model) and the tokenizer, and `platform export` merges it into the run's pretrain;
an SFT train step (cross-entropy, the run's strategy) moves every adapter weight and no other.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from flywheel.cli import main
from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run
from flywheel.pipelines.sft.train import CrossEntropy
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.lora import ADAPTER_WEIGHTS

EXAMPLE = Path(__file__).parents[2] / "examples" / "sft_tiny.yaml"


def test_an_sft_run_with_lora_trains_and_saves_only_the_adapter(tmp_path, tiny_model_path):
    cfg = load_config(EXAMPLE, [
        f"output_dir={tmp_path / 'run'}", "max_steps=3", "eval_steps=3", "val_batch_size=8",
        "actor_train.training_args.per_device_train_batch_size=8",
        "actor_train.training_args.warmup_steps=0",
        "actor_train.model_args.lora_target=q_proj,v_proj",  # two of seven linear kinds
        "actor_train.model_args.lora_rank=4"])
    run_dir = run(cfg, str(EXAMPLE))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and "val/accuracy" in rows[-1]

    checkpoint = run_dir / "checkpoint-3"
    adapter = load_file(checkpoint / "adapter" / ADAPTER_WEIGHTS)
    assert adapter and all("lora_A" in k or "lora_B" in k for k in adapter)
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in adapter.items())  # trained
    assert not (checkpoint / "model.safetensors").exists()
    assert (checkpoint / "tokenizer_config.json").exists()

    out = tmp_path / "merged"
    assert main(["export", str(run_dir), "-o", str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(out).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    assert merged.keys() == base.keys()
    changed = {k for k in base if not torch.equal(merged[k], base[k])}
    # every q/v projection weight moved (B A merged in), and nothing else did
    assert changed == {k for k in base if k.endswith(("q_proj.weight", "v_proj.weight"))}


def test_an_sft_step_changes_only_the_adapter(tiny_model_path):
    cfg = load_config(EXAMPLE, ["actor_train.model_args.lora_target=all-linear",
                                "actor_train.training_args.warmup_steps=0"])
    strategy = HFTrainStrategy(tiny_model_path, cfg.actor_train, cfg.seed, total_steps=2)
    batch = pack_sequences([[1, 5, 9, 3], [2, 7, 4]], [[11, 12, 2], [13, 2]], pad_id=0)
    before = {n: p.detach().clone() for n, p in strategy.model.named_parameters()}
    trainable = {n for n, p in strategy.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)
    for _ in range(2):  # the first step moves B (A's gradient is 0 while B is), the second A
        strategy.train_step(batch, CrossEntropy())
    after = dict(strategy.model.named_parameters())
    assert {n for n in before if not torch.equal(before[n], after[n])} == trainable
