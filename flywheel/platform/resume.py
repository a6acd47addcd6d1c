"""Resume in place: which checkpoint, which run directory, what may change, and the run's
own records cut back to the checkpoint.

`resume_from_checkpoint` names a checkpoint, a run directory (its newest complete
checkpoint), or "latest" (`true` in YAML): output_dir's newest, or with output_dir unset
the newest run under runs/<exp_name>/ that has one. Unless output_dir says otherwise, the
run continues in the checkpoint's own run directory.

Before the resumed run writes anything, every JSON-lines record of the run directory loses
the rows of steps after the checkpoint (they were lost with the process that wrote them and
are done again), so metrics.jsonl has one row per step and samples.jsonl one per group.

A resumed run may change only what does not change the run's meaning (SAFE_KEYS: how long
it runs, what it logs, when it evaluates and saves, tracking, timeouts, how weights
travel); anything else (the model, the batch shape, the loss...) is refused with one line
naming the keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from flywheel.platform.checkpoint import (
    PIPELINE_STATE,
    checkpoint_step,
    complete_checkpoints,
    resolve_checkpoint,
)
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.schema import PipelineConfig

LATEST = "latest"
# Top-level keys (and their subtrees) a resumed run may change.
SAFE_KEYS = frozenset({
    "max_steps", "logging_steps", "eval_steps", "save_steps", "save_total_limit",
    "val_batch_size", "validation", "tracking", "track_with", "tracker_kwargs",
    "logging_dir", "resume_from_checkpoint", "output_dir", "timeouts", "ray",
    "weight_sync_bucket_mb",  # the synced weights are the same whatever the bucket size
    "weight_sync_carrier",  # and whatever carries them
})
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


def check_changes(old: dict, new: dict, source: str, run_dir: Path | None = None) -> list[str]:
    """Lines saying what changed (safe changes); a ConfigError for the first unsafe one.
    `run_dir`: the directory the run continues in; an output_dir on either side that names
    it (`platform run --resume RUN_DIR` writes output_dir=RUN_DIR for the user, where the
    run's own config has none: the default layout) is no change of the user's."""
    if run_dir is not None:
        old, new = (_without_run_dir(side, run_dir) for side in (old, new))
    changes = config_changes(old, new)
    unsafe = [c for c in changes if c[0].split(".")[0] not in SAFE_KEYS]
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


# transformers' schedules whose learning rate does not depend on the horizon
FLAT_SCHEDULES = frozenset({"constant", "constant_with_warmup"})


def schedule_steps(cfg: PipelineConfig, checkpoint: Path | None) -> int:
    """The train steps the learning-rate schedules span: max_steps, and for a resumed run
    its first start's (saved in every checkpoint), so changing max_steps on resume stops
    the run earlier without bending the curve. Extending a decaying schedule past its end
    is refused: its learning rate is spent there (cosine would even climb back)."""
    if checkpoint is None:
        return cfg.max_steps
    saved = json.loads((checkpoint / PIPELINE_STATE).read_text()).get("schedule_steps")
    if saved is None:  # a checkpoint from before the horizon was kept: max_steps, as then
        return cfg.max_steps
    decaying = sorted({w.training_args.lr_scheduler_type
                       for w in (cfg.actor_train, cfg.critic) if w is not None}
                      - FLAT_SCHEDULES)
    if cfg.max_steps > saved and decaying:
        raise ConfigError("", "max_steps",
                          f"is {cfg.max_steps}, past the {saved} steps the resumed run's "
                          f"{decaying[0]} learning-rate schedule decays over; resume with "
                          f"max_steps <= {saved}, or start a new run")
    return max(saved, cfg.max_steps)


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
           "rewrite_jsonl", "schedule_steps"]
