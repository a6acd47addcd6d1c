"""The shipped synchronous RLVR example, shrunk: the shape the ratio-0 and phase-switch
tests share (tests/pipelines/conftest.py runs it once)."""

from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "rlvr_sync.yaml"  # both roles on [0]
SMALL = ["rollout_batch_size=8", "num_return_sequences_in_group=4", "logging_steps=100",
         "actor_train.training_args.per_device_train_batch_size=16",
         "actor_train.training_args.gradient_accumulation_steps=2", "tracking.mlflow=false"]
