"""KL to the reference policy: per-token estimators, as a loss term or as a reward penalty,
and the coefficient controllers.

Estimators of KL(π_θ ‖ π_ref) per sampled token, Δ = ℓ - ℓ_ref (Schulman 2020,
"Approximating KL Divergence", http://joschu.net/blog/kl-approx.html):

    k1   Δ                              unbiased, high variance, can be negative
    abs  |Δ|
    k2   ½·Δ²                           biased, low variance
    k3   exp(-Δ) - (-Δ) - 1             unbiased, low variance, always ≥ 0

Two ways to use it (pick one per pipeline):
  * loss term (GRPO, arXiv 2402.03300): `kl_loss` adds kl_loss_coef · agg(KL) to the loss;
  * reward penalty (Ziegler et al. 2019, arXiv 1909.08593): `apply_kl_penalty` subtracts
    kl_coef · KL_t from the token rewards, with kl_coef from a `FixedKLController` or an
    `AdaptiveKLController`.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import Count, aggregate_loss, masked_mean
from flywheel.algorithms.sampled_distribution import OUTSIDE_LOGIT

KLEstimator = Literal["k1", "k2", "k3", "abs"]
KL_ESTIMATORS: tuple[str, ...] = get_args(KLEstimator)


def kl_estimate(log_probs: Tensor, ref_log_probs: Tensor, estimator: str) -> Tensor:
    """Per-token KL estimate [B, T] from ℓ and ℓ_ref [B, T]; see the module docstring.

    A token the policy gives probability 0 (outside its top-k / top-p kept set at the
    current weights: ℓ = OUTSIDE_LOGIT, algorithms/sampled_distribution.py) is outside the
    support of π_θ: it adds π_θ(a) log(π_θ(a) / π_ref(a)) = 0 to KL(π_θ ‖ π_ref) and has no
    gradient, so its estimate is 0, not ~1e4 (k1) or exp(1e4) = inf (k3). It happens once
    the policy has moved off the weights that sampled the token (a later mini-batch, or
    generation running ahead)."""
    delta = log_probs - ref_log_probs  # [B, T], Δ = ℓ - ℓ_ref
    outside = log_probs < OUTSIDE_LOGIT / 2  # [B, T], π_θ(a) = 0
    # zeroed before the estimator, so no inf is formed whose gradient would be nan
    delta = torch.where(outside, torch.zeros_like(delta), delta)
    if estimator == "k1":
        return delta
    if estimator == "abs":
        return delta.abs()
    if estimator == "k2":
        return 0.5 * delta**2
    if estimator == "k3":
        return torch.exp(-delta) + delta - 1.0  # exp(ℓ_ref - ℓ) - (ℓ_ref - ℓ) - 1
    raise ValueError(f"unknown KL estimator {estimator!r}; known: {KL_ESTIMATORS}")


def kl_loss(
    log_probs: Tensor,
    ref_log_probs: Tensor,
    mask: Tensor,
    kl_loss_coef: float,
    *,
    estimator: str = "k3",
    loss_agg_mode: str = "seq-mean-token-mean",
    global_num_tokens: Count | None = None,
    global_num_seqs: Count | None = None,
    norm_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """KL penalty as a loss term: kl_loss_coef · aggregate(KL_t). ℓ_ref is a constant."""
    valid = mask.bool()  # [B, T]
    ref = torch.where(valid, ref_log_probs, log_probs).detach()  # [B, T], KL = 0 on padding
    kl = kl_estimate(log_probs, ref, estimator)  # [B, T]
    kl_agg = aggregate_loss(kl, valid, loss_agg_mode, global_num_tokens=global_num_tokens,
                            global_num_seqs=global_num_seqs,
                            norm_length=norm_length)
    loss = kl_loss_coef * kl_agg
    # named apart from the penalty's kl/penalty_mean: this is the policy being trained,
    # that the sampling policy; both can be on in one step
    metrics = {"kl/loss": loss.item(), "kl/loss_mean": masked_mean(kl.detach(), valid).item()}
    return loss, metrics


@torch.no_grad()
def apply_kl_penalty(
    token_scores: Tensor,
    log_probs: Tensor,
    ref_log_probs: Tensor,
    mask: Tensor,
    kl_coef: float,
    estimator: str = "k1",
) -> tuple[Tensor, dict[str, float]]:
    """Token rewards r_t = score_t - kl_coef · KL_t on valid tokens, all [B, T].

    metrics["kl/penalty_mean"] is the batch mean of each sequence's mean token KL: the
    `current_kl` to feed to `AdaptiveKLController.update` (the KL the penalty acts on,
    not the KL loss's, which exists only with use_kl_loss).
    """
    valid = mask.bool()  # [B, T]
    kl = torch.where(valid, kl_estimate(log_probs, ref_log_probs, estimator), 0.0)  # [B, T]
    token_rewards = token_scores - kl_coef * kl  # [B, T]
    seq_kl = kl.sum(-1) / valid.sum(-1).clamp_min(1)  # [B]
    has_tokens = valid.any(-1)  # [B]
    current_kl = masked_mean(seq_kl, has_tokens).item()
    return token_rewards, {"kl/penalty_mean": current_kl, "kl/coef": float(kl_coef)}


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, init_kl_coef: float) -> None:
        self.value: float = init_kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op; present so both controllers are interchangeable."""


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, arXiv 1909.08593):

        e_t = clip(KL_t / KL_target - 1, -0.2, 0.2)
        β_{t+1} = β_t · (1 + K_β · e_t),   K_β = n_steps / horizon

    β rises when the measured KL is above the target and falls when it is below.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0, got {target_kl}, {horizon}")
        self.target_kl: float = target_kl
        self.horizon: float = horizon
        self.value: float = init_kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon
