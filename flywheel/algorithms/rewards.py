"""Reward shaping before advantage estimation: clipping, and placing an outcome score on
the response's tokens (the input `compute_gae` and `apply_kl_penalty` expect)."""

from __future__ import annotations

import torch
from torch import Tensor


def reward_clip(rewards: Tensor, max_abs: float) -> Tensor:
    """Clamp rewards to [-max_abs, max_abs] (any shape)."""
    if max_abs <= 0:
        raise ValueError(f"reward clip must be > 0, got {max_abs}")
    return rewards.clamp(-max_abs, max_abs)


def scores_to_token_rewards(scores: Tensor, mask: Tensor) -> Tensor:
    """Token rewards [B, T]: score s_i [B] on the last valid token of row i, 0 elsewhere.

    Rows with no valid token get no reward.
    """
    valid = mask.bool()  # [B, T]
    positions = torch.arange(valid.shape[-1], device=valid.device).expand_as(valid)  # [B, T]
    last = torch.where(valid, positions, -1).max(dim=-1).values  # [B], -1 if empty
    is_last = (positions == last.unsqueeze(-1)) & valid  # [B, T]
    token_rewards = torch.zeros(valid.shape, dtype=scores.dtype, device=scores.device)
    return torch.where(is_last, scores.unsqueeze(-1), token_rewards)  # [B, T]
