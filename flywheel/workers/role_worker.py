"""What every role worker does on start: threads, seeds, a readiness probe, and the
progress report the driver's liveness checks read (platform/liveness.py).

Ray starts actors with OMP_NUM_THREADS=1 unless told otherwise; a worker sets torch's
intra-op threads explicitly from its config so that a synchronous run can use every core
while an asynchronous one splits them, and can pin itself to given cores (fair
benchmarks: generation on one core, training on another, in every mode).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import deque

import ray

from flywheel.platform.backend_logs import redirect_output_to_log
from flywheel.platform.liveness import PROGRESS_GROUP, snapshot
from flywheel.platform.startup_heap import freeze_startup_heap


def pin_process(cpus: list[int]) -> None:
    """Pin every thread of this process, not just the caller.

    On Linux sched_setaffinity(0) moves only the calling thread; the threads Ray started
    before the actor's constructor ran (task receipt, result transfer, gRPC) would keep
    floating and run on the other role's cores, which is what pinning is meant to stop.
    Threads created later inherit their creator's mask.
    """
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # the thread exited meanwhile
            pin_thread(cpus, int(tid))


def pin_thread(cpus: list[int], tid: int = 0, key: str = "cpu_affinity") -> None:
    """Pin one thread (0: the caller) to `cpus`, or say which config key asked for which
    cores, and which cores exist."""
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError as e:
        raise ValueError(f"{key}={cpus}: cannot pin ({e.strerror}); this machine has "
                         f"cores 0..{(os.cpu_count() or 1) - 1}") from None


PHASE_EVENTS_KEPT = 1000


class RoleWorker:
    def __init__(self, role: str, rank: int, world_size: int, num_threads: int | None = None,
                 cpu_affinity: list[int] | None = None, log_path: str | None = None):
        redirect_output_to_log(log_path)  # before the backend's first line (backend_logs.py)
        self.role = role
        self.rank = rank
        self.world_size = world_size
        if cpu_affinity:
            pin_process(cpu_affinity)
        threads = num_threads or len(os.sched_getaffinity(0))
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by torch when it is imported
        if "torch" in sys.modules:  # a rule reward's worker never imports it (~3 s of CPU)
            sys.modules["torch"].set_num_threads(threads)
        # (event, time.monotonic(), note): the phase switch and the calls it must order
        # (pipelines/loop/phase_switch.py), newest last; bounded, it is for inspection.
        self.events: deque[tuple[str, float, str]] = deque(maxlen=PHASE_EVENTS_KEPT)

    def record(self, event: str, note: str = "") -> None:
        self.events.append((event, time.monotonic(), note))

    def phase_events(self) -> list[tuple[str, float, str]]:
        """What `record` kept: a colocated run's phase switches in the order they ran."""
        return list(self.events)

    def ready(self) -> str:
        return f"{self.role}:{self.rank}"

    def freeze_startup_heap(self) -> int:
        """Once the model is loaded: keep start-up's objects out of later full garbage
        collections (platform/startup_heap.py); the objects frozen."""
        return freeze_startup_heap()

    def node_id(self) -> str:
        """The Ray node this worker runs on (shared memory needs one: pipelines/roles/roles.py)."""
        return ray.get_runtime_context().get_node_id()

    def accelerator(self) -> str:
        """"cuda" when this worker sees a GPU, else "cpu" (the weight-sync carrier is
        chosen from it: pipelines/roles/roles.py)."""
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @ray.method(concurrency_group=PROGRESS_GROUP)
    def progress(self) -> tuple[int, str]:
        """(progress counter, what it is doing): answered while a call is busy (its own
        concurrency group), so the driver tells a long call from a stalled one."""
        return snapshot()

    def pid(self) -> int:
        """This worker's process id, to inspect it from outside (threads, affinity)."""
        return os.getpid()
