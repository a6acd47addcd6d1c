"""A run's status on disk (`status.json`), and the summary `platform runs` prints.

`platform run` writes `status.json` when a run starts (running, with its pid and host)
and again when it ends (finished, failed, or interrupted by Ctrl-C), with the node each
role's workers were placed on. A run killed outright (SIGKILL, a lost machine) cannot
write its end; a "running" run whose process is gone from this host is reported as
interrupted. Steps, rewards and validation figures come from metrics.jsonl, the newest
checkpoint from the run directory, so the summary is right for runs from before
status.json too (their status is unknown).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from flywheel.platform.checkpoint import complete_checkpoints

STATUS_FILE = "status.json"


def write_status(output_dir: Path, status: str, **info) -> None:
    """Replace status.json atomically, keeping what earlier writes recorded."""
    path = output_dir / STATUS_FILE
    record = read_status(output_dir)
    record.update(info, status=status, updated=time.strftime("%Y-%m-%d %H:%M:%S"))
    if status == "running":
        record.update(pid=os.getpid(), host=socket.gethostname())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def read_status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {}


@dataclass(frozen=True)
class RunSummary:
    run_dir: Path
    status: str  # running, finished, failed, interrupted, unknown
    steps: int  # last train step logged
    max_steps: int | None
    reward: float | None
    validation: float | None
    checkpoint: Path | None

    def resume_command(self) -> str | None:
        """The command that continues this run from its newest checkpoint, in its dir."""
        if self.checkpoint is None or self.status == "running":
            return None
        return f"platform run --resume {shlex.quote(self.run_dir.as_posix())}"


def summarize(run_dir: Path, reward_keys: tuple[str, ...],
              validation_keys: tuple[str, ...]) -> RunSummary:
    """The run's status, last step and newest checkpoint, with the figures of the first of
    `reward_keys` / `validation_keys` it logged (the caller's names: pipelines/run/
    metric_views.py)."""
    status = read_status(run_dir)
    steps, reward, validation = 0, None, None
    for record in _metric_records(run_dir):
        steps = max(steps, int(record.get("step", 0)))
        reward = _first(record, reward_keys, reward)
        validation = _first(record, validation_keys, validation)
    checkpoints = complete_checkpoints(run_dir)
    return RunSummary(run_dir=run_dir, status=_effective_status(status), steps=steps,
                      max_steps=status.get("max_steps"), reward=reward,
                      validation=validation,
                      checkpoint=checkpoints[-1][1] if checkpoints else None)


def find_runs(runs_dir: Path) -> list[Path]:
    """Run directories under runs_dir: those with metrics.jsonl or status.json."""
    if not runs_dir.is_dir():
        return []
    found = {p.parent for name in ("metrics.jsonl", STATUS_FILE) for p in runs_dir.rglob(name)}
    return sorted(found)


def _effective_status(status: dict) -> str:
    state = status.get("status", "unknown")
    if (state == "running" and status.get("host") == socket.gethostname()
            and not _alive(int(status.get("pid", 0)))):
        return "interrupted"  # killed before it could say so
    return state


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _metric_records(run_dir: Path):
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill


def _first(record: dict, keys: tuple[str, ...], previous: float | None) -> float | None:
    for key in keys:
        if isinstance(record.get(key), (int, float)):
            return float(record[key])
    return previous
