"""The prefetch generator pauses cleanly for validation, its work runs on the cores it was
given, and failures surface fast."""

from __future__ import annotations

import os
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


def thread_cores(pid: int) -> dict[int, str]:
    """tid -> Cpus_allowed_list of every thread of a process (a thread that ends while
    they are read is left out)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue
        out[int(tid)] = next(line.split(":")[1].strip() for line in status.splitlines()
                             if line.startswith("Cpus_allowed_list"))
    return out


TWO_CORES = len(os.sched_getaffinity(0)) >= 2


@pytest.fixture(scope="class")  # stops when TestOneSetOfRoles ends
def sim_roles(tmp_path_factory, ray_session, tiny_model_path):
    """Latency-only backends, pinned where there are two cores: inference and the
    reward on core 0, training on core 1, the prefetch thread on core 0."""
    pinned = {"prefetch_cpu_affinity": [0],
              "rewards": {"math_rule": {"reward_type": "math_rule", "cpu_affinity": [0]}}
              } if TWO_CORES else {}
    cfg = load_config_dict(sim_config(tmp_path_factory.mktemp("sim"), 2.0, gen_s=0.01,
                                      train_s=0.05, **pinned))
    if TWO_CORES:
        cfg.actor_infer.cpu_affinity, cfg.actor_train.cpu_affinity = [0], [1]
    roles = start_roles(cfg, resolve_pretrain(cfg.pretrain), total_steps=10)
    yield cfg, roles
    roles.shutdown()


@pytest.fixture
def sim_pipeline(sim_roles, tmp_path, tiny_model_path):
    """A fresh rollout and loop (sequence numbers from 0) on the shared roles."""
    cfg, roles = sim_roles
    rollout = RLVRRollout(
        cfg, roles, load_tokenizer(tiny_model_path),
        load_records(cfg.actor_train.data_args, "actor_train"),
        load_records(cfg.validation.data_args, "validation"))
    return StepLoop(cfg, roles, rollout, tracker=None, output_dir=Path(tmp_path))


class TestOneSetOfRoles:
    """Three tests on one start of the roles (a start is most of each test's time): the
    validation pause, CPU pinning, and last, since it kills a worker, a dead reward worker.
    The roles stop when the class ends, before the tests below check that no actor is left."""

    def test_validation_pause_excludes_prefetch_and_loses_nothing(self, sim_pipeline):
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

    @pytest.mark.skipif(not TWO_CORES, reason="needs two cores")
    def test_workers_and_prefetch_thread_are_pinned(self, sim_pipeline):
        """cpu_affinity and prefetch_cpu_affinity put every thread of the work where it
        was asked."""
        roles = sim_pipeline.roles
        for cluster, cores in ((roles.actor_infer, "0"), (roles.actor_train, "1"),
                               (roles.rewards["math_rule"], "0")):
            threads = thread_cores(cluster.call_all("pid")[0])
            assert len(threads) > 1  # Ray's own threads are there too, and pinned
            assert set(threads.values()) == {cores}, (cluster.role, threads)
        seen = []
        generator = sim_pipeline.make_generator()
        generator.on_generated = lambda groups: seen.append(os.sched_getaffinity(0))
        generator.start()
        try:
            generator.take(0)
        finally:
            generator.stop()
        assert seen and all(cores == {0} for cores in seen)  # the generator thread's
        assert len(os.sched_getaffinity(0)) >= 2  # the trainer thread stays unpinned

    @pytest.mark.skipif(not TWO_CORES, reason="needs two cores")
    def test_a_split_that_idles_a_role_is_named_once(self, sim_pipeline, capsys):
        """The loop's layout hint (loop/layout_hint.py) at step 4, not again."""
        for step in range(1, 7):
            sim_pipeline.step = step
            sim_pipeline.hint_layout({"idle/actor_train": 0.1, "idle/actor_infer": 0.8})
        printed = capsys.readouterr().out
        assert printed.count("layout: actor_infer (cores [0]) idled 80% of steps 2-4") == 1

    def test_dead_reward_worker_is_reported_within_seconds(self, sim_pipeline):
        gen = sim_pipeline.make_generator()
        gen.start()
        try:
            gen.take(0)
            ray.kill(sim_pipeline.roles.rewards["math_rule"].actors[0], no_restart=True)
            gen.release(sim_pipeline.cfg.rollout_batch_size)
            start = time.monotonic()
            with pytest.raises(WorkerError,
                               match=r"rewards\.math_rule rank 0: worker process died"):
                for step in range(1, 50):
                    gen.take(step)
                    gen.release(sim_pipeline.cfg.rollout_batch_size)
            assert time.monotonic() - start < 10
        finally:
            gen.stop()


# actor_train's train_step raising is tests/pipelines/test_divergence_stops_run.py (the
# same path: an exception in a backend call surfaces as the role's WorkerError)
@pytest.mark.parametrize("role, strategy_key", [("actor_infer", "generate")])
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
