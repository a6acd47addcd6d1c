"""`vanilla`: plain REINFORCE / policy gradient (Williams 1992).

    L_t = -A_t · ℓ_t,      ∇L_t = -A_t · ∇log π_θ(a_t | s_t)

No importance ratio: exact only on-policy (ℓ_old is not used).
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.policy_loss.params import PolicyLossParams


def vanilla_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
) -> tuple[Tensor, dict[str, Tensor]]:
    loss_mat = -advantages * log_probs  # [B, T]
    return loss_mat, {"pg/clipfrac": torch.zeros_like(loss_mat)}
