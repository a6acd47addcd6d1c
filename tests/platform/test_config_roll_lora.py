"""ROLL's four LoRA examples through `platform convert --from roll` (interop/roll/fit/lora.py).

Each case is the LoRA part of one of ROLL's examples (qwen2.5-0.5B-agentic
agentic_val_sokoban_lora, qwen2.5-7B-rlvr_megatron rlvr_config_lora and rlvr_lora_fsdp2,
qwen3-30BA3B-rlvr_megatron rlvr_config_lora) on a small ROLL file: actor_train's LoRA keys
and backend, the same keys repeated on actor_infer, the reference. Each converts and
validates, LoRA on. The whole files are bench/roll_check.py's: the three RLVR ones stop
there on features other than LoRA (max_len_mask, difficulty_mask, reward workers).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flywheel.config.derived import reference_from_actor
from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.platform.config.yaml_source import load_layers

MECHANICS = Path(__file__).parents[1] / "data" / "configs" / "roll" / "mechanics"
ROLL_RLVR = MECHANICS / "roll_rlvr.yaml"
FROZEN_LAKE = MECHANICS / "agentic" / "frozen_lake.yaml"
SERVED = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"  # actor_infer's, in ROLL
MERGED = "actor_infer receives actor_train's weights with the adapter merged in"


def megatron(**layout) -> dict:
    config = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
              "expert_model_parallel_size": 1, "use_distributed_optimizer": True,
              "recompute_granularity": "full", **layout}
    return {"strategy_name": "megatron_train", "strategy_config": config}


def lora(target: str, rank: int) -> dict:
    return {"lora_target": target, "lora_rank": rank, "lora_alpha": rank}


# name: (agentic, actor_train's model_args and strategy_args, actor_infer's model_args,
#        the zero_stage it converts to (None: ROLL's fsdp2, deepspeed_train's default))
CASES = {
    "agentic_val_sokoban_lora": (True, lora("all-linear", 32), megatron(), lora(SERVED, 32),
                                 1),
    "qwen2.5-7B rlvr_config_lora": (False, lora("all-linear", 64), megatron(),
                                    lora(SERVED, 64), 1),
    "qwen2.5-7B rlvr_lora_fsdp2": (False, lora("o_proj,q_proj,k_proj,v_proj", 32),
                                   {"strategy_name": "fsdp2_train",
                                    "strategy_config": {"fsdp_size": 16}},
                                   lora("o_proj,q_proj,k_proj,v_proj", 32), None),
    "qwen3-30BA3B rlvr_config_lora": (False, lora("all-linear", 64),
                                      megatron(pipeline_model_parallel_size=2,
                                               expert_model_parallel_size=8,
                                               sequence_parallel=True),
                                      lora(SERVED, 64), 3),
}


def roll_file(tmp_path: Path, agentic: bool, train_lora: dict, strategy: dict,
              infer_lora: dict, **top) -> Path:
    """A ROLL file of the shape of the example: the small fixture with its LoRA blocks."""
    data = load_layers(FROZEN_LAKE if agentic else ROLL_RLVR).data
    data.pop("hydra", None)
    train = data.setdefault("actor_train", {})
    # read by ROLL's HF backends only: megatron_train recomputes by its strategy_config
    train.setdefault("model_args", {}).update(train_lora, disable_gradient_checkpointing=True)
    train["strategy_args"] = strategy
    data.setdefault("actor_infer", {}).setdefault("model_args", {}).update(infer_lora)
    if agentic:
        data["adv_estimator"] = "grpo"  # the sokoban example's (ROLL's default is gae)
    data.update(top)
    path = tmp_path / "roll_lora.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("name", CASES)
def test_each_of_rolls_lora_examples_converts_and_validates_with_lora_on(name, tmp_path):
    agentic, train_lora, strategy, infer_lora, stage = CASES[name]
    conversion = convert_roll(roll_file(tmp_path, agentic, train_lora, strategy, infer_lora))
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    args = cfg.actor_train.model_args
    assert (args.lora_target, args.lora_rank, args.lora_alpha) == (
        train_lora["lora_target"], train_lora["lora_rank"], train_lora["lora_alpha"])
    assert cfg.actor_train.strategy_args.strategy_name == "deepspeed_train"
    assert cfg.actor_train.strategy_args.strategy_config.get("zero_stage") == stage
    assert cfg.actor_infer.model_args.lora_target is None
    for key in infer_lora:
        assert f"actor_infer.model_args.{key}: {MERGED}" in conversion.dropped
    if strategy["strategy_name"] == "megatron_train":
        assert any(m.startswith("actor_train.strategy_args: megatron_train -> deepspeed_train "
                                f"with zero_stage {stage} (") for m in conversion.mapped)
        assert not args.disable_gradient_checkpointing  # recompute_granularity: full


def test_a_kl_reference_of_the_same_base_runs_inside_the_lora_actor(tmp_path):
    """ROLL's reference block (its own devices, a megatron_infer backend) goes: the
    reference is actor_train's model with the adapter disabled, and no worker starts."""
    _, train_lora, strategy, infer_lora, _ = CASES["qwen2.5-7B rlvr_config_lora"]
    reference = {"model_args": {"dtype": "fp32"}, "device_mapping": "list(range(0,1))",
                 "infer_batch_size": 8, "strategy_args": {"strategy_name": "megatron_infer",
                                                          "strategy_config": {}}}
    path = roll_file(tmp_path, False, train_lora, strategy, infer_lora, use_kl_loss=True,
                     kl_loss_coef=0.1, reference=reference)
    conversion = convert_roll(path)
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert reference_from_actor(cfg)
    for key in ("device_mapping", "infer_batch_size", "strategy_args", "model_args.dtype"):
        assert any(d.startswith(f"reference.{key}: not read here: acts only when the "
                                f"reference is a role of its own") for d in conversion.dropped)


def test_a_lora_actor_on_a_backend_without_lora_is_a_missing_feature(tmp_path,
                                                                    monkeypatch):
    """The megatron mapping is what keeps the LoRA keys: without it they would be inert on
    megatron_train and dropped, and the run a full fine-tune. Any backend flywheel trains
    no adapter on is reported missing instead."""
    monkeypatch.setattr("flywheel.interop.roll.fit.lora.LORA_BACKENDS", ("hf_train",))
    _, train_lora, _, infer_lora, _ = CASES["qwen2.5-7B rlvr_lora_fsdp2"]
    conversion = convert_roll(roll_file(tmp_path, False, train_lora,
                                        {"strategy_name": "deepspeed_train"}, infer_lora))
    assert conversion.missing == ["LoRA on deepspeed_train (actor_train.strategy_args."
                                  "strategy_name = deepspeed_train; flywheel trains an adapter "
                                  "on hf_train)"]
