"""What `async_generation_ratio` (r) means, in one place.

Two numbers follow from r, and both must agree or a run either stalls or trains samples
older than promised:

- the window (read by the prefetch generator): at most floor((1 + r) · B) groups may be
  outstanding, started but not yet released by a finished step (B: groups per batch).
  r = 0 is the synchronous pipeline, r = 1 one-step-off, a fraction lets part of the next
  batch run ahead;
- the staleness bound (read by the replay buffer): a group started at policy version v is
  trained at (0-based) step t only if t − v ≤ ceil(r) + model_update_frequency − 1. The
  window lets a group start at most ceil(r) batches early, and weights reach actor_infer
  only every model_update_frequency steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AsyncWindow:
    ratio: float  # async_generation_ratio
    batch_groups: int  # groups per training batch (B)
    update_frequency: int = 1  # model_update_frequency

    @property
    def capacity(self) -> int:
        """Groups that may be outstanding at once."""
        return math.floor((1 + self.ratio) * self.batch_groups)

    @property
    def max_staleness(self) -> int:
        """Steps a trained group's start version may lag the step that trains it."""
        return math.ceil(self.ratio) + self.update_frequency - 1
