"""Every run's metrics break the step into its phases (docs_site/metrics.yaml, time/):
on the shared colocated run, the train call's parts are there, fit inside time/train, and
scoring was timed. A batch may be scored inside the step before the one that trains it
(at ratio 0 the next batch starts once the weights are published, while the step goes on
to validate), so a step's time/score can be 0; some step's is not."""

from __future__ import annotations

import json

TRAIN_PARTS = ("time/actor_forward", "time/actor_backward", "time/actor_optimizer")


def test_train_call_parts_fit_inside_time_train_and_scoring_is_timed(small_sync_run):
    out, _ = small_sync_run
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in steps if "time/train" in m]
    assert len(trained) == 3
    for m in trained:
        parts = [m[k] for k in TRAIN_PARTS] + [m.get("time/actor_old_logprobs", 0.0)]
        assert all(p > 0 for p in parts[:3]), m
        assert sum(parts) <= m["time/train"], m
        assert 0 <= m["time/score"] <= m["time/step"], m
    assert any(m["time/score"] > 0 for m in trained), trained
