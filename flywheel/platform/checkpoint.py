"""Atomic checkpoint directories.

A checkpoint is written into `checkpoint-<step>.tmp` and renamed to `checkpoint-<step>`
only after every file (and a `COMPLETE` marker) is on disk, so killing the process at any
moment leaves the previous complete checkpoint as the newest loadable one. What goes
inside is the caller's business (model, optimizer, pipeline cursor). Once a checkpoint is
complete the run's plots.png is redrawn (`plots.refresh_run_plots`), so a long run's
pictures are never older than its newest checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from flywheel.platform.plots import refresh_run_plots

MARKER = "COMPLETE"
_NAME = re.compile(r"^checkpoint-(\d+)$")


@contextlib.contextmanager
def writing_checkpoint(output_dir: Path, step: int) -> Iterator[Path]:
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f"checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"step": step}))
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    refresh_run_plots(output_dir)


def complete_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for entry in output_dir.iterdir() if output_dir.is_dir() else []:
        match = _NAME.match(entry.name)
        if match and (entry / MARKER).exists():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def resolve_checkpoint(path: str) -> Path:
    """A checkpoint dir, or a run dir (its newest complete checkpoint)."""
    p = Path(path)
    if (p / MARKER).exists():
        return p
    found = complete_checkpoints(p)
    if not found:
        raise FileNotFoundError(f"resume_from_checkpoint: no complete checkpoint at {path}")
    return found[-1][1]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
