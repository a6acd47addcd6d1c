"""A short RLVR run with its weight syncs on a collective group (`weight_sync_carrier:
collective`: gloo on CPU, NCCL on GPUs, workers/weight_broadcast.py) or on the object store
trains exactly as the default carrier (shared memory here) does: the same metrics and the
same samples, step for step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

EXAMPLE = Path(__file__).parents[2] / "examples" / "rlvr_sync.yaml"
TIMING = ("time/", "throughput/", "idle/")  # wall clock: differs from run to run


def small_run(out: Path, carrier: str = "auto") -> tuple[list[dict], str]:
    overrides = [f"output_dir={out}", f"weight_sync_carrier={carrier}", "max_steps=3",
                 # devices of their own: a broadcast group takes one rank per device
                 "actor_train.device_mapping=[0]", "actor_infer.device_mapping=[1]",
                 "eval_steps=0", "validation=null",
                 "save_steps=0", "rollout_batch_size=4", "num_return_sequences_in_group=2",
                 "actor_train.training_args.per_device_train_batch_size=8",
                 "offload_between_phases=false",  # the generator applies each sync
                 "tracking.mlflow=false", "tracking.sample_text_steps=1"]
    out = run(load_config(EXAMPLE, overrides))
    metrics = [{k: v for k, v in json.loads(line).items() if not k.startswith(TIMING)}
               for line in (out / "metrics.jsonl").read_text().splitlines()]
    return metrics, (out / "sample_texts.jsonl").read_text()


@pytest.mark.long  # three runs: ~70 s on the 2-core machine
def test_every_carrier_trains_as_the_default_one(tmp_path, ray_session, arith_model_path,
                                                 capsys):
    default = small_run(tmp_path / "default")
    assert "weight sync: shared memory" in capsys.readouterr().out
    collective = small_run(tmp_path / "collective", "collective")
    assert "weight sync: collective (gloo" in capsys.readouterr().out
    assert collective == default
    store = small_run(tmp_path / "store", "object_store")
    assert "weight sync: object store (weight_sync_carrier: object_store)" in \
        capsys.readouterr().out
    assert store == default
