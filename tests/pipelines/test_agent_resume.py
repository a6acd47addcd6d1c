"""An agent run stopped and killed with episodes in flight, resumed each time: every task
group is trained exactly once (issue 47 item 4). `platform run` in a child process
(chaos_runs.py) on the built-in tiny-qwen2-arith, the agent by import path
(agents/held_sums_agent.py: the sums agent making a second call that continues the first,
holding each episode open between them, so a signal lands mid-episode), actor_infer on
hf_infer, one step ahead (ratio 1), every episode trained as one row (agent.rows:
episode).

- SIGTERM with episodes in flight: the checkpoint pauses generation, so the in-flight
  episodes finish (each start has its end) and their groups are saved in the buffer;
  the run exits 130.
- SIGKILL with episodes in flight: the episodes die with the run; the resumed run cuts the
  ledger back to its checkpoint and plays their job again (same tasks, same seeds).
- The last resume runs to the end: samples.jsonl holds every group of every step trained
  once, none recorded twice (chaos_runs.check_ledger)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.pipelines.chaos_runs import check_ledger, kill_run, start, steps_logged, wait_for_step

ROOT = Path(__file__).parents[2]
STEPS = 5
GROUPS = 2  # rollout_batch_size 16 / group_size 8


@pytest.fixture(scope="module")
def address(ray_session, tiny_model_path) -> str:
    return ray_session.get_runtime_context().gcs_address


def write_config(tmp: Path, out: Path) -> Path:
    raw = yaml.safe_load((ROOT / "examples/agent_tiny_sums.yaml").read_text())
    flights = tmp / "flights"
    flights.mkdir()
    tasks = tmp / "tasks.jsonl"
    lines = (ROOT / "examples/data/sums_tasks_train.jsonl").read_text().splitlines()[:64]
    tasks.write_text("".join(json.dumps({**json.loads(line), "flight_dir": str(flights),
                                         "hold_s": 1.0}) + "\n" for line in lines))
    raw.update(output_dir=str(out), max_steps=STEPS, save_steps=1, eval_steps=0,
               logging_steps=1, rollout_batch_size=16, sequence_length=32,
               import_allowlist=["tests.pipelines.agents"],
               ray={"num_cpus": 2, "object_store_memory_mb": 256})
    raw["agent"].update(import_path="tests.pipelines.agents.held_sums_agent:agent",
                        tasks=str(tasks), val_tasks="",
                        chat_template=str(ROOT / raw["agent"]["chat_template"]))
    raw["actor_train"]["training_args"]["per_device_train_batch_size"] = 16
    del raw["validation"]  # no validation here (eval_steps 0)
    path = tmp / "agent.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def in_flight(flights: Path, since: float) -> list[str]:
    """Episodes started after `since` that have not returned."""
    return [p.stem for p in flights.glob("*.start")
            if p.stat().st_mtime >= since and not (flights / f"{p.stem}.end").exists()]


def wait_in_flight(proc, flights: Path, since: float, limit_s: float = 60) -> list[str]:
    deadline = time.monotonic() + limit_s
    while not (flying := in_flight(flights, since)):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no episode in flight (run rc {proc.poll()})")
        time.sleep(0.02)
    return flying


@pytest.mark.long  # three `platform run` segments on the tiny model: minutes under load
@pytest.mark.timeout(900)
def test_stop_and_kill_mid_episode_then_resume_train_every_group_once(tmp_path, address):
    out, log = tmp_path / "run", tmp_path / "run.log"
    config = write_config(tmp_path, out)
    flights = tmp_path / "flights"

    proc = start(["--config", str(config)], log, address)
    try:
        wait_for_step(proc, out, 1, 300)
        flying = wait_in_flight(proc, flights, time.time())
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        kill_run(proc)
    assert rc == 130, log.read_text()[-3000:]
    assert all((flights / f"{name}.end").exists() for name in flying), \
        "SIGTERM cut an episode instead of letting the checkpoint's pause finish it"
    stopped_at = steps_logged(out)
    assert stopped_at < STEPS

    proc = start(["--resume", str(out)], log, address)
    try:
        wait_for_step(proc, out, stopped_at + 1, 300)
        since = time.time()
        wait_in_flight(proc, flights, since)
    finally:
        kill_run(proc)
    killed_at = steps_logged(out)
    assert killed_at < STEPS, "the run finished before it could be killed"
    assert in_flight(flights, since), "the kill landed with no episode in flight"

    proc = start(["--resume", str(out)], log, address)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    check_ledger(out, STEPS, GROUPS)
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in records if "agent/reward" in r) == list(range(1, STEPS + 1))
    for r in (r for r in records if "agent/reward" in r):
        assert r["rollout/dropped_stale"] == 0 and r["staleness/max"] <= 1
        assert r["agent/calls"] == 2.0 and r["agent/history_rewrites"] == 0
        assert r["agent/rows"] == 16.0  # 16 episodes of two calls: one row each
        # the second call's prompt repeats the first's: one row reads it once
        assert r["agent/row_tokens"] < r["agent/prompt_tokens"] + r["agent/completion_tokens"]
