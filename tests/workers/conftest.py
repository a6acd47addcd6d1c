"""Fixtures for the backend tests (helpers live in backend_cases.py)."""

from __future__ import annotations

import pytest
from backend_cases import make_rl_batch, start_train_cluster


@pytest.fixture(scope="session")
def rl_batch(tiny_model_path):
    return make_rl_batch(tiny_model_path)


@pytest.fixture
def train_cluster(ray_session):
    """Starts training clusters (see `start_train_cluster`); shuts them down afterwards."""
    started = []

    def start(*args, **kwargs):
        started.append(start_train_cluster(*args, **kwargs))
        return started[-1]

    yield start
    for cluster in started:
        cluster.shutdown()


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """A vllm strategy on the tiny model, one per test module (start ~3-9 s on CPU)."""
    import torch

    from flywheel.config.schema import WorkerConfig
    from flywheel.workers.strategies.vllm_infer import VLLMInferStrategy

    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it process-wide
    strategy = VLLMInferStrategy(tiny_model_path, WorkerConfig(), seed=0)
    yield strategy
    torch.set_num_threads = set_num_threads


@pytest.fixture(scope="session")
def one_rank_group():
    """The environment of a torch.distributed group of one gloo rank for an in-process
    deepspeed_train (what TrainWorker.init_process_group sets up; the strategy joins it).
    One per session: DeepSpeed keeps its communication backend for the process, and a
    second group after the first is destroyed fails ("Group ... is not registered")."""
    import os
    import socket

    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    saved = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK",
                                            "WORLD_SIZE", "LOCAL_RANK")}
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
