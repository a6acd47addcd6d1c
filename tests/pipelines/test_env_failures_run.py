"""Whole agentic runs (latency-only backends, real env workers) whose envs misbehave:
- an env whose step always raises stops the run after max_consecutive_env_failures groups,
  naming the env and its error, within seconds (it dropped groups forever before);
- SIGTERM stops a run whose step can never complete (every env hangs) at once, with no
  checkpoint and exit 130 (the signal waited for a step that never came);
- an env that os._exits on some episodes costs those groups, counted and named, and the run
  finishes (the env worker died and took the run with it before).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import yaml

from flywheel.pipelines.agentic.env_jobs import EnvFailureLimit
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run
from tests.pipelines.agentic_sim_config import agentic_sim_config
from tests.pipelines.chaos_runs import kill_run, start

FLAKY = {"env_type": "flaky", "env_import_path": "tests.pipelines.faulty_envs:FlakyEnv",
         "max_steps": 2, "max_tokens_per_step": 4}


def flaky_config(tmp_path: Path, mode: str, every_seed: bool, **pool) -> dict:
    raw = agentic_sim_config(tmp_path / "run", 1.0, max_steps=3, eval_steps=0,
                             env_import_allowlist=["tests.pipelines"],
                             custom_envs={"Flaky": {**FLAKY, "env_config": {
                                 "mode": mode, "every_seed": every_seed}}})
    raw["train_env_manager"] = {**raw["train_env_manager"], "tags": ["Flaky"], **pool}
    raw["val_env_manager"] = {**raw["val_env_manager"], "tags": ["Flaky"]}
    return raw


def ledger(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


@pytest.mark.long  # a Ray run (~40 s here under load); in process: test_agentic_batch.py
def test_an_always_raising_env_stops_the_run_naming_the_env(tmp_path, ray_session,
                                                            tiny_model_path):
    cfg = load_config_dict(flaky_config(tmp_path, "crash", True,
                                        max_consecutive_env_failures=6))
    start_s = time.monotonic()
    with pytest.raises(EnvFailureLimit) as info:
        run(cfg)
    assert time.monotonic() - start_s < 120
    said = str(info.value)
    assert said.startswith("train_env_manager: ") and "max_consecutive_env_failures=6" in said
    assert "tag Flaky: env " in said and "RuntimeError: boom on turn 1" in said
    dropped = [r for r in ledger(tmp_path / "run") if r["fate"] == "env_error"]
    # the limit (the group that reached it stops the run before the ledger records it),
    # plus what was in flight beside it
    assert 5 <= len(dropped) <= 6 + 4
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "failed"


@pytest.mark.long  # a Ray run; in process: tests/workers/test_env_process.py
def test_an_env_that_exits_costs_its_groups_and_the_run_finishes(tmp_path, ray_session,
                                                                 tiny_model_path):
    run_dir = run(load_config_dict(flaky_config(tmp_path, "exit", False)))
    rows = ledger(run_dir)
    assert len([r for r in rows if r["fate"] == "trained"]) == 3 * 2
    assert any(r["fate"] == "env_error" for r in rows)  # odd seeds died (os._exit(3))
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(m.get("rollout/dropped_env_error", 0) for m in metrics) > 0


@pytest.mark.long  # a run in a child process with its own Ray start (~40 s here)
def test_sigterm_stops_a_run_whose_step_cannot_complete(tmp_path):
    raw = flaky_config(tmp_path, "hang", True, step_timeout_s=30)
    raw["ray"] = {"num_cpus": 2, "object_store_memory_mb": 256}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    out, log = tmp_path / "run", tmp_path / "run.log"
    proc = start(["--config", str(config)], log)
    try:
        deadline = time.monotonic() + 180
        while "phase switch" not in log.read_text():  # the step loop has started
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(5)  # the first jobs are out, every env asleep in its first step
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rc = proc.wait(timeout=60)
        waited = time.monotonic() - sent
    finally:
        kill_run(proc)
    text = log.read_text()
    assert rc == 130, text[-2000:]
    assert "SIGTERM before the first step finished: no checkpoint" in text
    assert waited < 30, waited  # sooner than one hung step's limit
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
