"""`gspo`: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071, §4).

The importance ratio is taken per sequence, not per token: the length-normalised
likelihood ratio of the whole response (a geometric mean of the token ratios), so a few
far-off tokens cannot dominate a long response's update and clipping acts on whole
responses:

    s_i = (π_θ(y_i | x) / π_old(y_i | x))^(1/|y_i|) = exp((1/|y_i|) Σ_t (ℓ_i,t - ℓ_old,i,t))
    L_i,t = -min(s_i·A_i,t, clip(s_i, 1 - ε_low, 1 + ε_high)·A_i,t)

every token of response i sharing s_i (and its clip). With the sequence advantage of GRPO
(A_i,t = A_i) and seq-mean-token-mean aggregation this is the paper's objective
-(1/G) Σ_i min(s_i·A_i, clip(s_i)·A_i); ∇s_i = s_i·(1/|y_i|) Σ_t ∇ℓ_i,t. The clip keys
are ppo's (pg_clip, or use_pg_clip_range with pg_clip_low / pg_clip_high; the paper's
ranges are ~3e-4 / 4e-4, far tighter than a token clip), dual clip included: ROLL's
`importance_sampling: seq` (its rlvr actor_worker) is this loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.policy_loss.params import PolicyLossParams
from flywheel.algorithms.policy_loss.ppo import clipped_surrogate


def gspo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
    *,
    response_mask: Tensor,
) -> tuple[Tensor, dict[str, Tensor]]:
    valid = response_mask.bool()  # [B, T]
    # masked positions add neither value nor gradient to the sum
    log_ratio = torch.where(valid, log_probs - old_log_probs, 0.0)  # [B, T]
    length = valid.sum(-1, keepdim=True).clamp_min(1)  # [B, 1], |y_i|
    seq_ratio = torch.exp(log_ratio.sum(-1, keepdim=True) / length)  # [B, 1], s_i
    loss_mat, flags = clipped_surrogate(seq_ratio.expand_as(log_probs), advantages, params)
    flags["pg/seq_ratio_mean"] = seq_ratio.detach().expand_as(log_probs)  # [B, T]
    return loss_mat, flags
