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
