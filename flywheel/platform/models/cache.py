"""The model cache: where the checkpoints flywheel makes for itself live, built once each.

A built-in model (builtin.py) or a GGUF file converted to an HF folder (sources.py) is a
folder `<cache>/<name>-<hash>/`, the hash covering everything that shapes it, so a change
builds a new folder instead of reusing a stale one. `<cache>` is the caller's `cache_dir`,
else `$FLYWHEEL_CACHE/models`, else `~/.cache/flywheel/models`.

`build_once` makes such a folder atomically: it takes an exclusive `fcntl` lock per folder,
builds into a temp folder in the same parent and renames it into place, so a reader sees a
complete folder or none, and concurrent builders (Ray workers starting together) build once.
A crashed build leaves only a `.tmp` folder, never a half-written entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin://"


def default_cache_dir() -> Path:
    """`$FLYWHEEL_CACHE/models` if the variable is set, else `~/.cache/flywheel/models`."""
    root = os.environ.get("FLYWHEEL_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "flywheel") / "models"


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """`final`, built by `build(tmp)` into a temp folder beside it and renamed into place
    under an exclusive lock, unless it already exists: concurrent callers build once."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(final.parent / f".{final.name}.lock"):
        if final.is_dir():  # built by another process while we waited for the lock
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
        try:
            build(tmp)
            os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.is_dir():  # not a lost race: a real failure
                    raise
                logger.info("another builder finished %s first; using its copy", final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
