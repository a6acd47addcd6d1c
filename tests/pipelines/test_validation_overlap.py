"""Validation beside training (loop/overlapped_validation.py), on real Ray actors with the
latency-only backends, RLVR and agentic.

Under ratio 1 every validation request (an RLVR chunk; an agentic turn, which env
workers ask for one by one) runs on exactly version v's weights, a train step runs while
it does, and no training batch is generated meanwhile. The validation figures equal those
of a ratio 0 run at the same steps (sim_infer's responses are drawn from the weights it
holds), where validation stays inline.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import pytest

from flywheel.pipelines.agentic import env_jobs
from flywheel.pipelines.agentic import rollout as agentic_rollout
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.loop.step_loop import StepLoop
from flywheel.pipelines.roles.handles import InferRole
from flywheel.pipelines.run.launch import run
from flywheel.workers.infer_worker import GenerateResult

from .agentic_sim_config import agentic_sim_config
from .sim_config import sim_config

VAL = "validation-"  # the name of the thread an overlapped validation runs in


@dataclass
class Seen:
    """What the driver saw: generation calls (thread, version, start, end) and train calls."""

    generated: list[tuple[str, int, float, float]] = field(default_factory=list)
    trained: list[tuple[float, float]] = field(default_factory=list)

    def validation_windows(self) -> dict[int, tuple[float, float]]:
        """step -> (first start, last end) of its overlapped validation's requests."""
        windows: dict[int, tuple[float, float]] = {}
        for thread, _, t0, t1 in self.generated:
            if thread.startswith(VAL):
                step = int(thread[len(VAL):])
                a, b = windows.get(step, (t0, t1))
                windows[step] = (min(a, t0), max(b, t1))
        return windows


@pytest.fixture
def seen(monkeypatch) -> Seen:
    record = Seen()

    def note(version: int, busy: list[tuple[int, float, float]]) -> None:
        thread = threading.current_thread().name
        record.generated += [(thread, version, t0, t1) for _, t0, t1 in busy]

    get = InferRole.get  # RLVR: the driver takes every chunk's result through it

    def get_noted(self, ref, rank, timeout_s=None):
        result = get(self, ref, rank, timeout_s)
        if isinstance(result, GenerateResult):
            note(result.version, [(rank, result.started, result.finished)])
        return result

    groups = env_jobs.episode_groups  # agentic: every finished job, validation's too

    def groups_noted(job, result):
        for version, busy in zip(result.turn_versions, result.busy):
            note(version, [busy])
        return groups(job, result)

    update = StepLoop.update

    def update_noted(self, batch):
        t0 = time.time()
        out = update(self, batch)
        record.trained.append((t0, time.time()))
        return out

    monkeypatch.setattr(InferRole, "get", get_noted)
    monkeypatch.setattr(env_jobs, "episode_groups", groups_noted)
    monkeypatch.setattr(agentic_rollout, "episode_groups", groups_noted)
    monkeypatch.setattr(StepLoop, "update", update_noted)
    return record


def rows(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


# Generation fast, validation long (many prompts / episodes), training in between: the
# batch generated ahead is ready when validation starts, and a train step fits inside it.
# Steps 0 and 3 validate inline (the baseline, the last step), step 2 beside step 3.
RLVR = dict(gen_s=0.01, train_s=0.3, max_steps=3, eval_steps=2, val_batch_size=48)
AGENTIC = dict(gen_s=0.01, train_s=0.3, max_steps=3, eval_steps=2, val_batch_size=32,
               val_env_manager={"num_env_groups": 32, "group_size": 1})
# the ratio 0 run, for the figures, on RLVR only (each run costs seconds of start-up)
PIPELINES = {"rlvr": (sim_config, RLVR, "val/response_length"),
             "agentic": (agentic_sim_config, AGENTIC, None)}


# agentic under `long` (make test-long): the suite's agentic run at ratio 2
# (test_agentic_async.py) validates beside training too and checks its rows
@pytest.mark.parametrize("pipeline", ["rlvr", pytest.param("agentic", marks=pytest.mark.long)])
def test_validation_runs_beside_training_on_exactly_its_version(
        tmp_path, ray_session, tiny_model_path, seen, pipeline):
    make, knobs, val_key = PIPELINES[pipeline]
    knobs = dict(knobs)
    gen_s, train_s = knobs.pop("gen_s"), knobs.pop("train_s")
    async_dir = run(load_config_dict(make(tmp_path / "r1", 1.0, gen_s=gen_s, train_s=train_s,
                                          **knobs)))
    windows = seen.validation_windows()
    assert sorted(windows) == [2], windows  # the last step's validates inline
    for thread, version, _, _ in seen.generated:
        if thread.startswith(VAL):  # every request of validation v ran on version v
            assert version == int(thread[len(VAL):]), (thread, version)
    (v0, v1), = windows.values()
    assert any(t0 < v1 and t1 > v0 for t0, t1 in seen.trained), \
        "no train step ran while the validation did"
    training = [(a, b) for t, _, a, b in seen.generated if t == "prefetch"]
    assert training and not [g for g in training if g[0] < v1 and g[1] > v0], \
        "training generation ran during the validation"
    overlapped = rows(async_dir)
    assert [r["step"] for r in overlapped] == list(range(4))  # one row per step, in order
    assert "time/validate_overlapped" in overlapped[2] and "time/validate" not in overlapped[2]
    assert "time/validate" in overlapped[3] and "time/validate_overlapped" not in overlapped[3]
    if val_key is None:
        return
    inline = rows(run(load_config_dict(make(tmp_path / "r0", 0.0, gen_s=gen_s,
                                            train_s=train_s, **knobs))))
    assert "time/validate" in inline[2] and not any("time/validate_overlapped" in r
                                                    for r in inline)  # ratio 0: as before
    for step in (0, 2, 3):  # version v's figures, whichever way it was validated
        assert overlapped[step][val_key] == inline[step][val_key], step
