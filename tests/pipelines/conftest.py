"""A run two test files read, started once per session (a run's start-up is most of its
cost on two cores)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

from .sync_example import EXAMPLE, SMALL


@pytest.fixture(scope="session")
def small_sync_run(tmp_path_factory, ray_session, arith_model_path) -> tuple[Path, str]:
    """The shipped synchronous example, colocated (phase switch on), 3 steps, validating at
    steps 0, 2 and 3: its directory and what the driver printed. test_async_learning.py
    compares its steps with a hand-written loop; test_phase_switch.py reads its phases;
    test_rollout_mock.py replays its batches, which it dumps to run/../dump."""
    out = tmp_path_factory.mktemp("small_sync") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run(load_config(EXAMPLE, SMALL + ["max_steps=3", "eval_steps=2", "val_batch_size=8",
                                          "save_steps=0", f"output_dir={out}",
                                          "rollout_mock.mode=dump",
                                          f"rollout_mock.dump_dir={out.parent / 'dump'}"]))
    return out, printed.getvalue()
