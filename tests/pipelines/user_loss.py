"""A policy-loss variant from outside flywheel's catalog (tests/pipelines/
test_registration.py registers it with `register_policy_loss`): REINFORCE at half weight,
flagging every token, so its metric `pg/user_loss_frac` says it ran in the trainer."""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms import PolicyLossParams


def half_reinforce_loss(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor,
                        scores: Tensor | None, params: PolicyLossParams
                        ) -> tuple[Tensor, dict[str, Tensor]]:
    loss_mat = -0.5 * advantages * log_probs  # [B, T]
    return loss_mat, {"pg/clipfrac": torch.zeros_like(loss_mat),
                      "pg/user_loss_frac": torch.ones_like(loss_mat)}
