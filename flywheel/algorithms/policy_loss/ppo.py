"""`ppo`: clipped surrogate objective (Schulman et al. 2017, arXiv 1707.06347, eq. 7).

    r_t = exp(ℓ_t - ℓ_old,t)
    L_t = -min(r_t·A_t, clip(r_t, 1 - ε_low, 1 + ε_high)·A_t)
        = max(-r_t·A_t, -clip(r_t, …)·A_t)

ε_low = ε_high = pg_clip, or (pg_clip_low, pg_clip_high) when use_pg_clip_range
("clip-higher", DAPO arXiv 2503.14476).

Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL",
arXiv 1912.09729): for A_t < 0 the loss above is unbounded as r_t → ∞, so it is
capped: L_t = min(L_t, -c·A_t) with c > 1 (dual_clip_c).

`clipped_surrogate` holds the clip and the dual clip for any ratio: gspo.py feeds it the
sequence-level ratio instead of the token one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.policy_loss.params import PolicyLossParams


def ppo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
) -> tuple[Tensor, dict[str, Tensor]]:
    ratio = torch.exp(log_probs - old_log_probs)  # [B, T]
    return clipped_surrogate(ratio, advantages, params)


def clipped_surrogate(ratio: Tensor, advantages: Tensor, params: PolicyLossParams
                      ) -> tuple[Tensor, dict[str, Tensor]]:
    """-min(r·A, clip(r)·A), dual-clipped when asked, for a ratio r [B, T] with a gradient."""
    if params.use_pg_clip_range:
        eps_low, eps_high = params.pg_clip_low, params.pg_clip_high
    else:
        eps_low = eps_high = params.pg_clip
    unclipped = -advantages * ratio  # [B, T]
    clipped = -advantages * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)  # [B, T]
    loss_mat = torch.maximum(unclipped, clipped)  # [B, T]
    flags = {"pg/clipfrac": clipped > unclipped}  # the clipped branch is active

    if params.dual_clip_loss:
        cap = -params.dual_clip_c * advantages  # [B, T]
        dual = (advantages < 0) & (loss_mat > cap)  # [B, T]
        loss_mat = torch.where(dual, cap, loss_mat)  # [B, T]
        flags["pg/dual_clipfrac"] = dual
    return loss_mat, flags
