"""Start-up's objects leave full collections once start-up is over (platform/startup_heap.py),
in the driver and in every role's workers."""

from __future__ import annotations

import gc

import pytest

from flywheel.pipelines.roles.roles import Roles
from flywheel.platform.startup_heap import freeze_startup_heap


@pytest.fixture
def unfrozen():
    yield
    gc.unfreeze()  # the rest of the session's objects collect as before


def test_objects_alive_at_the_freeze_are_not_walked_by_later_collections(unfrozen):
    startup = [[i] for i in range(50_000)]  # stands for the modules and the model
    frozen = freeze_startup_heap()
    later = [[j] for j in range(10)]
    walked = {id(o) for o in gc.get_objects()}  # what a collection of every generation walks
    assert frozen >= len(startup)
    assert not any(id(o) in walked for o in startup)
    assert all(id(o) in walked for o in later)


class Workers:
    """One role's cluster, seen from Roles: submit_all and gather (platform/cluster.py)."""

    def __init__(self):
        self.asked: list[str] = []

    def submit_all(self, method: str) -> list[str]:
        self.asked.append(method)
        return [method]

    def gather(self, refs: list[str]) -> list[str]:
        return refs


def test_the_driver_and_every_cluster_freeze(unfrozen):
    clusters = [Workers(), Workers(), Workers()]  # e.g. actor_train, actor_infer, env workers
    roles = Roles(None, None, None, None, {}, None, all=clusters)
    before = gc.get_freeze_count()
    roles.freeze_startup_heaps()
    assert [c.asked for c in clusters] == [["freeze_startup_heap"]] * 3
    assert gc.get_freeze_count() > before
