"""Atomic checkpoint directories.

A checkpoint is written into `checkpoint-<step>.tmp` and renamed to `checkpoint-<step>`
only after every file (and a `COMPLETE` marker) is fsynced to disk, so killing the process
(or losing power) at any moment leaves the previous complete checkpoint as the newest
loadable one. `prune_checkpoints` keeps the newest N (save_total_limit). What goes
inside is the caller's business (model, optimizer, pipeline cursor). Once a checkpoint is
complete the run's plots.png is redrawn (`plots.refresh_run_plots`) if its last drawing
is older than PLOT_REFRESH_S, so a long run's pictures are at most that much older than its
newest checkpoint (the end of a run draws them whatever their age).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from flywheel.platform.plots import Panel, refresh_run_plots

MARKER = "COMPLETE"
PIPELINE_STATE = "pipeline_state.json"  # the step loop's own state (pipelines/loop/step_loop.py)
_NAME = re.compile(r"^checkpoint-(\d+)$")
PLOT_REFRESH_S = 60.0


@contextlib.contextmanager
def writing_checkpoint(output_dir: Path, step: int,
                       plots: tuple[Panel, ...] = ()) -> Iterator[Path]:
    """A temporary folder to write checkpoint `step` into, made complete and final when the
    block ends (removed if it raises); then plots.png is redrawn with `plots`, if any."""
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f"checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"step": step}))
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if plots:
        refresh_run_plots(output_dir, plots, min_age_s=PLOT_REFRESH_S)


def prune_checkpoints(output_dir: Path, keep: int | None) -> list[Path]:
    """Remove all but the newest `keep` complete checkpoints (None or 0: keep all), and
    any `.tmp` left by a killed save; returns what was removed."""
    removed = [p for p in output_dir.glob("checkpoint-*.tmp") if p.is_dir()]
    if keep:
        removed += [path for _, path in complete_checkpoints(output_dir)[:-keep]]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def checkpoint_step(path: Path) -> int:
    return int(json.loads((path / MARKER).read_text())["step"])


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


def _fsync_tree(root: Path) -> None:
    """Every file under `root`, then every directory (children before parents)."""
    for dirpath, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
