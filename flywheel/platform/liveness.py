"""Liveness: a worker process's progress counter, and how the driver reads it.

A role is declared stalled when it makes no progress for a configured time (`timeouts:`),
not when a call takes long: a train step of an hour that keeps ticking is fine, a generate
that stopped ticking for `timeouts.generate_s` is not. Code inside a worker calls `tick()`
whenever it gets somewhere (a micro-batch, a scored sample, an env turn, a slice of a
latency backend's wait) and `doing(what)` around a call; the worker's `progress()` method
(RoleWorker, run in a concurrency group of its own so it answers while a call is busy)
returns `snapshot()`. The driver (`Cluster.get`, the prefetch generator) polls it while it
waits and restarts the clock whenever the counter moved.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

# The concurrency group RoleWorker.progress runs in (Cluster.create declares it).
PROGRESS_GROUP = "progress"

_lock = threading.Lock()
_count = 0
_doing = "idle"


def tick(n: int = 1) -> None:
    global _count
    with _lock:
        _count += n


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """Name the work in progress (reported when it stalls); ticks on the way in and out."""
    global _doing
    with _lock:
        previous, _doing = _doing, what
    tick()
    try:
        yield
    finally:
        with _lock:
            _doing = previous
        tick()


def snapshot() -> tuple[int, str]:
    with _lock:
        return _count, _doing


class ProgressClock:
    """The driver's side for one call: `stalled()` is true once the worker's counter has
    not moved for `limit_s` (or the worker did not answer the question)."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.last: tuple[int, str] | None = None
        self.since = time.monotonic()
        self.asked = 0.0  # when the worker was last asked (callers that poll sparingly)

    def saw(self, progress: tuple[int, str] | None) -> None:
        if progress is not None and progress != self.last:
            self.last, self.since = progress, time.monotonic()

    def stalled(self) -> bool:
        return time.monotonic() - self.since > self.limit_s

    @property
    def doing(self) -> str:
        return self.last[1] if self.last else "unknown (no progress report)"
