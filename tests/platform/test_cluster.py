"""Cluster fan-out and failure reporting through real Ray actors."""

from __future__ import annotations

import os
import sys
import time

import pytest
from ray import cloudpickle

from flywheel.platform.cluster import Cluster, WorkerError
from flywheel.platform.resources import RoleDevices, place_devices


class EchoWorker:
    """A minimal worker: the unit under test is the Cluster, not a model."""

    def __init__(self, role: str, rank: int, world_size: int, fail_on_init: bool = False):
        if fail_on_init and rank == 1:
            raise RuntimeError("bad init")
        self.rank = rank

    def ready(self) -> str:
        return "ok"

    def whoami(self, x: int) -> tuple[int, int]:
        return self.rank, x

    def boom(self) -> None:
        if self.rank == 1:
            raise ValueError("kaput")

    def die(self) -> None:
        os._exit(1)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# Ray workers cannot import test modules; ship this module's classes by value instead.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def placement(ray_session):
    devices = RoleDevices("actor_train", (0, 1))
    placement = place_devices([devices])
    yield devices, placement
    placement.release()


def test_call_all_and_scatter_follow_rank_order(placement):
    devices, pg = placement
    cluster = Cluster.create("actor_train", EchoWorker, devices, pg, init_kwargs={})
    try:
        assert cluster.world_size == 2
        assert cluster.call_all("whoami", 5) == [(0, 5), (1, 5)]
        assert cluster.scatter("whoami", [10, 11]) == [(0, 10), (1, 11)]
        with pytest.raises(ValueError, match="3 shards for 2 workers"):
            cluster.scatter("whoami", [1, 2, 3])
    finally:
        cluster.shutdown()


def test_exception_in_worker_names_role_and_rank(placement):
    devices, pg = placement
    cluster = Cluster.create("actor_train", EchoWorker, devices, pg, init_kwargs={})
    try:
        with pytest.raises(WorkerError, match=r"actor_train rank 1: ValueError: kaput"):
            cluster.call_all("boom")
    finally:
        cluster.shutdown()


def test_dead_worker_is_reported_not_hung(placement):
    devices, pg = placement
    cluster = Cluster.create("actor_infer", EchoWorker, devices, pg, init_kwargs={})
    start = time.monotonic()
    try:
        with pytest.raises(WorkerError, match=r"actor_infer rank 0: worker process died"):
            cluster.gather([cluster.submit_one(0, "die")])
        assert time.monotonic() - start < 30
    finally:
        cluster.shutdown()


def test_stalled_worker_times_out_with_its_role(placement):
    devices, pg = placement
    cluster = Cluster.create("reference", EchoWorker, devices, pg, init_kwargs={})
    try:
        with pytest.raises(WorkerError, match=r"reference rank 0: no progress for 1s"):
            cluster.gather([cluster.submit_one(0, "sleep", 5.0)], timeout_s=1.0)
    finally:
        cluster.shutdown()


def test_constructor_failure_surfaces_at_create(placement):
    devices, pg = placement
    with pytest.raises(WorkerError, match=r"actor_train rank 1: .*bad init"):
        Cluster.create("actor_train", EchoWorker, devices, pg,
                       init_kwargs={"fail_on_init": True})


def test_device_beyond_cluster_is_a_clear_error(ray_session):
    with pytest.raises(RuntimeError, match="names device 9 but the Ray cluster has 4"):
        place_devices([RoleDevices("actor_train", (9,))])
