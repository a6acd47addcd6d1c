"""`topr`: Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv 2503.14286).

Samples are split by their score: positive (score > 0) and the rest.

    r_t = exp(ℓ_t - ℓ_old,t)
    L_t = -w₊ · A_t · ℓ_t                      for positive samples (plain SFT-like REINFORCE)
    L_t = -w₋ · sg(clip(r_t, 0, 1)) · A_t · ℓ_t  for the others (truncated IS)

w₊ = topr_positive_weight, w₋ = topr_negative_weight. The gradient flows only through ℓ.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.policy_loss.params import PolicyLossParams


def topr_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
) -> tuple[Tensor, dict[str, Tensor]]:
    if scores is None:
        raise ValueError("pg_variant 'topr' needs per-sample `scores` [B] (positive if > 0)")
    positive = (scores > 0).unsqueeze(-1).expand_as(log_probs)  # [B, T]
    ratio = torch.exp(log_probs - old_log_probs).detach()  # [B, T]
    weight = torch.where(
        positive,
        torch.full_like(ratio, params.topr_positive_weight),
        params.topr_negative_weight * torch.clamp(ratio, 0.0, 1.0),
    )  # [B, T], sg(·)
    loss_mat = -weight * advantages * log_probs  # [B, T]
    return loss_mat, {
        "pg/clipfrac": ~positive & (ratio > 1.0),  # negative-sample weights truncated at 1
        "pg/topr_positive_frac": positive,
    }
