"""The prefetch generator pauses cleanly for validation, and failures surface fast."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import load_records
from flywheel.pipelines.loop.step_loop import StepLoop
from flywheel.pipelines.rlvr.rollout import RLVRRollout
from flywheel.pipelines.roles.roles import start_roles
from flywheel.pipelines.run.launch import run
from flywheel.platform.cluster import WorkerError
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.strategies.hf_model import load_tokenizer

from .sim_config import sim_config


@pytest.fixture
def sim_pipeline(tmp_path, ray_session, tiny_model_path):
    """An RLVR pipeline on latency-only backends, its roles started, its loop not."""
    cfg = load_config_dict(sim_config(tmp_path, 2.0, gen_s=0.01, train_s=0.05))
    roles = start_roles(cfg, resolve_pretrain(cfg.pretrain), total_steps=10)
    rollout = RLVRRollout(
        cfg, roles, load_tokenizer(tiny_model_path),
        load_records(cfg.actor_train.data_args, "actor_train"),
        load_records(cfg.validation.data_args, "validation"))
    pipeline = StepLoop(cfg, roles, rollout, tracker=None, output_dir=Path(tmp_path))
    yield pipeline
    roles.shutdown()


def test_validation_pause_excludes_prefetch_and_loses_nothing(sim_pipeline):
    generated = []
    gen = sim_pipeline.make_generator()
    gen.on_generated = generated.extend
    gen.start()
    try:
        first = gen.take(0)
        with gen.paused():
            queued = gen.queue_depth()
            t0 = time.time()
            val = sim_pipeline.rollout.validate()
            time.sleep(0.3)  # generation would have produced more chunks by now
            t1 = time.time()
            assert gen.queue_depth() == queued  # nothing new arrived while paused
        gen.release(len(first.groups))
        deadline = time.time() + 10
        while not any(b[1] >= t1 for b in gen.busy) and time.time() < deadline:
            time.sleep(0.05)
    finally:
        gen.stop()
    assert 0.0 <= val["val/accuracy"] <= 1.0
    overlapping = [b for b in gen.busy if b[1] < t1 and b[2] > t0]
    assert overlapping == [], "prefetch generation ran during validation"
    assert any(b[1] >= t1 for b in gen.busy), "generation did not resume after the pause"
    seqs = sorted(g.seq for g in generated)
    assert seqs == list(range(len(seqs))), "a prompt was skipped or generated twice"


def test_dead_reward_worker_is_reported_within_seconds(sim_pipeline):
    gen = sim_pipeline.make_generator()
    gen.start()
    try:
        gen.take(0)
        ray.kill(sim_pipeline.roles.rewards["math_rule"].actors[0], no_restart=True)
        gen.release(sim_pipeline.cfg.rollout_batch_size)
        start = time.monotonic()
        with pytest.raises(WorkerError, match=r"rewards\.math_rule rank 0: worker process died"):
            for step in range(1, 50):
                gen.take(step)
                gen.release(sim_pipeline.cfg.rollout_batch_size)
        assert time.monotonic() - start < 10
    finally:
        gen.stop()


@pytest.mark.parametrize("role, strategy_key", [("actor_infer", "generate"),
                                                ("actor_train", "train_step")])
def test_backend_exception_names_the_role(tmp_path, ray_session, tiny_model_path, role,
                                          strategy_key):
    raw = sim_config(tmp_path, 1.0)
    raw[role]["strategy_args"]["strategy_config"]["fail_at_call"] = 3
    start = time.monotonic()
    # the step it happened in is named too ("step N: "), since errors carry their step
    with pytest.raises(WorkerError, match=rf"{role} rank 0: (step \d+: )?SimulatedFailure: "
                                          rf"injected failure in {strategy_key}"):
        run(load_config_dict(raw))
    assert time.monotonic() - start < 60  # start-up included; no hang
    alive = [a for a in ray._private.state.actors().values() if a["State"] == "ALIVE"]
    assert alive == []
