"""Runs that survive: SIGKILL of the driver at random moments, and SIGTERM mid-step.

Each run is `platform run` in a child process (chaos_runs.py) joining the test session's
Ray (the suite's SIGTERM and last resume run here, through cli.main); `make chaos` runs the
longer version (more seeds, 3 kills a run, each run its own Ray).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from flywheel import cli
from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run
from tests.pipelines.chaos_runs import (
    chaos_run,
    check_ledger,
    kill_run,
    metrics_by_step,
    start,
    steps_logged,
    wait_for_step,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def address(ray_session, tiny_model_path) -> str:
    """The test session's Ray, joined by every child run (no Ray start per run)."""
    return ray_session.get_runtime_context().gcs_address


# A sim step sleeps >= 0.23 s (generate and train are sleeps: 0.24 s measured), so after the
# resume's first step (3 at most) the steps up to 6 outlast the <= 0.6 s a kill waits, on any
# machine. At 4 steps a fast CI machine finished the run before the kill.
STEPS = 6


def sigterm_after_a_step(tmp_path, ratio: float, address: str):
    """A 6-step run sent SIGTERM once step 1 is checkpointed: the step it was in finishes,
    a checkpoint is written, it exits 130 naming the resume command. Its directory, log
    and the last step it logged."""
    out, log = tmp_path / "run", tmp_path / "run.log"
    config = write_config(tmp_path / "c.yaml", out, ratio, max_steps=STEPS)
    proc = start(["--config", str(config)], log, address)
    try:
        wait_for_step(proc, out, 1, 120)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        kill_run(proc)
    return out, log, check_stopped(rc, log.read_text(), out, config)


def sigterm_after_a_step_here(tmp_path, capsys) -> tuple[Path, int]:
    """sigterm_after_a_step at r=0 with the run in this process: `cli.main`, which the
    `platform` command exits with, gets SIGTERM through the same handler (the run's, on
    the main thread), without a driver's start (~10 s of imports on an idle machine, 40 s
    loaded). The run's directory and the last step it logged."""
    out = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", out, 0.0, max_steps=STEPS)
    sent = threading.Event()

    def send_sigterm_after_step_1() -> None:
        deadline = time.monotonic() + 120
        while steps_logged(out) < 1 or not (out / "checkpoint-1" / "COMPLETE").exists():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        sent.set()

    # should the run end first, a late SIGTERM must not end the test session
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    sender = threading.Thread(target=send_sigterm_after_step_1, daemon=True)
    sender.start()
    try:
        rc = cli.main(["run", "--config", str(config)])
    finally:
        sender.join(timeout=130)
        signal.signal(signal.SIGTERM, previous)
    captured = capsys.readouterr()
    assert sent.is_set(), "step 1 was never checkpointed"
    return out, check_stopped(rc, captured.out + captured.err, out, config)


def check_stopped(rc: int, text: str, out: Path, config: Path) -> int:
    """What a SIGTERM'd run leaves (module doc); the last step it logged."""
    assert rc == 130, text[-2000:]
    assert f"resume: platform run --resume {out}" in text
    step = steps_logged(out)
    assert (out / f"checkpoint-{step}" / "COMPLETE").exists()  # the step it was in finished
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
    # the resume reads RUN_DIR/config.yaml, which this config wrote with max_new_tokens
    # only (no response_length), and takes an override on top
    assert "response_length" not in yaml.safe_load(config.read_text())
    return step


def test_sigterm_then_sigkill_lose_and_repeat_nothing(tmp_path, address, capsys):
    """One synchronous run stopped twice: SIGTERM mid-step, then, resumed, SIGKILL at a
    seeded random moment; resumed again with an override, it equals the uninterrupted run
    number for number and trains every group once. The SIGKILL'd segment is a `platform
    run` process of its own (it takes the driver); the others run here (cli.main)."""
    out, step = sigterm_after_a_step_here(tmp_path, capsys)
    log = tmp_path / "run.log"
    proc = start(["--resume", str(out)], log, address)
    try:
        wait_for_step(proc, out, step + 1, 120)
        time.sleep(random.Random(0).uniform(0.0, 0.6))  # a random moment of a later step
    finally:
        kill_run(proc)
    assert steps_logged(out) < STEPS, "the run finished before it could be killed"

    # constant learning rate: a longer horizon changes no number of steps 1..STEPS
    rc = cli.main(["run", "--resume", str(out), f"max_steps={STEPS + 1}"])
    assert rc == 0, capsys.readouterr().err[-2000:]
    check_ledger(out, STEPS + 1)
    whole = tmp_path / "whole"
    run(load_config(write_config(tmp_path / "whole.yaml", whole, 0.0, max_steps=STEPS + 1)))
    assert sorted(metrics_by_step(out)) == list(range(1, STEPS + 2))
    assert metrics_by_step(out) == metrics_by_step(whole)


@pytest.mark.long  # ~1 min each (make test-long, make chaos): the suite's run above is r=0
def test_sigterm_of_an_asynchronous_run_leaves_a_checkpoint_and_resumes(tmp_path, address):
    out, log, _ = sigterm_after_a_step(tmp_path, 1.0, address)
    proc = start(["--resume", str(out), f"max_steps={STEPS + 1}"], log, address)
    assert proc.wait(timeout=120) == 0, log.read_text()[-2000:]
    check_ledger(out, STEPS + 1)


@pytest.mark.long
def test_sigkill_of_an_asynchronous_run_loses_and_repeats_nothing(tmp_path, address):
    out, events = chaos_run(tmp_path, 1.0, seed=1, kills=1, max_steps=4, address=address)
    assert events, "the run finished before it could be killed"
    print(f"r=1: {events}", file=sys.stderr)


@pytest.mark.long  # ~2 min (vLLM starts with every resume): make test-long and make chaos
def test_sigkill_of_a_streaming_vllm_run_loses_and_repeats_nothing(tmp_path, address):
    """vllm streams groups and loads weights while responses run (partial rollout): a
    kill with engine requests in flight loses and repeats no group."""
    pytest.importorskip("vllm")
    out, events = chaos_run(tmp_path, 1.0, seed=5, kills=1, max_steps=4, address=address,
                            vllm=True, limit_s=240)
    assert events, "the run finished before it could be killed"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("staleness/max", 0) for r in rows) <= 1


@pytest.mark.long  # ~1 min: make test-long and make chaos (3 kills a run there)
def test_sigkill_of_an_agentic_run_loses_and_repeats_no_env_group(tmp_path, address):
    out, events = chaos_run(tmp_path, 1.0, seed=3, kills=2, max_steps=5, address=address,
                            agentic=True)
    assert events, "the run finished before it could be killed"
