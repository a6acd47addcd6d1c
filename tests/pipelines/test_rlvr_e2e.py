"""End to end: the shipped RLVR example, shrunk by overrides, through real Ray actors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

EXAMPLE = Path(__file__).parents[2] / "examples" / "rlvr_sync.yaml"
# Wall-clock figures differ run to run, and so does how far the prefetch thread got into
# the next batch when a step's metrics were read (queue depth).
NOT_COMPARABLE = ("time/", "throughput/", "idle/", "rollout/queue_depth")


def tiny_run(out: Path, *extra: str) -> Path:
    overrides = [
        f"output_dir={out}",
        "max_steps=4",              # a few steps: mechanics, not learning
        "rollout_batch_size=8",     # 8 prompts x 4 samples = 32 rows per step
        "num_return_sequences_in_group=4",
        "actor_train.training_args.per_device_train_batch_size=8",
        "actor_train.training_args.gradient_accumulation_steps=2",  # 2 optimizer steps/step
        "eval_steps=2",
        "val_batch_size=16",
        "save_steps=2",
        "logging_steps=1",
        f"tracking.mlflow_uri=sqlite:///{out.parent}/mlflow.db",
        *extra,
    ]
    return run(load_config(EXAMPLE, overrides))


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(NOT_COMPARABLE)}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, ray_session, arith_model_path):
    return tiny_run(tmp_path_factory.mktemp("rlvr") / "a")


def test_run_logs_every_step_and_validates(first_run):
    records = read_metrics(first_run)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]  # 0: validation before training
    for r in records[1:]:
        for key in ("reward/mean", "time/step", "time/generate", "time/train", "loss/policy"):
            assert key in r, key
    assert [r["step"] for r in records if "val/accuracy" in r] == [0, 2, 4]
    assert (first_run / "config.yaml").exists()


def test_run_trains_the_model(first_run, arith_model_path):
    before = load_file(str(Path(arith_model_path) / "model.safetensors"))
    after = load_file(str(first_run / "checkpoint-4" / "actor_train" / "model" /
                          "model.safetensors"))
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2, changed


def test_run_writes_atomic_checkpoints(first_run):
    names = sorted(p.name for p in first_run.iterdir() if p.name.startswith("checkpoint"))
    assert names == ["checkpoint-2", "checkpoint-4"]
    state = json.loads((first_run / "checkpoint-2" / "pipeline_state.json").read_text())
    assert state["step"] == 2 and state["version"] == 2


def test_metrics_reach_mlflow(first_run):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{first_run.parent}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("rlvr_sync").experiment_id])
    history = client.get_metric_history(runs[0].info.run_id, "reward/mean")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]
    accuracy = client.get_metric_history(runs[0].info.run_id, "val/accuracy")
    assert sorted(m.step for m in accuracy) == [0, 2, 4]
    # the run's config is an artifact beside the sqlite store, not in the cwd's ./mlruns
    artifacts = Path(runs[0].info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_relative_to(first_run.parent / "mlartifacts")
    assert (artifacts / "config.yaml").is_file()


def test_resume_continues_at_the_right_step_with_the_same_data(first_run):
    resumed = tiny_run(first_run.parent / "b",
                       f"resume_from_checkpoint={first_run / 'checkpoint-2'}")
    original = {r["step"]: comparable(r) for r in read_metrics(first_run)}
    after = {r["step"]: comparable(r) for r in read_metrics(resumed)}
    assert sorted(after) == [3, 4]
    for step in (3, 4):  # same batches, same weights, same RNG: the same numbers
        assert after[step] == original[step], step


def test_gae_critic_reference_and_kl_run_end_to_end(tmp_path, ray_session, arith_model_path):
    """The remaining roles: a critic (GAE, clipped value loss) and a reference (KL loss and
    adaptive KL penalty), each a Ray actor of its own."""
    run_dir = tiny_run(
        tmp_path / "gae", "max_steps=2", "eval_steps=0", "validation=null", "save_steps=0",
        "adv_estimator=gae", "lambd=0.95", "value_clip=0.2", "whiten_advantages=true",
        "critic={strategy_args: {strategy_name: hf_train}, device_mapping: [0]}",
        "reference={strategy_args: {strategy_name: hf_train}, device_mapping: [0]}",
        "use_kl_loss=true", "kl_loss_coef=0.01", "init_kl_coef=0.05", "target_kl=0.1",
        "actor_train.pg_variant=cispo",
    )
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        for key in ("vf/loss", "critic/grad_norm", "kl/loss", "kl/coef", "pg/loss"):
            assert key in r and r[key] == r[key], key  # present and not NaN
    assert (run_dir / "checkpoint-2" / "critic" / "model" / "model.safetensors").exists()


def test_each_worker_writes_its_own_log_file(first_run):
    logs = sorted(p.name for p in (first_run / "logs").glob("*.log"))
    assert {"actor_train-0.log", "actor_infer-0.log"} <= set(logs), logs
    assert any(name.startswith("rewards.") for name in logs), logs
