"""What a resumed run may change, and the steps its learning-rate schedules span.

platform/resume.py finds the checkpoint, refuses changed keys outside the set it is handed
and cuts the run's records back; which keys are safe and how a resumed run keeps its
learning-rate curve are the pipelines' (they name the roles and their schedules).
"""

from __future__ import annotations

from pathlib import Path

from flywheel.config.schema import PipelineConfig
from flywheel.platform.checkpoint_state import read_pipeline_state
from flywheel.platform.config.errors import ConfigError

# Top-level keys (and their subtrees) a resumed run may change: how long it runs, what it
# logs, when it evaluates and saves, tracking, timeouts, how weights travel; anything else
# (the model, the batch shape, the loss...) would change what it trains.
SAFE_KEYS = frozenset({
    "max_steps", "logging_steps", "eval_steps", "save_steps", "save_total_limit",
    "val_batch_size", "validation", "tracking", "track_with", "tracker_kwargs",
    "logging_dir", "resume_from_checkpoint", "output_dir", "timeouts", "ray",
    "weight_sync_bucket_mb",  # the synced weights are the same whatever the bucket size
    "weight_sync_carrier",  # and whatever carries them
})

# transformers' schedules whose learning rate does not depend on the horizon
FLAT_SCHEDULES = frozenset({"constant", "constant_with_warmup"})


def schedule_steps(cfg: PipelineConfig, checkpoint: Path | None) -> int:
    """The train steps the learning-rate schedules span: max_steps, and for a resumed run
    its first start's (saved in every checkpoint), so changing max_steps on resume stops
    the run earlier without bending the curve. Extending a decaying schedule past its end
    is refused: its learning rate is spent there (cosine would even climb back)."""
    if checkpoint is None:
        return cfg.max_steps
    saved = read_pipeline_state(checkpoint).get("schedule_steps")  # checked, or one line
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
