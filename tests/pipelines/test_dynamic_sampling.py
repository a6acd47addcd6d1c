"""Dynamic sampling (DAPO, arXiv 2503.14476 sec. 3.2): groups without a training signal
are dropped as they are scored and replaced by over-sampling, at any ratio, with the extra
generation capped. Real Ray actors throughout."""

from __future__ import annotations

import json
import threading

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run

from .sim_config import sim_config


def ledger(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]


def metrics(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run_or_stall(cfg, limit_s: float):
    """The run's directory, or a failure if it has not finished within limit_s (a stall)."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(dir=run(cfg)), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"the run made no progress for {limit_s:.0f}s (stalled)"
    return out["dir"]


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_uniform_groups_dropped_without_stalling(tmp_path, ray_session, tiny_model_path, ratio):
    # The latency-only backend answers random tokens: math_rule scores every sample 0, so
    # every group is uniform. Before the fix, at ratio 0 the first uniform group kept its
    # slot of the prefetch window until a take succeeded, which never happened.
    cfg = load_config_dict(sim_config(tmp_path, ratio, max_steps=2, eval_steps=0,
                                      drop_uniform_groups=True))
    run_dir = run_or_stall(cfg, limit_s=90)
    rows = ledger(run_dir)
    assert len({r["seq"] for r in rows}) == len(rows)
    trained = [r for r in rows if r["fate"] == "trained"]
    assert len(trained) == cfg.max_steps * cfg.rollout_batch_size
    assert any(r["fate"] == "filtered" for r in rows)
    steps = [m for m in metrics(run_dir) if m["step"] > 0]
    filtered_samples = sum(r["samples"] for r in rows if r["fate"] == "filtered")
    assert sum(m["rollout/dropped_filtered"] for m in steps) == filtered_samples
    # Nothing but uniform groups exist, so every batch was filled past the cap (default
    # 10 batches generated per trained batch): the extra generation stopped there.
    n = cfg.num_return_sequences_in_group
    for m in steps:
        assert m["rollout/filter_cap_kept"] > 0
        assert m["rollout/dropped_filtered"] <= 9 * cfg.rollout_batch_size * n
