"""A server the CLI starts and owns (`platform ui`'s mlflow), stopped with all its children.

Why a process group: `mlflow ui` starts uvicorn, which starts its own workers; a plain
`subprocess.call` stopped by SIGTERM (or SIGINT) ended only the platform process, and the
server and its uvicorn children stayed behind, orphaned, still serving the port. Here the
server runs in a session (and process group) of its own, and SIGINT or SIGTERM of the
platform process, or the server ending first, stops the whole group: SIGTERM, then SIGKILL
after STOP_WAIT_S. A stop by the user is not an error: exit status 0 after a signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

STOP_WAIT_S = 10.0  # uvicorn's graceful shutdown is well under this


def run_server_group(command: Sequence[str], env: Mapping[str, str], name: str) -> int:
    """Run `command` until it exits or this process is sent SIGINT / SIGTERM; then no
    process of its group is left. Returns its exit status, or 0 after a stop signal."""
    proc = subprocess.Popen(list(command), env=dict(env), start_new_session=True)
    stopped: list[str] = []

    def stop(signum: int, frame) -> None:
        stopped.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    except KeyboardInterrupt:
        if not stopped:
            stopped.append("SIGINT")
        return 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        stop_group(proc)
        if stopped:
            print(f"{name} stopped ({stopped[0]})", file=sys.stderr)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to `proc`'s process group, SIGKILL to what is left after STOP_WAIT_S."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_WAIT_S)
    with contextlib.suppress(ProcessLookupError):  # children that outlived the leader
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
