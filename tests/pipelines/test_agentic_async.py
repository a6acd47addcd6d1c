"""The agentic pipeline on the prefetch machinery (real Ray actors, latency-only backends):
staleness bound and accounting under async generation, env failures reported with the env
id without stalling the run, and a dead env worker reported with its role and job."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest
import ray

from flywheel.platform.cluster import WorkerError
from flywheel.platform.config import load_config_dict
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.pipelines.agentic import AgenticPipeline
from flywheel.pipelines.agentic_rollout import start_env_workers
from flywheel.pipelines.launch import run
from flywheel.pipelines.roles import start_roles
from flywheel.workers.strategies.hf_model import load_tokenizer

from .agentic_sim_config import agentic_sim_config

FLAKY = {"Flaky": {"env_type": "flaky", "env_import_path":
                   "tests.pipelines.faulty_envs:FlakyEnv", "max_steps": 3,
                   "max_tokens_per_step": 4, "env_config": {"mode": "crash"}}}


def rows(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(x) for x in (run_dir / name).read_text().splitlines()]


@pytest.mark.parametrize("ratio, gen_s, train_s, seed", [(1.0, 0.004, 0.05, 1),
                                                         (2.0, 0.001, 0.08, 2)])
def test_staleness_bound_and_accounting(tmp_path, ray_session, tiny_model_path, ratio, gen_s,
                                        train_s, seed):
    cfg = load_config_dict(agentic_sim_config(tmp_path, ratio, gen_s=gen_s, train_s=train_s,
                                              jitter=0.9, seed=seed))
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


@pytest.mark.parametrize("mode", ["crash", "hang"])
def test_failing_env_is_reported_with_its_env_id_and_the_run_goes_on(
        tmp_path, ray_session, tiny_model_path, caplog, mode):
    raw = agentic_sim_config(tmp_path, 1.0, max_steps=3, eval_steps=0,
                             env_import_allowlist=["tests.pipelines"],
                             custom_envs={**FLAKY, "Flaky": {**FLAKY["Flaky"], "env_config": {
                                 "mode": mode}}})
    for pool in ("train_env_manager", "val_env_manager"):
        raw[pool] = {**raw[pool], "tags": ["Flaky"], "step_timeout_s": 1.0}
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="flywheel.pipelines.agentic_rollout"):
        run_dir = run(load_config_dict(raw))
    assert time.monotonic() - start < 90
    ledger = rows(run_dir, "samples.jsonl")
    failed = [r for r in ledger if r["fate"] == "env_error"]
    assert failed and len([r for r in ledger if r["fate"] == "trained"]) == 3 * 2
    dropped = sum(m["rollout/dropped_env_error"] for m in rows(run_dir, "metrics.jsonl"))
    assert 0 < dropped <= sum(r["samples"] for r in failed)
    expected = "RuntimeError: boom on turn 1" if mode == "crash" else "TimeoutError: step"
    messages = [r.getMessage() for r in caplog.records]
    assert any("raised in step (turn 0)" in m and expected in m and "env 0 (flaky" in m
               for m in messages), messages[:3]


def test_dead_env_worker_is_reported_with_its_role_and_job(tmp_path, ray_session,
                                                           tiny_model_path):
    cfg = load_config_dict(agentic_sim_config(tmp_path, 1.0))
    model = resolve_pretrain(cfg.pretrain)
    roles = start_roles(cfg, model, total_steps=10)
    try:
        env_workers = start_env_workers(cfg, model, roles.actor_infer)
        roles.all.append(env_workers)
        pipeline = AgenticPipeline.create(cfg, roles, load_tokenizer(tiny_model_path),
                                          tracker=None, output_dir=Path(tmp_path),
                                          env_workers=env_workers)
        gen = pipeline.make_generator()
        gen.start()
        try:
            gen.take(0)
            ray.kill(env_workers.actors[0], no_restart=True)
            gen.release(2)
            start = time.monotonic()
            with pytest.raises(WorkerError, match=r"env_workers rank 0: worker process died "
                                                  r"\(while running FrozenLake env groups "
                                                  r"\d+\.\.\d+ of batch \d+ \(env ids 0\.\.3"):
                for step in range(1, 50):
                    gen.take(step)
                    gen.release(2)
            assert time.monotonic() - start < 10
        finally:
            gen.stop()
    finally:
        roles.shutdown()
