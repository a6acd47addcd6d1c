"""A pipeline across two Ray nodes: actor_train on one, actor_infer on the other.

The cluster is `ray.cluster_utils.Cluster` (real raylets on this machine, token
authentication on), joined by `platform run --address HOST:PORT`; see two_node_run.py.
Latency-only backends keep it to seconds of pipeline time: what is under test is
joining, placement and the run finishing, not the model.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.long  # ~1.5 min: a second raylet and a whole run on it (suite budget)
@pytest.mark.slow
def test_pipeline_runs_across_two_nodes(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "tests.platform.two_node_run", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])

    # Before the worker nodes joined: one line saying what `ray start` needs.
    assert result["no_slots"]["rc"] == 1
    error = result["no_slots"]["stderr"].strip().splitlines()[-1]
    assert "has 0 device slots" in error
    assert """ray start --head --resources='{"flywheel_slot": 2}'""" in error
    assert "Traceback" not in result["no_slots"]["stderr"]

    # After: joined by host:port with token auth, and each role on its own node.
    assert result["joined"]["rc"] == 0, result["joined"]["stderr"]
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "finished"
    [train_node], [infer_node] = status["nodes"]["actor_train"], status["nodes"]["actor_infer"]
    assert {train_node, infer_node} == set(result["slot_nodes"])
    steps = [json.loads(line)["step"]
             for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4]
