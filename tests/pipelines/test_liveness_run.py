"""Liveness in a run: a hung generate stops the run naming the role within
timeouts.generate_s, while train steps longer than timeouts.call_s that keep making
progress are waited for; the CLI prints one line naming error.log (full traceback)."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from flywheel.cli import main
from flywheel.pipelines.run.launch import write_error_log
from flywheel.platform.cluster import WorkerError

from .sim_config import sim_config


@pytest.mark.timeout(240)
def test_hung_generate_is_reported_and_slow_train_is_not(tmp_path, ray_session,
                                                          tiny_model_path, capsys):
    out = tmp_path / "run"
    cfg = sim_config(out, 0.0, gen_s=0.01, train_s=2.5, max_steps=3, eval_steps=0,
                     response_length=4, timeouts={"call_s": 1.0, "generate_s": 2.0})
    # 2 chunks a batch: the 3rd generate (batch 2's first) hangs without progress
    cfg["actor_infer"]["strategy_args"]["strategy_config"]["hang_at_call"] = 3
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", "--config", str(tmp_path / "c.yaml")]) == 1
    failed_at = time.time()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: WorkerError: actor_infer rank 0: step 2: generation made "
                          "no progress for 2s (running prompts 8..11 of batch 1)"), err
    assert err.endswith(f"(full traceback: {out / 'error.log'})"), err
    assert "Traceback" in (out / "error.log").read_text()
    # step 1 (2.5 s of training against a 1 s limit, progressing) was not reported
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1]
    hung_since = (out / "metrics.jsonl").stat().st_mtime  # batch 1 went out by step 1's end
    assert failed_at - hung_since < 2.0 + 10, "the stall took too long to report"


def test_error_log_keeps_the_workers_traceback(tmp_path):
    error = WorkerError("actor_train", 1, "ValueError: boom")
    error.remote_traceback = 'Traceback (most recent call last):\n  File "w.py"\nValueError: boom'
    path = write_error_log(tmp_path, error)
    text = (tmp_path / "error.log").read_text()
    assert path == str(tmp_path / "error.log")
    assert "actor_train rank 1: ValueError: boom" in text and 'File "w.py"' in text
