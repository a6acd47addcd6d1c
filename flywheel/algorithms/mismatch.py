"""Off-policy correction: the behaviour policy against the proximal one.

Two policies stand behind every trained token. The behaviour policy π_behav sampled it:
actor_infer's weights at generation time, through the sampler's kernels (vLLM, SGLang,
...), with log-prob ℓ_infer recorded per token. The proximal policy π_prox is actor_train
before this update; its log-prob ℓ_old is computed now, and the PPO clip is taken
against it. The two differ by *staleness* (with async_generation_ratio > 0 or partial
rollout, π_behav is an older version) and by *kernel mismatch* (even at ratio 0: other
kernels, precision, MoE routing). Decoupled PPO (Hilton et al. 2022, "Batch size-invariance
for policy optimization"; used by AReaL) weights each token by π_prox / π_behav:

    token level:     w_t = exp(ℓ_old,t - ℓ_infer,t)
    sequence level:  w_i = exp(Σ_t m_t·(ℓ_old,t - ℓ_infer,t)), shared by the tokens of row i

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
from flywheel.algorithms.infer_filter import TrainInferFilter, train_infer_filter

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
    metrics: offpolicy/ratio_mean, _max, _min (over valid tokens, or non-empty sequences at
    sequence level), offpolicy/masked_frac and offpolicy/truncated_frac (fractions of valid
    tokens zeroed / truncated), offpolicy/weight_mean, and offpolicy/k3_kl, the k3 estimate
    of KL(π_infer ‖ π_train) per token. The namespace says what the ratio holds: with
    generation ahead of training, π_infer is an older policy, so it measures staleness and
    kernel mismatch together (Hilton et al. 2022's behaviour / proximal split).
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
        "offpolicy/ratio_mean": picked.mean().item() if picked.numel() else 0.0,
        "offpolicy/ratio_max": picked.max().item() if picked.numel() else 0.0,
        "offpolicy/ratio_min": picked.min().item() if picked.numel() else 0.0,
        "offpolicy/masked_frac": masked_mean(dropped.float(), valid).item(),
        "offpolicy/truncated_frac": masked_mean(truncated.float(), valid).item(),
        "offpolicy/weight_mean": masked_mean(weights, valid).item(),
        "offpolicy/k3_kl": masked_mean(k3, valid).item(),
    }
    return weights, metrics


@dataclass(frozen=True)
class MismatchCorrection:
    """The pipeline's `infer_is_correction` setting and its train/infer filter
    (infer_filter.py), applied to a batch wherever the old log-probs are computed: on the
    driver, or inside actor_train's train call."""

    level: str = "token"
    mode: str = "truncate"
    lower: float = 0.5
    upper: float = 2.0
    apply: bool = False  # False: report the mismatch metrics, leave the loss unweighted
    weigh: bool = True  # False: the IS weight is 1 (a filter alone, as ROLL's without is_weight)
    filter: TrainInferFilter | None = None  # tokens it drops get weight 0

    def __call__(self, old_log_probs: Tensor, infer_log_probs: Tensor, mask: Tensor
                 ) -> tuple[Tensor | None, dict[str, float]]:
        """The per-token weights [B, T] to put on the loss (None without `apply`) from the
        old and the sampled log-probs [B, T], and the metrics."""
        weights, metrics = train_infer_mismatch_weights(
            old_log_probs, infer_log_probs, mask, level=self.level,
            mode=self.mode, lower=self.lower, upper=self.upper)
        if not self.weigh:
            weights = mask.float()  # [B, T]
        if self.filter is not None:
            keep, filtered = train_infer_filter(old_log_probs, infer_log_probs, mask,
                                                self.filter)
            weights = weights * keep  # [B, T]
            metrics.update(filtered)
        return (weights if self.apply else None), metrics
