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
