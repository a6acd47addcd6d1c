"""The pg_variant registry: name → loss function. One line per variant."""

from __future__ import annotations

from flywheel.algorithms.policy_loss.cispo import cispo_loss
from flywheel.algorithms.policy_loss.kimi15 import kimi15_loss
from flywheel.algorithms.policy_loss.params import PolicyLossFn
from flywheel.algorithms.policy_loss.ppo import ppo_loss
from flywheel.algorithms.policy_loss.tis import tis_loss
from flywheel.algorithms.policy_loss.topr import topr_loss
from flywheel.algorithms.policy_loss.vanilla import vanilla_loss

POLICY_LOSSES: dict[str, PolicyLossFn] = {
    "vanilla": vanilla_loss,
    "ppo": ppo_loss,
    "tis": tis_loss,
    "topr": topr_loss,
    "cispo": cispo_loss,
    "kimi15": kimi15_loss,
}


def get_policy_loss(pg_variant: str) -> PolicyLossFn:
    """The loss function registered as `pg_variant`; ValueError listing the known ones."""
    if pg_variant not in POLICY_LOSSES:
        raise ValueError(
            f"unknown pg_variant {pg_variant!r}; known variants: {sorted(POLICY_LOSSES)}"
        )
    return POLICY_LOSSES[pg_variant]
