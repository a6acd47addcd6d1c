"""cpu_affinity pins the whole worker process, including threads started before it."""

from __future__ import annotations

import os
import threading

import pytest

from flywheel.workers.role_worker import pin_process, pin_thread


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_threads_started_earlier_are_pinned_too():
    everything = os.sched_getaffinity(0)
    started, stop = threading.Event(), threading.Event()
    tids = []

    def background():  # like Ray's I/O threads: running before the actor's constructor
        tids.append(threading.get_native_id())
        started.set()
        stop.wait()

    thread = threading.Thread(target=background)
    thread.start()
    started.wait()
    try:
        pin_process([min(everything)])
        assert os.sched_getaffinity(0) == {min(everything)}
        assert os.sched_getaffinity(tids[0]) == {min(everything)}
    finally:
        stop.set()
        thread.join()
        pin_process(sorted(everything))


def test_a_core_that_does_not_exist_names_the_key_and_the_cores_there_are():
    with pytest.raises(ValueError, match=r"prefetch_cpu_affinity=\[4096\]: cannot pin .*"
                                         r"this machine has cores 0\.\."):
        pin_thread([4096], key="prefetch_cpu_affinity")
