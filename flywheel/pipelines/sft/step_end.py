"""The end of one step of a loop over fixed data (SFT, DPO, reward-model training): the
validation every eval_steps and after the last step, the tracker's line, the checkpoint
every save_steps and at the end, in that order, written once for the three loops."""

from __future__ import annotations

from collections.abc import Callable

from flywheel.config.schema import PipelineConfig
from flywheel.platform.tracking import Tracker


def end_step(cfg: PipelineConfig, step: int, steps: int, metrics: dict[str, float],
             tracker: Tracker, validate: Callable[[], dict[str, float]] | None,
             save: Callable[[], object]) -> None:
    """`validate` (None: no validation set) and `save` are called only on the steps
    that take them; `metrics` gains the validation's."""
    last = step == steps
    if validate is not None and (step % cfg.eval_steps == 0 or last):
        metrics.update(validate())
    tracker.log(step, metrics)
    if last or (cfg.save_steps and step % cfg.save_steps == 0):
        save()
