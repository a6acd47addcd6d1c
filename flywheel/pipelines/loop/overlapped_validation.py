"""Validation beside training: actor_infer scores version v while actor_train trains on.

Why: a validation run (hundreds of greedy prompts) can take as long as two train steps,
and run inline it stops both roles. With async_generation_ratio > 0 the replay buffer
already holds batches generated for the next steps, so actor_train has work while
actor_infer validates (slime users ask for the same: background eval, slime #2339).

What holds, and where:
- every validation request runs on version v's weights: the validation thread first
  pauses the prefetch generator (`PrefetchGenerator.paused`: nothing in flight, every
  update published has loaded), and the step loop publishes no new weights until the
  validation has ended (`StepLoop.end_validation` before the next sync);
- generation for training stays paused until the validation ends (DESIGN.md invariant
  3): the next batch comes from the buffer, or waits for the resume;
- step v's row of metrics.jsonl is written once, with its validation's metrics, when
  the validation ends: one row per step, in step order.

Not used (validation runs inline, as before): ratio 0, where the next batch needs the
engine anyway and the run stays number for number with the synchronous loop; colocated
runs, where training needs the devices the engine holds; the last step, with nothing
left to train (`StepLoop.overlaps_validation`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flywheel.pipelines.loop.prefetch import PrefetchGenerator


@dataclass
class OverlappedValidation:
    step: int  # the version validated: train steps in actor_infer's weights
    row: dict[str, float]  # the step's own metrics, logged with the validation's
    metrics: dict[str, float] | None = None  # the validation's, once it ended
    error: BaseException | None = None  # raised in the trainer by `wait`
    thread: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def start(cls, step: int, row: dict[str, float], validate: Callable[[], dict[str, float]],
              generator: PrefetchGenerator) -> OverlappedValidation:
        run = cls(step, row)
        run.thread = threading.Thread(target=run._validate, args=(validate, generator),
                                      name=f"validation-{step}", daemon=True)
        run.thread.start()
        return run

    def _validate(self, validate: Callable[[], dict[str, float]],
                  generator: PrefetchGenerator) -> None:
        started = time.perf_counter()
        try:
            with generator.paused():
                metrics = validate()
            # wall seconds it ran beside training (time/validate stays inside time/step)
            self.metrics = {**metrics,
                            "time/validate_overlapped": time.perf_counter() - started}
        except BaseException as error:  # handed to the trainer thread, which raises it
            self.error = error

    def wait(self) -> dict[str, float]:
        """The step's row with the validation's metrics; re-raises its error."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return {**self.row, **self.metrics}
