"""Colocated (hybrid) mode: actor_train and actor_infer on the same device take turns, in
verl's order, around every generation, weight sync, validation and checkpoint
(pipelines/loop/phase_switch.py). On CPU nothing is freed; the order is what is checked, from
the events every worker records (workers/role_worker.py) and the run writes out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.loop.phase_switch import PhaseSwitch
from flywheel.pipelines.loop.step_loop import PHASE_EVENTS
from flywheel.pipelines.run.launch import run

EXAMPLE = Path(__file__).parents[2] / "examples" / "rlvr_sync.yaml"  # both roles on [0]
ORDERED = {"sleep", "wake", "offload_optimizer", "offload_model", "onload", "train_step",
           "weights", "update_weights", "generate", "save"}
STEP = ["generate", "sleep", "onload", "train_step", "weights", "offload_optimizer", "wake",
        "update_weights", "offload_model"]


def small_run(out: Path, *extra: str) -> Path:
    overrides = [f"output_dir={out}", "max_steps=3", "eval_steps=2", "val_batch_size=8",
                 "rollout_batch_size=4", "num_return_sequences_in_group=2",
                 "actor_train.training_args.per_device_train_batch_size=8",
                 "tracking.mlflow=false", "save_steps=0", *extra]
    return run(load_config(EXAMPLE, overrides))


def collapsed(events: list[str]) -> list[str]:
    """Runs of generate calls as one (how many chunks a batch takes is not the point)."""
    return [e for i, e in enumerate(events) if not (e == "generate" and i and
                                                    events[i - 1] == "generate")]


@pytest.mark.slow
def test_colocated_run_switches_phases_in_order(small_sync_run):
    out, printed = small_sync_run
    assert "phase switch (offload_between_phases): on" in printed
    rows = [json.loads(x) for x in (out / PHASE_EVENTS).read_text().splitlines()]
    events = collapsed([r[2] for r in rows if r[2] in ORDERED])
    expected = (["weights", "update_weights", "generate",  # first sync, step-0 validation
                 "offload_optimizer", "offload_model"]  # into the generation phase
                + STEP + STEP + ["generate"]  # steps 1, 2 (+ its validation, batch 3)
                + STEP[1:] + ["generate"]  # step 3, then its validation
                + ["sleep", "onload", "save", "offload_optimizer", "wake", "offload_model"])
    assert events == expected
    notes = {r[2]: r[4] for r in rows if r[2] in ("sleep", "offload_model")}
    assert "no-op on cpu" in notes["sleep"] and "no-op on cpu" in notes["offload_model"]
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    switch = [m["time/phase_switch"] for m in metrics if m["step"] > 0]
    assert len(switch) == 3 and all(0 < s < 5 for s in switch)


@pytest.mark.long  # the unit test below covers "inactive"; this run is for make test-long
def test_disjoint_devices_do_not_switch(tmp_path, ray_session, arith_model_path, capsys):
    out = small_run(tmp_path / "apart", "max_steps=1", "eval_steps=0", "validation=null",
                    "actor_infer.device_mapping=[1]")
    assert ("phase switch (offload_between_phases): off: actor_train and actor_infer share "
            "no device" in capsys.readouterr().out)
    assert not (out / PHASE_EVENTS).exists()
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert not any("time/phase_switch" in m for m in metrics)


class FakeRole:
    """Records what the switch asks of a role, in one shared log."""

    def __init__(self, name: str, log: list[str]):
        self.name, self.log = name, log

    def __getattr__(self, call: str):
        return lambda *args: self.log.append(" ".join([self.name, call, *args]))


def test_switch_orders_calls_and_does_nothing_when_inactive():
    log: list[str] = []
    switch = PhaseSwitch(FakeRole("train", log), FakeRole("infer", log), active=True)
    switch.to_training()
    switch.before_sync()
    switch.after_sync()
    assert log == ["infer sleep", "train onload", "train offload optimizer", "infer wake",
                   "train offload model"]
    assert switch.take_seconds() >= 0 and switch.seconds == 0
    log.clear()
    off = PhaseSwitch(FakeRole("train", log), FakeRole("infer", log), active=False)
    off.start_generation()
    off.to_training()
    with off.training():
        pass
    assert log == []
