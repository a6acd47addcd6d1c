"""Runs that survive: SIGKILL of the driver at random moments, and SIGTERM mid-step.

Each run is `platform run` in a child process (chaos_runs.py) joining the test session's
Ray; `make chaos` runs the longer version (more seeds, 3 kills a run, each run its own Ray).
"""

from __future__ import annotations

import json
import signal
import sys
import time

import pytest
import yaml

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


def test_sigterm_mid_step_leaves_a_checkpoint_and_resumes(tmp_path, address):
    out = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", out, 1.0, max_steps=4)
    log = tmp_path / "run.log"
    proc = start(["--config", str(config)], log, address)
    try:
        wait_for_step(proc, out, 1, 120)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        kill_run(proc)
    text = log.read_text()
    assert rc == 130, text[-2000:]
    assert f"resume: platform run --resume {out}" in text
    step = steps_logged(out)
    assert (out / f"checkpoint-{step}" / "COMPLETE").exists()  # the step it was in finished
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
    # the resume reads RUN_DIR/config.yaml, which this config wrote with max_new_tokens
    # only (no response_length), and takes an override on top
    assert "response_length" not in yaml.safe_load(config.read_text())
    proc = start(["--resume", str(out), "max_steps=5"], log, address)
    assert proc.wait(timeout=120) == 0, log.read_text()[-2000:]
    check_ledger(out, 5)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]


# ratio 1 (~1 min) runs with `make test-long` and `make chaos`; ratio 0 stays in the suite
@pytest.mark.parametrize("ratio", [0.0, pytest.param(1.0, marks=pytest.mark.long)])
def test_sigkill_at_random_moments_loses_and_repeats_nothing(tmp_path, address, ratio):
    t0 = time.monotonic()
    out, events = chaos_run(tmp_path, ratio, seed=int(ratio), kills=1, max_steps=4,
                            address=address)
    assert events, "the run finished before it could be killed"
    if ratio == 0:  # the resumed synchronous run is the uninterrupted one, number for number
        whole = tmp_path / "whole"
        run(load_config(write_config(tmp_path / "whole.yaml", whole, ratio, max_steps=4)))
        assert metrics_by_step(out) == metrics_by_step(whole)
    print(f"r={ratio}: {events}, {time.monotonic() - t0:.0f}s", file=sys.stderr)


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
