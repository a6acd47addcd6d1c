"""`topr` and `topr_seq`: Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv 2503.14286).

Samples are split by their score: positive (score > 0) and the rest. The paper weights the
others by the truncated ratio of the whole trajectory, π(y | x) / μ(y | x) clipped to
[0, 1]; `topr_seq` is that form:

    R = exp(Σ_s (ℓ_s - ℓ_old,s))                 (one ratio per response)
    L_t = -w₊ · A_t · ℓ_t                      for positive samples (plain SFT-like REINFORCE)
    L_t = -w₋ · sg(clip(R, 0, 1)) · A_t · ℓ_t    for the others (truncated IS)

`topr` (the default, ROLL's form: its TOPR clamps the per-token ratio on negative samples)
truncates each token's own ratio r_t = exp(ℓ_t - ℓ_old,t) instead of R. They agree
on-policy; off-policy a response whose tokens drift both ways keeps weights near 1 per
token under `topr` while its trajectory ratio may be far from 1.

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
    ratio = torch.exp(log_probs - old_log_probs).detach()  # [B, T]
    return _tapered(ratio, log_probs, advantages, scores, params)


def topr_seq_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
    *,
    response_mask: Tensor,
) -> tuple[Tensor, dict[str, Tensor]]:
    log_ratio = torch.where(response_mask.bool(), log_probs - old_log_probs, 0.0)  # [B, T]
    # R [B, 1] over every token of its response; a long drift overflows to inf, which the
    # clip takes to 1, as it should
    ratio = torch.exp(log_ratio.sum(-1, keepdim=True)).detach().expand_as(log_probs)
    return _tapered(ratio, log_probs, advantages, scores, params)


def _tapered(ratio: Tensor, log_probs: Tensor, advantages: Tensor, scores: Tensor | None,
             params: PolicyLossParams) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss given the (detached) ratio each token's negative-sample weight truncates."""
    if scores is None:
        raise ValueError("pg_variant 'topr' needs per-sample `scores` [B] (positive if > 0)")
    positive = (scores > 0).unsqueeze(-1).expand_as(log_probs)  # [B, T]
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
