"""The agentic pipeline on the prefetch machinery (real Ray actors, latency-only backends):
staleness bound and accounting under async generation, env failures reported with the env
id without stalling the run. A dead env worker, reported with its role and job, is
test_worker_faults.py's env_workers case."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run

from .agentic_sim_config import agentic_sim_config

FLAKY = {"env_type": "flaky", "env_import_path": "tests.pipelines.faulty_envs:FlakyEnv",
         "max_steps": 3, "max_tokens_per_step": 4}


def rows(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(x) for x in (run_dir / name).read_text().splitlines()]


def test_staleness_bound_and_accounting(tmp_path, ray_session, tiny_model_path):
    ratio = 2.0  # generation up to two batches ahead; jittered latencies
    cfg = load_config_dict(agentic_sim_config(tmp_path, ratio, gen_s=0.002, train_s=0.08,
                                              jitter=0.9, seed=2))
    run_dir = run(cfg)
    ledger = rows(run_dir, "samples.jsonl")
    seqs = [r["seq"] for r in ledger]
    assert len(seqs) == len(set(seqs)), "a group appears twice in the ledger"
    assert {r["fate"] for r in ledger} <= {"trained", "stale", "aborted"}
    trained = [r for r in ledger if r["fate"] == "trained"]
    groups_per_step = cfg.rollout_batch_size // cfg.train_env_manager.group_size
    assert len(trained) == cfg.max_steps * groups_per_step
    for r in trained:  # the bound holds for each group's start version (its first turn)
        assert 0 <= r["staleness"] <= math.ceil(ratio), r
        assert r["samples"] == cfg.train_env_manager.group_size
    metrics = {m["step"]: m for m in rows(run_dir, "metrics.jsonl")}
    assert sorted(metrics) == list(range(cfg.max_steps + 1))  # 0: the baseline validation
    for step in range(1, cfg.max_steps + 1):
        m = metrics[step]
        assert m["staleness/max"] == max(r["staleness"] for r in trained if r["step"] == step)
        for key in ("env/success", "env/FrozenLake/action_is_valid", "time/generate",
                    "idle/actor_infer", "throughput/tokens_per_s", "rollout/dropped_env_error"):
            assert key in m, key
    assert "val/env/FrozenLake/success" in metrics[3] and "val/env/success" in metrics[0]
    stale = sum(m.get("rollout/dropped_stale", 0) for m in metrics.values())
    assert stale == sum(r["samples"] for r in ledger if r["fate"] == "stale")


def test_crashing_and_hung_envs_are_reported_with_env_ids_and_the_run_goes_on(
        tmp_path, ray_session, tiny_model_path, caplog):
    """Env groups whose seed is odd fail on their first step: Crashy ones raise, Hangy ones
    block for an hour (past step_timeout_s). Each is dropped, counted and logged with its
    env id; the run trains on the others and finishes."""
    raw = agentic_sim_config(
        tmp_path, 1.0, max_steps=3, eval_steps=0, env_import_allowlist=["tests.pipelines"],
        custom_envs={"Crashy": {**FLAKY, "env_config": {"mode": "crash"}},
                     "Hangy": {**FLAKY, "env_config": {"mode": "hang"}}})
    raw["train_env_manager"] = {**raw["train_env_manager"], "tags": ["Crashy", "Hangy"],
                                "step_timeout_s": 0.5}
    raw["val_env_manager"] = {**raw["val_env_manager"], "tags": ["Crashy"]}
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="flywheel.pipelines.agentic.env_jobs"):
        run_dir = run(load_config_dict(raw))
    assert time.monotonic() - start < 120
    ledger = rows(run_dir, "samples.jsonl")
    failed = [r for r in ledger if r["fate"] == "env_error"]
    assert len([r for r in ledger if r["fate"] == "trained"]) == 3 * 2
    assert {r["id"].split("/")[0] for r in failed} == {"Crashy", "Hangy"}
    dropped = sum(m["rollout/dropped_env_error"] for m in rows(run_dir, "metrics.jsonl"))
    assert 0 < dropped <= sum(r["samples"] for r in failed)
    messages = [r.getMessage() for r in caplog.records]
    for expected in ("RuntimeError: boom on turn 1", "TimeoutError: step gave no answer"):
        assert any("raised in step (turn 0)" in m and expected in m and "env 0 (flaky" in m
                   for m in messages), (expected, messages[:2])
