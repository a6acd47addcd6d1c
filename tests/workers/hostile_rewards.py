"""Reward functions that misbehave (issue 53 items 3-5, issue 44 items 2-3), for
tests/workers/test_reward_limits.py: imported by path in a reward's scoring process (a fresh
interpreter), so they live in a module of their own and import nothing heavy. What each
does is the record's `case` column."""

from __future__ import annotations

import os
import time


def _sleeper() -> int:
    """A child that sleeps for minutes; its pid."""
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    return pid


def misbehave(prompt: str, response: str, reference: str, record: dict):
    case = record["case"]
    if case == "ok":
        return 1.0
    if case == "huge_int":
        return 10**400
    if case == "hang":
        time.sleep(600)
    if case == "raise":
        raise ValueError("always")
    if case == "hog":  # far over the scoring process's memory_mb
        return float(len(bytearray(2 << 30)))
    if case == "fork":  # children that outlive the call: one plain, one in its own session
        pids = [_sleeper()]
        detached = os.fork()
        if detached == 0:
            os.setsid()
            pids_path = record["pids"] + ".setsid"
            with open(pids_path, "w") as f:
                f.write(str(_sleeper()))
            os._exit(0)  # its child is an orphan now: handed to the nearest subreaper
        os.waitpid(detached, 0)
        with open(record["pids"], "w") as f:
            f.write(str(pids[0]))
        if record.get("then") == "hang":
            time.sleep(600)
        return 1.0
    raise AssertionError(f"unknown case {case}")


def always_raises(response: str):
    """A function broken on every sample (issue 44: such a run used to end "done")."""
    raise ValueError(f"cannot read {response!r}")


def always_hangs(response: str):
    """A function that never answers (issue 53: 110 s a step for 32 samples, in silence)."""
    time.sleep(3600)
