"""`cispo`: Clipped IS-weight Policy Optimisation (MiniMax-M1, arXiv 2506.13585).

    r_t = exp(ℓ_t - ℓ_old,t)
    L_t = -sg(clip(r_t, 1 - ε_low, 1 + ε_high)) · A_t · ℓ_t

Unlike PPO, clipped tokens keep a (bounded) gradient. With the unified mask a token
is dropped (M_t = 0) when its ratio is already outside the trust region in the direction
A_t pushes it: A_t > 0 and r_t > 1 + ε_high, or A_t < 0 and r_t < 1 - ε_low. Dropped tokens
still count in the aggregation denominator, as in the paper's 1/Σ|o_i| normaliser.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.policy_loss.params import PolicyLossParams


def cispo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
) -> tuple[Tensor, dict[str, Tensor]]:
    low, high = 1.0 - params.cispo_epsilon_low, 1.0 + params.cispo_epsilon_high
    ratio = torch.exp(log_probs - old_log_probs).detach()  # [B, T]
    weight = torch.clamp(ratio, low, high)  # [B, T], sg(·)
    loss_mat = -weight * advantages * log_probs  # [B, T]
    flags = {"pg/clipfrac": (ratio < low) | (ratio > high)}

    if params.cispo_use_unified_mask:
        dropped = ((advantages > 0) & (ratio > high)) | ((advantages < 0) & (ratio < low))
        loss_mat = torch.where(dropped, torch.zeros_like(loss_mat), loss_mat)  # [B, T]
        flags["pg/cispo_masked_frac"] = dropped
    return loss_mat, flags
