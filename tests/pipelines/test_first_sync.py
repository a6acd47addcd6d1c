"""actor_infer generates from actor_train's weights from the first batch and the step-0
validation on, whatever it loaded itself (ROLL's `load_format: dummy`, another model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parents[2] / "examples" / "rlvr_sync.yaml"


def baseline_accuracy(out: Path, *extra: str) -> float:
    overrides = [f"output_dir={out}", "max_steps=1", "eval_steps=1", "val_batch_size=64",
                 "rollout_batch_size=4", "num_return_sequences_in_group=2",
                 "actor_train.training_args.per_device_train_batch_size=8",
                 "tracking.mlflow=false", "save_steps=0", *extra]
    rows = [json.loads(x) for x in (run(load_config(EXAMPLE, overrides)) / "metrics.jsonl")
            .read_text().splitlines()]
    return next(r["val/accuracy"] for r in rows if r["step"] == 0)


def test_untrained_infer_model_validates_with_actor_trains_weights(tmp_path, ray_session,
                                                                   arith_model_path):
    same = baseline_accuracy(tmp_path / "same")
    assert same > 0.05  # the warm-started model answers some
    other = baseline_accuracy(tmp_path / "other",
                              "actor_infer.model_args.model_name_or_path=builtin://tiny-qwen2")
    assert other == same  # random-init weights on actor_infer were replaced before step 0


def test_vllm_dummy_weights_are_replaced_before_step_0(tmp_path, ray_session,
                                                        arith_model_path):
    pytest.importorskip("vllm")
    accuracy = baseline_accuracy(
        tmp_path / "dummy", "actor_infer.strategy_args.strategy_name=vllm",
        "actor_infer.strategy_args.strategy_config={load_format: dummy}")
    assert accuracy > 0.05  # dummy (random) weights would answer none
