"""Resume in place: which checkpoint, which run directory, what may change, and the run's
own records cut back to the checkpoint.

`resume_from_checkpoint` names a checkpoint, a run directory (its newest complete
checkpoint), or "latest" (`true` in YAML): output_dir's newest, or with output_dir unset
the newest run under runs/<exp_name>/ that has one. Unless output_dir says otherwise, the
run continues in the checkpoint's own run directory.

Before the resumed run writes anything, every JSON-lines record of the run directory loses
the rows of steps after the checkpoint (they were lost with the process that wrote them and
are done again), so metrics.jsonl has one row per step and samples.jsonl one per group.

A resumed run may change only the top-level keys its caller names safe (the pipelines':
flywheel/pipelines/run/resume_rules.py SAFE_KEYS); anything else is refused with one line
naming the keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from flywheel.platform.checkpoint import (
    checkpoint_step,
    complete_checkpoints,
    resolve_checkpoint,
)
from flywheel.platform.config.errors import ConfigError

LATEST = "latest"
# Records cut back to the checkpoint's step (each row has a "step").
STEP_RECORDS = ("metrics.jsonl", "sample_texts.jsonl")


def find_checkpoint(setting: str, output_dir: str | None, exp_name: str,
                    runs_dir: Path = Path("runs")) -> Path:
    """The checkpoint `resume_from_checkpoint: setting` means."""
    if setting != LATEST:
        return resolve_checkpoint(setting)
    if output_dir:
        return resolve_checkpoint(output_dir)
    runs = [d for d in sorted((runs_dir / exp_name).glob("*")) if complete_checkpoints(d)]
    if not runs:
        raise FileNotFoundError(f"resume_from_checkpoint: true: no run under "
                                f"{runs_dir / exp_name} has a complete checkpoint")
    return complete_checkpoints(runs[-1])[-1][1]


def config_changes(old: dict, new: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """(key.path, old, new) for every leaf that differs."""
    changes = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changes += config_changes(a, b, f"{prefix}{key}.")
        elif a != b:
            changes.append((f"{prefix}{key}", a, b))
    return changes


def check_changes(old: dict, new: dict, source: str, safe_keys: frozenset[str],
                  run_dir: Path | None = None) -> list[str]:
    """Lines saying what changed (changes under `safe_keys`, top-level keys a resumed run may
    change); a ConfigError for the first unsafe one.
    `run_dir`: the directory the run continues in; an output_dir on either side that names
    it (`platform run --resume RUN_DIR` writes output_dir=RUN_DIR for the user, where the
    run's own config has none: the default layout) is no change of the user's."""
    if run_dir is not None:
        old, new = (_without_run_dir(side, run_dir) for side in (old, new))
    changes = config_changes(old, new)
    unsafe = [c for c in changes if c[0].split(".")[0] not in safe_keys]
    if unsafe:
        keys = ", ".join(f"{k} ({a!r} -> {b!r})" for k, a, b in unsafe[:4])
        raise ConfigError(source, unsafe[0][0],
                          f"differs from the run being resumed and would change what it "
                          f"trains: {keys}; start a new run (another output_dir) instead")
    return [f"{k}: {a!r} -> {b!r}" for k, a, b in changes if k != "resume_from_checkpoint"]


def _without_run_dir(data: dict, run_dir: Path) -> dict:
    """`data` with an output_dir that is `run_dir` (or unset: the default layout, which
    the resumed run continues in) left out."""
    value = data.get("output_dir")
    if value is None or Path(value).resolve() == run_dir.resolve():
        return {k: v for k, v in data.items() if k != "output_dir"}
    return data


def cut_back(run_dir: Path, step: int) -> None:
    """Drop the rows of steps after `step` from the run's step records."""
    for name in STEP_RECORDS:
        rewrite_jsonl(run_dir / name, lambda row: row.get("step", 0) <= step)


def rewrite_jsonl(path: Path, keep: Callable[[dict], bool]) -> int:
    """Keep the rows `keep` accepts (a torn last line, from a kill mid-write, goes too);
    written beside and renamed over, so a kill now leaves one file or the other whole.
    Returns the rows removed."""
    if not path.exists():
        return 0
    kept, removed = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            removed += 1
            continue
        if keep(row):
            kept.append(line)
        else:
            removed += 1
    if removed:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return removed


__all__ = ["LATEST", "check_changes", "checkpoint_step", "cut_back", "find_checkpoint",
           "rewrite_jsonl"]
