"""Injected divergence: a train step whose loss is NaN stops the run with an error naming
the step and the metric, and the last good checkpoint stays the newest."""

from __future__ import annotations

import time

import pytest
import ray

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run
from flywheel.platform.checkpoint import complete_checkpoints
from flywheel.platform.cluster import WorkerError

from .sim_config import sim_config


@pytest.mark.timeout(240)
def test_non_finite_loss_stops_the_run_naming_step_and_metric(tmp_path, ray_session,
                                                              tiny_model_path):
    out = tmp_path / "run"
    cfg = sim_config(out, 1.0, max_steps=5, eval_steps=0, save_steps=1)
    cfg["actor_train"]["strategy_args"]["strategy_config"]["nan_at_call"] = 3
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"actor_train rank 0: step 3: DivergenceError: "
                                          r"pg/loss is nan at optimizer step 1"):
        run(load_config_dict(cfg))
    # an exception in a train backend stops the run fast and leaves no actor behind
    # (test_prefetch_pause_and_faults.py checks the same for actor_infer)
    assert time.monotonic() - start < 90  # start-up included; no hang
    alive = [a for a in ray._private.state.actors().values() if a["State"] == "ALIVE"]
    assert alive == []
    assert [s for s, _ in complete_checkpoints(out)] == [1, 2]
    assert "DivergenceError" in (out / "error.log").read_text()
