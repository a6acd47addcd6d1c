"""Liveness: a call is reported when its worker stops making progress, not when it is long."""

from __future__ import annotations

import sys
import time

import pytest
from ray import cloudpickle

from flywheel.platform.cluster import Cluster, WorkerError
from flywheel.platform.liveness import doing, tick
from flywheel.platform.resources import RoleDevices
from flywheel.workers.role_worker import RoleWorker


class PacedWorker(RoleWorker):
    def work(self, seconds: float, progressing: bool) -> str:
        with doing("work"):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(0.05)
                if progressing:
                    tick()
        return "done"


# Ray workers cannot import test modules; ship this module's classes by value instead.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def paced(ray_session):
    cluster = Cluster.create("paced", PacedWorker, RoleDevices("paced", (0,)), None,
                             init_kwargs={}, timeout_s=1.0)
    yield cluster
    cluster.shutdown()


def test_slow_but_progressing_call_is_waited_for(paced):
    start = time.monotonic()
    assert paced.get(paced.submit_one(0, "work", 3.0, True), 0) == "done"  # 3x the limit
    assert time.monotonic() - start >= 3.0


def test_call_without_progress_is_reported_with_role_rank_and_work(paced):
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"paced rank 0: no progress for 1s "
                                          r"\(stalled while work\)"):
        paced.get(paced.submit_one(0, "work", 30.0, False), 0)
    assert time.monotonic() - start < 5
