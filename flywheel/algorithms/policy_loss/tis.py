"""`tis`: truncated importance-sampling policy gradient.

    r_t = exp(ℓ_t - ℓ_old,t)
    L_t = -sg(clip(r_t, lower, upper)) · A_t · ℓ_t

The weight is a constant (stop-gradient), so ∇L_t = -clip(r_t, lower, upper)·A_t·∇ℓ_t:
REINFORCE with a bounded off-policy correction (truncated IS, Ionides 2008; the
clip(·, 0, 1) default is the TOPR / V-trace style truncation, Espeholt et al. 2018).
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.policy_loss.params import PolicyLossParams


def tis_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
) -> tuple[Tensor, dict[str, Tensor]]:
    lower, upper = params.tis_lower_bound, params.tis_upper_bound
    ratio = torch.exp(log_probs - old_log_probs).detach()  # [B, T]
    weight = torch.clamp(ratio, lower, upper)  # [B, T], sg(·)
    loss_mat = -weight * advantages * log_probs  # [B, T]
    return loss_mat, {"pg/clipfrac": (ratio < lower) | (ratio > upper)}
