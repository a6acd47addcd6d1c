"""Invariants of the prefetch generator under randomised latencies (real Ray actors).

For a seeded sweep of ratios and latency mixes: every trained sample respects the
staleness bound, no sample is trained twice, every generated sample is trained or
accounted for with a reason, and shutdown leaves no thread or actor behind.
"""

from __future__ import annotations

import json
import math
import threading

import pytest
import ray._private.state as ray_state

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run

from .sim_config import sim_config

# ratio 2 with slow training (the most stale samples) runs in make test, and the two runs
# of test_ratio_one_overlaps_generation_with_training (ratios 0 and 1) are accounted the
# same way there; the rest of the sweep in make test-long (suite budget)
SWEEP = [  # (ratio, generation s/prompt, train s/step, jitter, seed)
    pytest.param(0.0, 0.004, 0.02, 0.9, 1, marks=pytest.mark.long),
    pytest.param(0.5, 0.002, 0.05, 0.9, 2, marks=pytest.mark.long),
    pytest.param(1.0, 0.008, 0.02, 0.9, 3, marks=pytest.mark.long),
    (2.0, 0.001, 0.06, 0.9, 4),
    pytest.param(2.0, 0.010, 0.01, 0.9, 5, marks=pytest.mark.long),
]


def ledger(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]


def metrics(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("ratio, gen_s, train_s, jitter, seed", SWEEP)
def test_staleness_bound_and_accounting(tmp_path, ray_session, tiny_model_path,
                                        ratio, gen_s, train_s, jitter, seed):
    cfg = load_config_dict(sim_config(tmp_path, ratio, gen_s=gen_s, train_s=train_s,
                                      jitter=jitter, seed=seed))
    assert_accounted(run(cfg), cfg)


def assert_accounted(run_dir, cfg) -> None:
    """Staleness within ceil(r), every group once in the ledger, one batch per step, the
    step metrics agreeing with the ledger, nothing left running."""
    ratio = cfg.async_generation_ratio
    rows = ledger(run_dir)
    bound = math.ceil(ratio)

    seqs = [r["seq"] for r in rows]
    assert len(seqs) == len(set(seqs)), "a group appears twice in the ledger"
    trained = [r for r in rows if r["fate"] == "trained"]
    assert {r["fate"] for r in rows} <= {"trained", "stale", "filtered", "aborted"}
    assert len(trained) == cfg.max_steps * cfg.rollout_batch_size
    for r in trained:
        assert 0 <= r["staleness"] <= bound, r
    # Every trained step holds exactly one batch, and the per-step metrics agree.
    by_step = {m["step"]: m for m in metrics(run_dir) if m["step"] > 0}  # 0: baseline eval
    for step in range(1, cfg.max_steps + 1):
        mine = [r for r in trained if r["step"] == step]
        assert len(mine) == cfg.rollout_batch_size
        assert by_step[step]["staleness/max"] == max(r["staleness"] for r in mine)
    dropped = sum(m["rollout/dropped_stale"] for m in by_step.values())
    assert dropped == sum(r["samples"] for r in rows if r["fate"] == "stale")
    if ratio == 0:
        assert all(r["staleness"] == 0 for r in trained)

    # Shutdown: no prefetch thread, no live actor of this run.
    assert not [t for t in threading.enumerate() if t.name == "prefetch"]
    alive = [a for a in ray_state.actors().values() if a["State"] == "ALIVE"]
    assert alive == [], alive


def test_ratio_one_overlaps_generation_with_training(tmp_path, ray_session, tiny_model_path):
    """With generation ~ training time, async steps wait far less for data than sync.

    The synchronous run also validates after its last step: the final validation and
    checkpoint wait for work in flight, and a batch that no step will train must not be
    part of it (with a real model and a judge: minutes)."""
    waits = {}
    for ratio in (0.0, 1.0):
        out = tmp_path / str(ratio)
        cfg = load_config_dict(sim_config(out, ratio, gen_s=0.02, train_s=0.16, max_steps=6,
                                          eval_steps=6 if ratio == 0 else 0))
        run_dir = run(cfg)
        assert_accounted(run_dir, cfg)
        rows = [r for r in metrics(run_dir) if r["step"] >= 3]  # skip start-up steps
        waits[ratio] = sum(r["time/wait_for_batch"] for r in rows) / len(rows)
    assert waits[0.0] > 0.1  # sync waits for a whole generation each step (~0.16 s)
    assert waits[1.0] < waits[0.0] / 3, waits
    generated = ledger(tmp_path / "0.0")  # no batch past the last was generated
    assert {r["fate"] for r in generated} == {"trained"} and len(generated) == 6 * 8
