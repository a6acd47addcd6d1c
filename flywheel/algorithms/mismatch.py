"""Train/infer mismatch correction.

The sampler (actor_infer: vLLM, SGLang, ...) and the trainer compute slightly different
probabilities for the same tokens (kernels, precision, MoE routing), so rollouts are
off-policy even at `async_generation_ratio = 0`. With ℓ_train the trainer's log-probs of
the rollout under the behaviour weights and ℓ_infer the sampler's, the importance weight is

    token level:     w_t = exp(ℓ_train,t - ℓ_infer,t)
    sequence level:  w_i = exp(Σ_t m_t·(ℓ_train,t - ℓ_infer,t)), shared by the tokens of row i

and one of two corrections turns it into a constant per-token weight for the policy loss
(pass it as `compute_policy_loss(..., token_weights=weights)`):

    truncate  min(w, upper)                  truncated IS (TIS; Yao et al. 2025, "Your
                                             Efficient RL Framework Secretly Brings You
                                             Off-Policy RL Training")
    mask      w if lower ≤ w ≤ upper else 0  IcePop-style masking (Ling Team 2025, Ring-1T):
                                             drop the tokens / sequences that disagree most

Weights are 0 on masked positions and carry no gradient. Ratios are formed in log space and
the log-ratio is clamped to ±LOG_RATIO_CLAMP before exp, so a long sequence cannot overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import masked_mean

LOG_RATIO_CLAMP = 20.0
LEVELS = ("token", "sequence")
MODES = ("truncate", "mask")


@torch.no_grad()
def train_infer_mismatch_weights(
    log_probs: Tensor,
    infer_log_probs: Tensor,
    mask: Tensor,
    *,
    level: str = "token",
    mode: str = "truncate",
    lower: float = 0.5,
    upper: float = 2.0,
) -> tuple[Tensor, dict[str, float]]:
    """(weights [B, T], metrics) from trainer and sampler log-probs [B, T]; see module doc.

    `lower` is used by mode "mask" only.
    metrics: mismatch/ratio_mean, _max, _min (over valid tokens, or non-empty sequences at
    sequence level), mismatch/masked_frac and mismatch/truncated_frac (fractions of valid
    tokens zeroed / truncated), mismatch/weight_mean, and mismatch/k3_kl, the k3 estimate
    of KL(π_infer ‖ π_train) per token.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not 0 <= lower <= upper:
        raise ValueError(f"need 0 <= lower <= upper, got lower={lower}, upper={upper}")
    valid = mask.bool()  # [B, T]
    token_log_ratio = torch.where(valid, log_probs - infer_log_probs, 0.0)  # [B, T]

    if level == "token":
        log_ratio = token_log_ratio  # [B, T]
    else:
        log_ratio = token_log_ratio.sum(-1, keepdim=True).expand_as(token_log_ratio)  # [B, T]
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # [B, T]

    log_upper = math.log(upper) if upper > 0 else -math.inf
    if mode == "truncate":
        truncated = valid & (log_ratio > log_upper)  # [B, T]
        weights = torch.where(truncated, upper, ratio)  # [B, T], min(w, upper)
        dropped = torch.zeros_like(valid)  # [B, T]
    else:
        log_lower = math.log(lower) if lower > 0 else -math.inf
        dropped = valid & ((log_ratio < log_lower) | (log_ratio > log_upper))  # [B, T]
        weights = torch.where(dropped, 0.0, ratio)  # [B, T], w if lower ≤ w ≤ upper else 0
        truncated = torch.zeros_like(valid)  # [B, T]
    weights = torch.where(valid, weights, 0.0)  # [B, T]

    # Spread of w over its units: valid tokens, or non-empty rows (w is constant per row).
    picked = ratio[valid] if level == "token" else ratio[:, 0][valid.any(-1)]  # [n]
    k3 = torch.exp(token_log_ratio) - 1.0 - token_log_ratio  # [B, T], KL(infer ‖ train)
    metrics = {
        "mismatch/ratio_mean": picked.mean().item() if picked.numel() else 0.0,
        "mismatch/ratio_max": picked.max().item() if picked.numel() else 0.0,
        "mismatch/ratio_min": picked.min().item() if picked.numel() else 0.0,
        "mismatch/masked_frac": masked_mean(dropped.float(), valid).item(),
        "mismatch/truncated_frac": masked_mean(truncated.float(), valid).item(),
        "mismatch/weight_mean": masked_mean(weights, valid).item(),
        "mismatch/k3_kl": masked_mean(k3, valid).item(),
    }
    return weights, metrics


@dataclass(frozen=True)
class MismatchCorrection:
    """The pipeline's `infer_is_correction` setting, applied to a batch wherever the old
    log-probs are computed: on the driver, or inside actor_train's train call."""

    level: str = "token"
    mode: str = "truncate"
    lower: float = 0.5
    upper: float = 2.0
    apply: bool = False  # False: report the mismatch metrics, leave the loss unweighted

    def __call__(self, old_log_probs: Tensor, infer_log_probs: Tensor, mask: Tensor
                 ) -> tuple[Tensor | None, dict[str, float]]:
        """The per-token weights [B, T] to put on the loss (None without `apply`) from the
        old and the sampled log-probs [B, T], and the metrics."""
        weights, metrics = train_infer_mismatch_weights(
            old_log_probs, infer_log_probs, mask, level=self.level,
            mode=self.mode, lower=self.lower, upper=self.upper)
        return (weights if self.apply else None), metrics
