"""Whether a folder already holds a run, so a fresh run never writes over one.

A fresh run into a folder that holds another run's records would interleave them:
metrics.jsonl with steps 1, 2, 1, the old config.yaml replaced, an old checkpoint-2 beside
the new checkpoint-1. So a folder holding any of a run's records (RUN_MARKERS, or a
checkpoint-<step> folder) is refused for a fresh run with one line that says how to resume
it instead; a resumed run (`platform run --resume DIR`, or resume_from_checkpoint) continues
in it by design (resume.py). The default layout runs/<exp_name>/<timestamp> picks a free
name instead (`unused_folder`): two runs started within the same second get two folders.
"""

from __future__ import annotations

from pathlib import Path

from flywheel.platform.config.errors import ConfigError

# What a run writes into its folder (launch.py, run_status.py, the step loop).
RUN_MARKERS = ("config.yaml", "status.json", "metrics.jsonl")


def run_records(folder: Path) -> list[str]:
    """The names in `folder` that show a run was there (empty when none or no folder)."""
    if not folder.is_dir():
        return []
    found = [name for name in RUN_MARKERS if (folder / name).exists()]
    found += sorted(p.name for p in folder.glob("checkpoint-*"))
    return found


def check_fresh_folder(folder: Path, config_path: str | None) -> None:
    """ConfigError when a fresh run would write into a folder that holds a run."""
    found = run_records(folder)
    if found:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise ConfigError(config_path or "", "output_dir",
                          f"{folder} already holds a run ({shown}); a fresh run would "
                          f"overwrite it: continue it with `platform run --resume {folder}`, "
                          f"or choose another output_dir")


def unused_folder(folder: Path) -> Path:
    """`folder`, or `folder-2`, `folder-3`, ... the first that holds no run."""
    candidate, n = folder, 1
    while run_records(candidate):
        n += 1
        candidate = folder.with_name(f"{folder.name}-{n}")
    return candidate
