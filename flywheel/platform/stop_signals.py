"""SIGINT / SIGTERM: stop a run cleanly, with a checkpoint to resume from.

While the loop runs (`StopRequest.armed`), the first signal only asks it to stop: the
current step finishes (a step still waiting for its batch stops waiting: with envs that
fail every episode no batch may ever come), a checkpoint is written, every actor and
thread is stopped, the resume command is printed and the run ends with `RunInterrupted`
(exit status 130). A second signal, or one before the loop has started (nothing to save
yet), interrupts at once (KeyboardInterrupt); the cleanup on the way out still stops
every actor.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass


class RunInterrupted(KeyboardInterrupt):
    """The run stopped on a signal after writing a checkpoint; str() says how to resume."""


@dataclass
class StopRequest:
    armed: bool = False  # the loop checks `requested` after each step
    signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if not self.armed or self.requested:
            raise KeyboardInterrupt(name)
        self.signal_name = name
        print(f"{name}: stopping after the current step with a checkpoint "
              f"(send it again to stop at once)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """Route SIGINT and SIGTERM to `request` (main thread only; elsewhere, unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {s: signal.signal(s, request.handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield request
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
