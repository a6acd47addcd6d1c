"""rollout_mock: a run that replays another run's dumped batches trains on exactly them.

The dump run is the session's small synchronous run (conftest.py, `mode: dump`). The mock
run differs in its seed, which changes every sampled response when generation runs: its
training numbers can equal the dump run's only if its batches came from the dump.
"""

from __future__ import annotations

import json

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.loop.rollout_mock import recorded_for, step_file
from flywheel.pipelines.run.launch import run
from flywheel.platform.config.errors import ConfigError

from .sync_example import EXAMPLE, SMALL

NOT_COMPARABLE = ("time/", "throughput/", "idle/", "val/", "rollout/queue_depth")


def training_numbers(run_dir) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(NOT_COMPARABLE)}
            for r in rows if r["step"] > 0}


def mock_overrides(dump_dir, *extra: str) -> list[str]:
    return SMALL + ["rollout_mock.mode=mock", f"rollout_mock.dump_dir={dump_dir}",
                    "eval_steps=0", "validation=null", "save_steps=0", *extra]


def test_a_mock_run_trains_on_the_dumped_batches(tmp_path, small_sync_run):
    dump_dir = small_sync_run[0].parent / "dump"
    dumped = json.loads(step_file(dump_dir, 1).read_text())
    assert len(dumped["groups"]) == 8 and dumped["stale"] == dumped["filtered"] == []
    out = run(load_config(EXAMPLE, mock_overrides(dump_dir, "seed=7", "max_steps=2",
                                                  f"output_dir={tmp_path / 'mock'}")))
    dump_run, mock_run = training_numbers(small_sync_run[0]), training_numbers(out)
    assert sorted(mock_run) == [1, 2]
    assert mock_run == {s: m for s, m in dump_run.items() if s <= 2}
    assert mock_run[2]["actor/grad_norm"] != mock_run[1]["actor/grad_norm"]  # two batches


def test_a_dump_shorter_than_the_run_is_refused_before_workers_start(small_sync_run):
    dump_dir = small_sync_run[0].parent / "dump"
    cfg = load_config(EXAMPLE, mock_overrides(dump_dir, "max_steps=4"))
    with pytest.raises(ConfigError, match=r"rollout_mock.dump_dir: .* holds 3 step\(s\)"):
        recorded_for(cfg)
    cfg = load_config(EXAMPLE, mock_overrides(dump_dir.parent / "nothing", "max_steps=1"))
    with pytest.raises(ConfigError, match=r"holds 0 step\(s\)"):
        recorded_for(cfg)
