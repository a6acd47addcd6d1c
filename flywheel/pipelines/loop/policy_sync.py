"""actor_train's weights on their way to actor_infer.

Owns the policy version actor_infer holds, the weights asked for right behind a train call
(so the sync runs with no round trip after it), the copy of actor_infer's weights kept
while they lag actor_train's (model_update_frequency > 1: a checkpoint taken between two
syncs saves them, so a resumed run generates from the same weights as the uninterrupted
one), and the colocated hand-over, where the engine wakes for the weights and loads them
before actor_train leaves the devices (loop/phase_switch.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flywheel.pipelines.loop.phase_switch import PhaseSwitch
from flywheel.pipelines.loop.prefetch import PrefetchGenerator
from flywheel.pipelines.roles.handles import Pending
from flywheel.pipelines.roles.roles import Roles
from flywheel.workers.weight_transfer import SyncedWeights

SYNCED_WEIGHTS = "actor_infer_weights"  # a checkpoint's copy of actor_infer's lagging weights


@dataclass
class PolicySync:
    roles: Roles
    switch: PhaseSwitch
    update_frequency: int  # model_update_frequency
    version: int = 0  # train steps included in actor_infer's weights
    ahead: Pending | None = None  # weights queued behind this step's train call
    lagging: SyncedWeights | None = None  # actor_infer's weights while they may lag

    def syncs_after(self, step: int) -> bool:
        return step % self.update_frequency == 0

    def ask_behind_train(self) -> None:
        """Queue the weights request on actor_train right behind its train call."""
        self.ahead = self.roles.actor_train.weights()

    def first(self) -> None:
        """actor_infer generates from actor_train's weights from the first batch on, whatever
        it loaded itself (`load_format: dummy`, another model path, another dtype)."""
        self._load_now(self._keep(self.latest()))

    def after_step(self, step: int, generator: PrefetchGenerator, sync: bool) -> None:
        """Step 5 (when `sync`: every model_update_frequency steps): the generator applies
        the weights before its next work item. Colocated, the engine wakes for them first
        and they are applied here, before actor_train's parameters leave the devices."""
        weights = None
        if sync:
            self.version = step
            weights = self._keep(self.latest())
        if not self.switch.active:
            if weights is not None:
                generator.publish_weights(weights, self.version)
            return
        self.switch.before_sync()
        if weights is not None:
            self._load_now(weights)
        self.switch.after_sync()

    def save(self, checkpoint: Path, step: int) -> None:
        if self.version != step:  # actor_infer's weights lag (model_update_frequency)
            self.roles.actor_train.save_synced_weights(self.lagging,
                                                       str(checkpoint / SYNCED_WEIGHTS))

    def restore(self, checkpoint: Path, version: int) -> None:
        """actor_infer restarts from the weights it held at the save: actor_train's, or the
        earlier ones a checkpoint between two syncs kept."""
        self.version = version
        synced = checkpoint / SYNCED_WEIGHTS
        weights = (self.roles.actor_train.synced_weights(str(synced)) if synced.exists()
                   else self.latest())
        self._load_now(self._keep(weights))

    def _load_now(self, weights: SyncedWeights) -> None:
        self.roles.actor_infer.gather(self.roles.actor_infer.update_weights(weights,
                                                                            self.version))

    def _keep(self, weights: SyncedWeights) -> SyncedWeights:
        """`weights`, now actor_infer's, kept for a checkpoint when they may lag."""
        self.lagging = weights if self.update_frequency > 1 else None
        return weights

    def latest(self) -> SyncedWeights:
        """actor_train's weights now (the request queued behind the train call, if any)."""
        pending, self.ahead = self.ahead, None
        return (pending or self.roles.actor_train.weights()).result()
