"""End to end: the shipped agentic example, shrunk by overrides, through real Ray actors
(actor_train, actor_infer, env workers) with the built-in FrozenLake model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run
from flywheel.platform.models.builtin import resolve_pretrain

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_val_frozen_lake_sync.yaml"


@pytest.fixture(scope="module")
def frozenlake_model_path() -> str:
    """The tiny Qwen2 after its FrozenLake warm start (minutes the first time, then cached)."""
    return resolve_pretrain("builtin://tiny-qwen2-frozenlake")


SHRUNK = [
    "max_steps=2",                                # mechanics, not learning
    "rollout_batch_size=16",                      # 2 groups x 8 episodes per step
    "train_env_manager.num_env_groups=2",
    "train_env_manager.num_groups_partition=[2]",
    "train_env_manager.max_env_num_per_worker=8",  # 2 env workers, one group each
    "actor_train.training_args.per_device_train_batch_size=8",  # 1 optimizer step/step
    "tracking.mlflow=false",
]


def vllm_installed() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


# On vllm (hf_infer where it is not installed: test_metrics_page's agentic run covers
# hf_infer) the env workers' turns stream into one engine batch (generate_stream). vllm
# starts from `load_format: dummy` (random weights, as ROLL configs write it): the first
# sync must replace them before the step-0 validation and the first batch, or no reply
# would have the warm start's format.
INFER = (["actor_infer.strategy_args.strategy_name=vllm",
          "actor_infer.strategy_args.strategy_config={load_format: dummy}"]
         if vllm_installed() else [])


@pytest.fixture(scope="module")
def agentic_run(tmp_path_factory, ray_session, frozenlake_model_path) -> Path:
    out = tmp_path_factory.mktemp("agentic") / "run"
    overrides = [
        f"output_dir={out}",
        *SHRUNK,
        *INFER,
        "val_batch_size=8",                           # 8 held-out maps
        "val_env_manager.num_env_groups=8",
        "val_env_manager.num_groups_partition=[8]",
        "val_env_manager.max_env_num_per_worker=8",
        "eval_steps=2",
        "save_steps=2",
        "logging_steps=1",
    ]
    return run(load_config(EXAMPLE, overrides))


def read(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def test_run_logs_env_metrics_for_train_and_validation(agentic_run):
    records = read(agentic_run, "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records[1:]:
        for key in ("env/success", "env/FrozenLake/success", "env/episode_reward",
                    "env/episode_length", "env/action_is_valid", "reward/mean", "loss/policy",
                    "staleness/max", "time/step", "time/generate", "idle/actor_infer",
                    "throughput/samples_per_s"):
            assert key in r, key
        assert r["staleness/max"] == 0  # synchronous
        assert r["env/action_is_valid"] > 0.5  # the warm start taught the reply format
    for r in (records[0], records[2]):
        assert "val/env/FrozenLake/success" in r
        assert r["val/env/action_is_valid"] > 0.5  # synced weights from step 0 on


def test_every_group_is_trained_once_at_its_version(agentic_run):
    ledger = read(agentic_run, "samples.jsonl")
    assert [(r["step"], r["version"], r["samples"]) for r in ledger if r["fate"] == "trained"
            ] == [(1, 0, 8), (1, 0, 8), (2, 1, 8), (2, 1, 8)]
    assert len({r["seq"] for r in ledger}) == len(ledger)


def test_run_trains_the_model_and_checkpoints_the_buffer(agentic_run, frozenlake_model_path):
    before = load_file(str(Path(frozenlake_model_path) / "model.safetensors"))
    after = load_file(str(agentic_run / "checkpoint-2" / "actor_train" / "model" /
                          "model.safetensors"))
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2
    state = json.loads((agentic_run / "checkpoint-2" / "pipeline_state.json").read_text())
    assert state["step"] == 2 and isinstance(state["buffer"], list)
