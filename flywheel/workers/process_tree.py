"""A user-code process's whole process tree dies with it, and its memory is bounded.

User code may start processes of its own (a reward function or an env that forks, with or
without `setsid`; code_sandbox's bubblewrap). Killing the process's process group does not
reach a child that called `setsid`, and a child whose parent died is handed to init, out
of anyone's reach. So a reward's scoring process (rewards/scoring_process.py) and an env's
process (env_process.py) split in two at start (`supervised`):

- the *supervisor* (the pid the worker started) asks the kernel to make it a child
  subreaper (prctl PR_SET_CHILD_SUBREAPER): every orphaned descendant, a `setsid` one
  included, becomes its child instead of init's. It only waits. When the user-code side
  exits (a crash, the end of its input) or the supervisor gets SIGTERM (the worker's kill
  at a timeout or at close, or PR_SET_PDEATHSIG when the worker dies), it SIGKILLs every
  descendant it can find (by parent links in /proc, again until none is left, since each
  kill hands the victim's children to it), then exits the way its child did (the same
  code, or the same signal), so the worker reports the child's end.
- the *scorer* (its child: the reward's scorer, the env's server) runs the user code, under
  an address-space limit if one is given (RLIMIT_AS, hard = soft, so user code cannot
  raise it; inherited by whatever it starts), and dies with the supervisor
  (PR_SET_PDEATHSIG SIGKILL).

Why not a cgroup: creating one needs a delegated cgroup tree, which a container or a Ray
worker seldom has; the subreaper needs nothing. Why the limit is per process (RLIMIT_AS,
like the bubblewrap sandbox's): it is what an unprivileged process can set; a reward that
forks many children is bounded per child.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLEANUP_S = 5.0  # the supervisor's kill rounds stop after this (a fork bomb keeps forking)


def prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


class _Stop(Exception):
    """The supervisor's SIGTERM, raised out of its wait."""


def _stop(signum, frame) -> None:
    raise _Stop


def supervised(memory_mb: int | None, close_fds: tuple[int, ...] = ()) -> None:
    """Split this process as the module docstring says. Returns only in the scorer, with
    `memory_mb` (MiB; None: no limit) as its address-space limit; the supervisor never
    returns (it exits once the tree is gone). `close_fds`: the scorer's ends of pipes the
    worker talks over; the supervisor closes its copies, so the worker sees end of file
    as soon as the scorer is gone."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, _stop)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the worker died before the request took effect
        os._exit(1)
    scorer = os.fork()
    if scorer == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        prctl(PR_SET_CHILD_SUBREAPER, 0)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:
            os._exit(1)
        if memory_mb is not None:
            limit = memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        return
    # the supervisor holds no pipe end: the worker reads the scorer's end of file
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    code = 1
    try:
        code = _wait_for(scorer)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_descendants()
    if code < 0:  # the scorer was killed by a signal: end by the same one
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def _wait_for(scorer: int) -> int:
    """Reap children until the scorer exits; its exit code (minus the signal if killed)."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == scorer:
            return os.waitstatus_to_exitcode(status)


def descendants(root: int) -> list[int]:
    """Every live process below `root`, by parent links in /proc (zombies included)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(timeout_s: float = CLEANUP_S) -> None:
    """SIGKILL every descendant of this process and reap them, in rounds: a killed
    process's children become this subreaper's, and are killed in the next round."""
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:  # no child left, live or zombie
            if not descendants(os.getpid()):
                return
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)
