"""Generalised Advantage Estimation and the PPO value loss, for pipelines with a critic.

GAE (Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", arXiv 1506.02438):

    δ_t = r_t + γ·V_{t+1} - V_t
    Â_t = δ_t + γλ·Â_{t+1}          (Â and V are 0 past the last valid token)
    R_t = Â_t + V_t                  (the value target)

Masked positions are skipped, not treated as terminal: the recursion carries V_{t+1} and
Â_{t+1} over them, so tokens the policy did not produce (e.g. environment observations in
an agentic trajectory) are transparent. They get Â = R = 0 in the output.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import Count, aggregate_loss, masked_mean


@torch.no_grad()
def compute_gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """(advantages [B, T], returns [B, T]) from rewards, values and mask, all [B, T]."""
    valid = mask.bool()  # [B, T]
    next_value = torch.zeros_like(values[:, 0])  # [B]
    next_adv = torch.zeros_like(values[:, 0])  # [B]
    advantages = torch.zeros_like(values)  # [B, T]
    for t in reversed(range(values.shape[-1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]  # [B]
        adv_t = delta + gamma * lam * next_adv  # [B]
        advantages[:, t] = adv_t
        next_adv = torch.where(valid[:, t], adv_t, next_adv)  # [B]
        next_value = torch.where(valid[:, t], values[:, t], next_value)  # [B]
    zeros = torch.zeros_like(values)
    advantages = torch.where(valid, advantages, zeros)  # [B, T]
    returns = torch.where(valid, advantages + values, zeros)  # [B, T]
    return advantages, returns


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    value_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
    *,
    global_num_tokens: Count | None = None,
    global_num_seqs: Count | None = None,
    norm_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO value loss (Schulman et al. 2017, arXiv 1707.06347; clipping as in OpenAI
    baselines ppo2):

        L_t = ½·(V_t - R_t)²                                            (no clip)
        L_t = ½·max((V_t - R_t)², (clip(V_t, V_old - c, V_old + c) - R_t)²)   (c = value_clip)

    values [B, T] carries the gradient; old_values and returns are constants.
    """
    old_values, returns = old_values.detach(), returns.detach()
    valid = mask.bool()  # [B, T]
    unclipped = (values - returns) ** 2  # [B, T]
    if value_clip is None:
        loss_mat = 0.5 * unclipped  # [B, T]
        clipped_active = torch.zeros_like(valid)  # [B, T]
    else:
        v_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        clipped = (v_clipped - returns) ** 2  # [B, T]
        loss_mat = 0.5 * torch.maximum(unclipped, clipped)  # [B, T]
        clipped_active = clipped > unclipped  # [B, T]
    loss = aggregate_loss(loss_mat, valid, loss_agg_mode, global_num_tokens=global_num_tokens,
                          global_num_seqs=global_num_seqs,
                          norm_length=norm_length)
    with torch.no_grad():
        metrics = {
            "vf/loss": loss.item(),
            "vf/clipfrac": masked_mean(clipped_active.float(), valid).item(),
            "vf/values_mean": masked_mean(values.detach(), valid).item(),
            "vf/returns_mean": masked_mean(returns, valid).item(),
        }
    return loss, metrics
