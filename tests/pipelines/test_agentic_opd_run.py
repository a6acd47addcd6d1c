"""On-policy distillation over agentic episodes through real Ray actors (make test-long):
the shipped FrozenLake example, shrunk, with a teacher (the warm-started model the student
starts from) on a device slot of its own. Two steps: each logs the teachers' signal over
every episode, and the teacher ran as a worker of its own."""

from __future__ import annotations

import json

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

from .test_agentic_e2e import EXAMPLE, SHRUNK


@pytest.mark.long
def test_agentic_opd_scores_every_episode_with_the_teacher(tmp_path, ray_session):
    out = tmp_path / "run"
    run(load_config(EXAMPLE, [
        f"output_dir={out}", *SHRUNK, "eval_steps=0", "validation=null", "save_steps=0",
        "teacher.lake.model_args.model_name_or_path=builtin://tiny-qwen2-frozenlake",
        "teacher.lake.device_mapping=[1]"]))
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "distill/reverse_kl/lake" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["distill/rows/lake"] == 1.0 for r in steps)
    # the teacher is the student's starting weights: at step 1 the log-ratio is only the
    # sampler/trainer mismatch, near 0 beside a random teacher's (several nats)
    assert abs(steps[0]["distill/reverse_kl"]) < 0.05, steps[0]
    assert (out / "logs" / "teacher.lake-0.log").exists()
