"""Workers that die or hang in the middle of a run (issue 14): the run stops with an error
naming the role and rank, within the configured time, never a hang.

A worker's own process is killed from outside (SIGKILL, as the OOM killer would; its pid
from the worker's `pid()`), while the pipeline's loop runs on the latency-only backends;
a hang is a worker process stopped with SIGSTOP (it neither answers nor makes progress),
reported once its role's `timeouts:` limit has passed without progress.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import ray

from flywheel.pipelines.agentic.env_jobs import start_env_workers
from flywheel.pipelines.agentic.rollout import AgenticRollout
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import load_records
from flywheel.pipelines.loop.step_loop import StepLoop
from flywheel.pipelines.rlvr.rollout import RLVRRollout
from flywheel.pipelines.roles.roles import start_roles
from flywheel.platform.cluster import Cluster, WorkerError
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.tracking import Tracker
from flywheel.workers.strategies.hf_model import load_tokenizer

from .agentic_sim_config import agentic_sim_config
from .sim_config import sim_config

LIMIT_S = 8.0  # every timeouts: limit of these runs
TIMEOUTS = {"call_s": LIMIT_S, "generate_s": LIMIT_S, "score_s": LIMIT_S}


def start_pipeline(tmp_path: Path, agentic: bool) -> StepLoop:
    """A pipeline of 40 short steps on the sim backends, its roles started, its loop not."""
    make = agentic_sim_config if agentic else sim_config
    cfg = load_config_dict(make(tmp_path, 1.0, max_steps=40, eval_steps=0, save_steps=0,
                                timeouts=TIMEOUTS))
    model = resolve_pretrain(cfg.pretrain)
    roles = start_roles(cfg, model, total_steps=cfg.max_steps)
    tracker = Tracker.open(tmp_path, cfg, "faults", params={}, mlflow_uri="")
    tokenizer = load_tokenizer(model)
    if agentic:
        env_workers = start_env_workers(cfg, model, roles.actor_infer)
        roles.all.append(env_workers)  # shut down with the roles
        rollout = AgenticRollout(cfg, roles, tokenizer, env_workers)
    else:
        rollout = RLVRRollout(cfg, roles, tokenizer,
                              load_records(cfg.actor_train.data_args, "actor_train"), [])
    return StepLoop(cfg, roles, rollout, tracker=tracker, output_dir=tmp_path)


def cluster_of(pipeline: StepLoop, role: str) -> Cluster:
    roles = pipeline.roles
    if role.startswith("rewards."):
        return roles.rewards[role.removeprefix("rewards.")]
    return next(c for c in roles.all if c.role == role)


def fault_after_step_1(pipeline: StepLoop, role: str, sig: int, sent: list[float]) -> None:
    """Run the loop; once step 1 is done, send `sig` to `role` rank 0's process (when:
    appended to `sent`)."""
    pid = ray.get(cluster_of(pipeline, role).actors[0].pid.remote())

    def inject() -> None:
        while pipeline.step < 1:
            time.sleep(0.01)
        os.kill(pid, sig)
        sent.append(time.monotonic())

    injector = threading.Thread(target=inject, daemon=True)
    injector.start()
    try:
        pipeline.run()
    finally:
        injector.join(timeout=5)
        if sig == signal.SIGSTOP:  # let the stopped process go (it is shut down next)
            os.kill(pid, signal.SIGKILL)
        pipeline.roles.shutdown()
        pipeline.tracker.close("FAILED")


@pytest.mark.timeout(180)
# one role handle and the env workers in make test; the other role handles take the same
# path (roles/handles.py) and run in make test-long (suite budget)
@pytest.mark.parametrize("role, agentic", [
    ("actor_train", False), pytest.param("actor_infer", False, marks=pytest.mark.long),
    pytest.param("rewards.math_rule", False, marks=pytest.mark.long), ("env_workers", True)])
def test_sigkill_of_a_worker_is_reported_with_its_role(tmp_path, ray_session,
                                                       tiny_model_path, role, agentic):
    pipeline = start_pipeline(tmp_path, agentic)
    sent: list[float] = []
    # an env worker's error also names the job it was running: which groups, which envs
    job = (r".*\(while running FrozenLake env groups \d+\.\.\d+ of batch \d+ "
           r"\(env ids \d+\.\.\d+" if agentic else "")
    with pytest.raises(WorkerError,
                       match=rf"^{role} rank 0: step \d+: worker process died{job}"):
        fault_after_step_1(pipeline, role, signal.SIGKILL, sent)
    seconds = time.monotonic() - sent[0]
    print(f"{role}: SIGKILL after step 1, error after {seconds:.2f}s at step {pipeline.step}")
    assert seconds < LIMIT_S  # a dead worker is reported at once, not after a limit


@pytest.mark.timeout(180)
def test_a_reward_that_never_returns_is_reported_within_score_s(tmp_path, ray_session,
                                                               tiny_model_path):
    pipeline = start_pipeline(tmp_path, agentic=False)
    sent: list[float] = []
    with pytest.raises(WorkerError, match=rf"^rewards\.math_rule rank 0: step \d+: scoring "
                                          rf"made no progress for {LIMIT_S:g}s"):
        fault_after_step_1(pipeline, "rewards.math_rule", signal.SIGSTOP, sent)
    seconds = time.monotonic() - sent[0]
    print(f"rewards.math_rule: SIGSTOP after step 1, error after {seconds:.2f}s")
    # the limit, plus the last scoring request's wait for a worker that stopped meanwhile
    assert LIMIT_S <= seconds < 2 * LIMIT_S + 5, seconds
