"""Outcome-reward advantage estimators and advantage post-processing.

Samples are ordered group-contiguously: the `group_size` responses to prompt g are rows
g·group_size … (g+1)·group_size - 1. Advantages here are per-sample [N]; `compute_policy_loss`
broadcasts them over the response tokens. For per-token critics see `gae.py`.

    grpo       A_i = (s_i - mean_g(s)) / (std_g(s) + eps)    (Shao et al. 2024, arXiv 2402.03300)
    reinforce  A_i = (s_i - μ) / (σ + eps), μ and σ chosen by norm_mean_type / norm_std_type
               from {"batch", "group", "none"}; batch/batch is REINFORCE++ (Hu 2025,
               arXiv 2501.03262); group/none is Dr. GRPO's group-mean baseline
               (arXiv 2503.20783).

std is the population std (divide by n): the std of a group of one is 0, not NaN.
Zero-std sets: where the std used for normalisation is below `eps` (every score in that
group / batch is equal) the advantage is 0. Such a set carries no ranking signal, and
0 / (0 + eps) would otherwise amplify rounding noise in s - mean by 1/eps.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import masked_mean

AdvEstimator = Literal["grpo", "reinforce"]
NormType = Literal["batch", "group", "none"]
ADV_ESTIMATORS: tuple[str, ...] = get_args(AdvEstimator)
NORM_TYPES: tuple[str, ...] = get_args(NormType)


def compute_advantages(
    adv_estimator: str,
    scores: Tensor,
    group_size: int,
    *,
    norm_mean_type: str = "group",
    norm_std_type: str = "group",
    eps: float = 1e-6,
) -> Tensor:
    """Per-sample advantages [N] from per-sample scores [N]; see the module docstring.

    `grpo` always normalises by the group mean and std (norm_*_type are ignored);
    `reinforce` uses norm_mean_type / norm_std_type.
    """
    if adv_estimator not in ADV_ESTIMATORS:
        raise ValueError(f"unknown adv_estimator {adv_estimator!r}; known: {ADV_ESTIMATORS}")
    for name, value in (("norm_mean_type", norm_mean_type), ("norm_std_type", norm_std_type)):
        if value not in NORM_TYPES:
            raise ValueError(f"{name} must be one of {NORM_TYPES}, got {value!r}")
    if scores.dim() != 1 or group_size < 1 or scores.shape[0] % group_size != 0:
        raise ValueError(f"scores must be [N] with N a multiple of group_size={group_size}, "
                         f"got {tuple(scores.shape)}")
    if adv_estimator == "grpo":
        norm_mean_type = norm_std_type = "group"

    s = scores.detach() if scores.is_floating_point() else scores.detach().float()  # [N]
    advantages = s - _stat(s, group_size, norm_mean_type, "mean")  # [N]
    if norm_std_type != "none":
        std = _stat(s, group_size, norm_std_type, "std")  # [N]
        advantages = torch.where(std < eps, torch.zeros_like(s), advantages / (std + eps))
    return advantages


def _stat(s: Tensor, group_size: int, norm_type: str, stat: str) -> Tensor:
    """Mean or std of `s` [N] over its group or the batch, broadcast back to [N]."""
    if norm_type == "none":
        return torch.zeros_like(s)  # only reached for the mean
    grouped = s.reshape(-1, group_size) if norm_type == "group" else s.reshape(1, -1)  # [G, n]
    value = grouped.mean(-1) if stat == "mean" else grouped.std(-1, correction=0)  # [G]
    return value.repeat_interleave(grouped.shape[1])  # [N]


def whiten_advantages(
    advantages: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-8
) -> Tensor:
    """Masked whitening: (A - mean) / sqrt(var + eps) over the valid tokens of `mask`.

    mean and (population) var are taken over valid tokens only; masked positions are 0 in
    the output. With shift_mean=False the mean is added back (scale only), as in
    PPO-style implementations that keep the advantage sign distribution.
    """
    valid = mask.bool()  # [B, T]
    a = advantages.detach()  # [B, T]
    mean = masked_mean(a, valid)
    var = masked_mean((a - mean) ** 2, valid)
    whitened = (a - mean) * torch.rsqrt(var + eps)  # [B, T]
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(valid, whitened, torch.zeros_like(whitened))  # [B, T]


def advantage_clip(advantages: Tensor, max_abs: float) -> Tensor:
    """Clamp advantages to [-max_abs, max_abs] (any shape)."""
    if max_abs <= 0:
        raise ValueError(f"advantage clip must be > 0, got {max_abs}")
    return advantages.clamp(-max_abs, max_abs)
