"""`platform export` (pipelines/run/export.py) on the built-in tiny model, checkpoints built in
process with HFTrainStrategy.save (no pipeline run).

What each test holds: a LoRA checkpoint exports to a folder whose logits are the training
model's with the adapter on (and not the base's: an unmerged export fails); a run directory
means its newest checkpoint; the folder loads as a flywheel `pretrain`; a full fine-tune's
checkpoint exports its weights; input that is no checkpoint is one error line, exit 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.cli import main
from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.platform.checkpoint import writing_checkpoint
from flywheel.workers.strategies.hf_train import HFTrainStrategy

LORA = {"lora_target": "all-linear", "lora_rank": 4, "additional_target": "model.norm"}
IDS = torch.tensor([[3, 17, 42, 8, 99, 5, 61, 7]])


def trainer(model_path: str, model_args: dict) -> HFTrainStrategy:
    cfg = WorkerConfig(model_args=ModelArgs(**model_args), training_args=TrainingArgs())
    return HFTrainStrategy(model_path, cfg, seed=0, total_steps=1)


@torch.no_grad()
def moved(strategy: HFTrainStrategy) -> HFTrainStrategy:
    """Every trained parameter moved at random, as training would (LoRA's B no longer 0)."""
    generator = torch.Generator().manual_seed(1)
    for p in strategy.model.parameters():
        if p.requires_grad:
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return strategy


def run_dir_with(tmp_path: Path, strategy: HFTrainStrategy, model_args: dict,
                 steps: tuple[int, ...] = (2,)) -> Path:
    """A run directory as `platform run` leaves it: config.yaml and checkpoint-<step>/."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(
        {"pretrain": "builtin://tiny-qwen2", "actor_train": {"model_args": model_args}}))
    for step in steps:
        with writing_checkpoint(run_dir, step) as tmp:
            strategy.save(str(tmp / "actor_train"))
    return run_dir


@torch.no_grad()
def logits(model: torch.nn.Module) -> torch.Tensor:
    return model(input_ids=IDS).logits.float()


def test_a_lora_checkpoint_exports_the_merged_model(tmp_path, tiny_model_path, capsys):
    strategy = moved(trainer(tiny_model_path, LORA))
    run_dir = run_dir_with(tmp_path, strategy, LORA, steps=(1, 2))
    out = tmp_path / "served"
    assert main(["export", str(run_dir), "-o", str(out)]) == 0
    assert "from " + (run_dir / "checkpoint-2").as_posix() in capsys.readouterr().out

    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    exported = AutoModelForCausalLM.from_pretrained(out)
    trained = logits(strategy.model)  # the PEFT-injected model, adapter on
    base = logits(AutoModelForCausalLM.from_pretrained(tiny_model_path))
    assert (trained - base).abs().max() > 1e-2  # the adapter changes the outputs
    torch.testing.assert_close(logits(exported), trained, atol=1e-5, rtol=1e-5)
    assert AutoTokenizer.from_pretrained(out).encode("12+7=") == AutoTokenizer.from_pretrained(
        tiny_model_path).encode("12+7=")
    # flywheel starts from it as a `pretrain` (full fine-tuning of the merged model)
    again = trainer(str(out), {})
    torch.testing.assert_close(logits(again.model), trained, atol=1e-5, rtol=1e-5)


def test_a_full_fine_tune_checkpoint_exports_its_weights(tmp_path, tiny_model_path):
    strategy = moved(trainer(tiny_model_path, {}))
    checkpoint = run_dir_with(tmp_path, strategy, {}) / "checkpoint-2"
    out = tmp_path / "served"
    assert main(["export", str(checkpoint), "-o", str(out), "--dtype", "bf16"]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out)
    assert exported.dtype == torch.bfloat16
    expected = {k: v.to(torch.bfloat16) for k, v in strategy.model.state_dict().items()}
    got = exported.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in expected)


@pytest.mark.parametrize("make", ["missing", "empty_dir", "no_policy"])
def test_input_that_is_no_checkpoint_is_one_error_line(tmp_path, capsys, make):
    source = tmp_path / "source"
    if make != "missing":
        source.mkdir()
    if make == "no_policy":  # complete, but nothing of actor_train in it
        (source / "COMPLETE").write_text('{"step": 1}')
    assert main(["export", str(source), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ExportError: ") and str(source) in err[0]
    assert not (tmp_path / "out").exists()
