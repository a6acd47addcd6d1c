"""cpu_affinity and prefetch_cpu_affinity put every thread of the work where it was asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import load_records
from flywheel.pipelines.loop.step_loop import StepLoop
from flywheel.pipelines.rlvr.rollout import RLVRRollout
from flywheel.pipelines.roles.roles import start_roles
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.strategies.hf_model import load_tokenizer

from .sim_config import sim_config

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")


def thread_cores(pid: int) -> dict[int, str]:
    """tid -> Cpus_allowed_list of every thread of a process."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        out[int(tid)] = next(line.split(":")[1].strip() for line in status.splitlines()
                             if line.startswith("Cpus_allowed_list"))
    return out


def test_workers_and_prefetch_thread_are_pinned(tmp_path, ray_session, tiny_model_path):
    cfg = load_config_dict(sim_config(
        tmp_path, 1.0, prefetch_cpu_affinity=[0],
        rewards={"math_rule": {"reward_type": "math_rule", "cpu_affinity": [0]}}))
    cfg.actor_infer.cpu_affinity, cfg.actor_train.cpu_affinity = [0], [1]
    roles = start_roles(cfg, resolve_pretrain(cfg.pretrain), total_steps=4)
    try:
        for cluster, cores in ((roles.actor_infer, "0"), (roles.actor_train, "1"),
                               (roles.rewards["math_rule"], "0")):
            threads = thread_cores(cluster.call_all("pid")[0])
            assert len(threads) > 1  # Ray's own threads are there too, and pinned
            assert set(threads.values()) == {cores}, (cluster.role, threads)
        rollout = RLVRRollout(cfg, roles, load_tokenizer(tiny_model_path),
                              load_records(cfg.actor_train.data_args, "actor_train"), [])
        pipeline = StepLoop(cfg, roles, rollout, tracker=None, output_dir=Path(tmp_path))
        seen = []
        generator = pipeline.make_generator()
        generator.on_generated = lambda groups: seen.append(os.sched_getaffinity(0))
        generator.start()
        try:
            generator.take(0)
        finally:
            generator.stop()
        assert seen and all(cores == {0} for cores in seen)  # the generator thread's
        assert len(os.sched_getaffinity(0)) >= 2  # the trainer thread stays unpinned
    finally:
        roles.shutdown()
