"""A policy-loss variant from outside flywheel's catalog, with a setting of its own
(tests/pipelines/test_registration.py registers it with `register_policy_loss`): REINFORCE
at a set weight, flagging every token with that weight, so its metric `pg/user_loss_weight`
says it ran in the trainer with the config's setting."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class WeightedReinforceSettings:
    # Multiplier of the REINFORCE loss, > 0.
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError(f"weight must be > 0, got {self.weight}")


def weighted_reinforce_loss(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor,
                            scores: Tensor | None, params: WeightedReinforceSettings
                            ) -> tuple[Tensor, dict[str, Tensor]]:
    loss_mat = -params.weight * advantages * log_probs  # [B, T]
    return loss_mat, {"pg/clipfrac": torch.zeros_like(loss_mat),
                      "pg/user_loss_weight": torch.full_like(loss_mat, params.weight)}
