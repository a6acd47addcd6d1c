"""A LoRA run whose vllm serves the adapter (`lora_sync: adapter`), through Ray: the sync
carries A and B alone (workers/strategies/vllm_adapters.py) and actor_infer samples from
the policy actor_train trains, step after step."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

from .sync_example import EXAMPLE

# ~35 s on 2 cores (a vllm engine and a LoRA trainer start): make test-long. The suite keeps
# the engine side (tests/workers/test_vllm_lora.py) and the config's plumbing
# (tests/platform/test_config_lora.py).
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_vllm_samples_from_the_trained_adapter(tmp_path, ray_session, arith_model_path):
    """At async_generation_ratio 0 the behaviour ratio pi_old / pi_vllm of every token is
    kernel mismatch alone; an adapter vllm did not apply would leave it sampling from the
    base, which lr 1e-2 moves far from after the first step."""
    pytest.importorskip("vllm")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        out = run(load_config(EXAMPLE, [
            "rollout_batch_size=4", "num_return_sequences_in_group=2", "logging_steps=100",
            "actor_train.training_args.per_device_train_batch_size=8", "tracking.mlflow=false",
            f"output_dir={tmp_path}", "max_steps=2", "eval_steps=0", "validation=null",
            "save_steps=0", "actor_infer.strategy_args.strategy_name=vllm",
            "actor_train.model_args.lora_target=all-linear",
            "actor_train.model_args.lora_rank=8", "actor_train.model_args.lora_sync=adapter",
            "actor_train.training_args.learning_rate=1e-2"]))
    assert "weight sync sends: the LoRA adapter alone" in printed.getvalue()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for m in steps[1:]:
        assert 0.99 < m["offpolicy/ratio_min"] <= m["offpolicy/ratio_max"] < 1.01, m
