"""The phase switch of a colocated (hybrid) run: actor_train and actor_infer take turns on
the devices they share, each freeing its memory for the other.

Synchronous runs may put both roles on the same devices (config/checks/config.py
check_async); without this, a real model would hold training's weights, gradients and
optimizer state and the engine's weights and KV cache at once. The order per step, as
verl's hybrid engine does it:

  train step -> actor_train offloads its optimizer part -> actor_infer wakes
  -> weight sync (applied) -> actor_train offloads its parameters -> generation
  -> actor_infer sleeps -> actor_train onloads -> (log-probs,) training

The optimizer part goes before the sync, the parameters after it, because the sync reads
them. The pipeline (rlvr/rollout.py, and agentic/rollout.py through it) calls these methods at the
step's boundaries with the prefetch generator paused, so no generation is in flight
across a switch; validation and every generation run in the generation phase, and
checkpoints are written in the training phase (`training`). A run (fresh or resumed)
starts in the training phase with the engine awake for the first sync and the step-0
validation; `start_generation` then enters the generation phase before the generator
starts.

Whether it acts is decided once (config/derived.py offloads_between_phases)
and printed at start. Inactive, every method returns at once and nothing is called.
On CPU every call still runs, in order, and each worker records it and says it freed
nothing (workers/role_worker.py `phase_events`). On a GPU, bench/gpu_checks.py measures
the training backends' offload/onload and hf_infer's sleep/wake (figures in bench/README.md);
vllm's and sglang's sleep/wake have not run on a GPU.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from flywheel.pipelines.roles.handles import InferRole, TrainRole
from flywheel.workers.strategies.offload import MODEL, OPTIMIZER


@dataclass
class PhaseSwitch:
    actor_train: TrainRole
    actor_infer: InferRole
    active: bool
    seconds: float = 0.0  # spent switching since the last `take_seconds`

    def start_generation(self) -> None:
        """Into the generation phase from a state where both roles are resident (start,
        resume): the engine is awake, actor_train holds everything."""
        self._run(lambda: (self.actor_train.offload(OPTIMIZER),
                           self.actor_train.offload(MODEL)))

    def to_training(self) -> None:
        """Generation is over (the generator is paused): engine asleep, training back."""
        self._run(lambda: (self.actor_infer.sleep(), self.actor_train.onload()))

    def before_sync(self) -> None:
        """After the train step (its weights already taken): free the optimizer part and
        wake the engine for the weight sync."""
        self._run(lambda: (self.actor_train.offload(OPTIMIZER), self.actor_infer.wake()))

    def after_sync(self) -> None:
        """The sync is applied: the parameters can go too; generation may start."""
        self._run(lambda: self.actor_train.offload(MODEL))

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """The training phase for the duration, from the generation phase and back (a
        checkpoint: actor_train saves what lives on its devices)."""
        self.to_training()
        try:
            yield
        finally:
            self._run(lambda: (self.actor_train.offload(OPTIMIZER), self.actor_infer.wake(),
                               self.actor_train.offload(MODEL)))

    def write_events(self, path: Path) -> None:
        """Both roles' recorded switches and calls (workers/role_worker.py), one JSON
        list per line `[role, rank, event, monotonic time, note]` in time order: what a
        reader (or test) checks the order against. Colocated runs only."""
        if not self.active:
            return
        rows = [(role.role, rank, *event) for role in (self.actor_train, self.actor_infer)
                for rank, events in enumerate(role.phase_events()) for event in events]
        path.write_text("".join(json.dumps(row) + "\n" for row in
                                sorted(rows, key=lambda r: r[3])))

    def take_seconds(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    def _run(self, calls) -> None:
        if not self.active:
            return
        started = time.monotonic()
        calls()
        self.seconds += time.monotonic() - started


def describe(active: bool, shared: list[int], reason: str) -> str:
    """The start-up line saying whether, and why, the roles take turns."""
    state = "on" if active else "off"
    where = f"actor_train and actor_infer share devices {shared}" if shared else (
        "actor_train and actor_infer share no device")
    return f"phase switch (offload_between_phases): {state}: {where}; {reason}"
