"""Resume after a mid-batch pause: every prompt group trained exactly once, none lost.

With `infer_batch_size: 1` a batch is cut into many chunks per infer worker, so the save
at the end of a stopped run pauses the generator part-way through a batch: some of its
chunks are finished (in the checkpoint's buffer), the rest never started. The resumed run
must generate only those, and its ledger must say each group was trained once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run

from .agentic_sim_config import agentic_sim_config
from .sim_config import sim_config

BATCH = 8
NOT_COMPARABLE = ("time/", "throughput/", "idle/", "rollout/queue_depth")


def sim_run(out: Path, ratio: float, max_steps: int, **top) -> Path:
    cfg = sim_config(out, ratio, gen_s=0.01, train_s=0.05, max_steps=max_steps,
                     eval_steps=0, **{"save_steps": 0, **top})
    cfg["actor_infer"]["infer_batch_size"] = 1  # 8 chunks per batch for one infer worker
    # a decaying schedule: sim_train reports its actor/lr, whose horizon resume must keep
    cfg["actor_train"]["training_args"]["lr_scheduler_type"] = "cosine"
    return run(load_config_dict(cfg))


def ledger(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def metrics(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(NOT_COMPARABLE)}
            for r in rows}


def assert_each_group_trained_once(run_dir: Path, steps: int) -> None:
    rows = ledger(run_dir)
    seqs = [r["seq"] for r in rows]
    twice = sorted({s for s in seqs if seqs.count(s) > 1})
    assert not twice, f"groups recorded more than once: {twice}"
    trained = sorted(r["seq"] for r in rows if r["fate"] == "trained")
    assert trained[: steps * BATCH] == list(range(steps * BATCH))
    assert len(trained) == steps * BATCH
    assert all(r["fate"] != "aborted" or r["seq"] >= steps * BATCH for r in rows)


@pytest.mark.timeout(240)
def test_sync_resume_mid_batch_restores_version_and_equals_the_whole_run(
        tmp_path, ray_session, tiny_model_path):
    """Checkpointed after step 3 with model_update_frequency 2 (so actor_infer holds
    version 2, not 3) part-way through batch 4, then resumed in place from that checkpoint
    (as after a kill): the same numbers as the uninterrupted run, every group trained once.
    The checkpoint is a mid-run one: at the end of a run no batch past the last is started,
    so a final checkpoint is never part-way through one. The run that wrote it went on to
    step 5 uninterrupted, so its own metrics are the whole run's. The resumed run stops
    earlier (max_steps 4 of 5) on the same cosine learning-rate curve: the horizon is the
    run's."""
    out = tmp_path / "run"
    sim_run(out, 0.0, max_steps=5, model_update_frequency=2, save_steps=3)
    whole = metrics(out)  # resuming in place cuts metrics.jsonl back to the checkpoint
    assert sorted(whole) == [1, 2, 3, 4, 5]
    state = json.loads((out / "checkpoint-3" / "pipeline_state.json").read_text())
    assert (state["step"], state["version"]) == (3, 2)
    # actor_infer's weights (step 2's) are kept: sim_infer's responses depend on them
    assert (out / "checkpoint-3" / "actor_infer_weights" / "weights.pt").exists()
    assert state["next_seq"] >= 3 * BATCH  # usually part-way into batch 4 (its first chunks)
    sim_run(out, 0.0, max_steps=4, model_update_frequency=2,
            resume_from_checkpoint=str(out / "checkpoint-3"))
    assert sorted(metrics(out)) == [1, 2, 3, 4]  # one row per step, none repeated
    assert metrics(out) == {s: m for s, m in whole.items() if s <= 4}
    assert metrics(out)[4]["actor/lr"] < metrics(out)[3]["actor/lr"]  # it decays
    assert_each_group_trained_once(out, 4)


@pytest.mark.long  # two agentic runs: with the RLVR resumes the suite's budget is spent
@pytest.mark.timeout(240)
def test_agentic_resume_trains_every_env_group_once(tmp_path, ray_session, tiny_model_path):
    """The same for env groups (2 a step, 1 per env job): ratio 1, stopped after step 2
    with later groups part-played, resumed in place (`true`) to step 4."""
    out = tmp_path / "run"
    for steps, resume in ((2, None), (4, True)):
        run(load_config_dict(agentic_sim_config(out, 1.0, max_steps=steps, eval_steps=0,
                                                resume_from_checkpoint=resume)))
    rows = ledger(out)
    seqs = [r["seq"] for r in rows]
    assert len(seqs) == len(set(seqs)), f"groups recorded twice: {rows}"
    assert sorted(r["seq"] for r in rows if r["fate"] == "trained") == list(range(8))
    assert sorted(metrics(out)) == [1, 2, 3, 4]


# No batch past the last is generated: tests/pipelines/test_async_invariants.py's
# test_ratio_one_overlaps_generation_with_training (its synchronous run validates last).
