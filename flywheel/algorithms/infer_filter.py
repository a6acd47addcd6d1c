"""Train/infer filter: drop the tokens where trainer and sampler disagree too much.

ROLL's `train_infer_correction.filters` (roll/utils/train_infer_corrections.py): from the
trainer's log-probs ℓ_old and the sampler's ℓ_infer of the same tokens, two disagreement
measures per token,

    ratio   r_t = exp(ℓ_old,t − ℓ_infer,t)          (π_old / π_infer)
    diff    d_t = exp(ℓ_old,t) − exp(ℓ_infer,t)     (π_old − π_infer, a probability difference)

are aggregated at one level and every token whose aggregate leaves a band [low, high]
loses its loss (weight 0):

    token       r_t, d_t as they are
    sequence    exp(Σ_t m_t·log r_t), Σ_t m_t·d_t over the row's model tokens
    geometric   exp(mean_t log r_t), mean_t d_t over the row's model tokens
    segment     the geometric / mean values over each run of consecutive model tokens (one
                turn of a multi-turn episode, whose observations interrupt the mask)

A token is kept when every band given holds (ratio and difference). The difference band
catches what the ratio misses at low probability: a token the sampler drew at 1e-4 and the
trainer gives 3e-4 has ratio 3 but moves no probability mass. The keep mask is 0/1 and
carries no gradient; MismatchCorrection (mismatch.py) multiplies it into the loss weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import masked_mean

FILTER_LEVELS = ("token", "sequence", "geometric", "segment")
LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class TrainInferFilter:
    level: str  # one of FILTER_LEVELS
    ratio_band: tuple[float, float] | None = None  # [low, high] on the aggregated ratio
    diff_band: tuple[float, float] | None = None  # [low, high] on the aggregated difference

    def __post_init__(self) -> None:
        if self.level not in FILTER_LEVELS:
            raise ValueError(f"level must be one of {FILTER_LEVELS}, got {self.level!r}")
        if self.ratio_band is None and self.diff_band is None:
            raise ValueError("a filter needs a ratio band, a difference band or both")
        for band in (self.ratio_band, self.diff_band):
            if band is not None and not band[0] <= band[1]:
                raise ValueError(f"a band is [low, high] with low <= high, got {band}")


def segment_mean(values: Tensor, valid: Tensor) -> Tensor:
    """[B, T]: at each valid position, the mean of `values` over its run of consecutive
    valid positions; 0 elsewhere."""
    previous = torch.cat([torch.zeros_like(valid[:, :1]), valid[:, :-1]], dim=1)  # [B, T]
    starts = valid & ~previous  # [B, T], first token of each run
    run = torch.cumsum(starts.long(), dim=1) * valid  # [B, T], run id 1.., 0 outside
    width = values.shape[1] + 1
    sums = torch.zeros(values.shape[0], width, dtype=values.dtype, device=values.device)
    sums.scatter_add_(1, run, torch.where(valid, values, 0.0))  # [B, T + 1]
    counts = torch.zeros_like(sums).scatter_add_(1, run, valid.to(values.dtype))  # [B, T + 1]
    means = sums / counts.clamp(min=1)  # [B, T + 1]
    return torch.where(valid, means.gather(1, run), 0.0)  # [B, T]


def _aggregate(values: Tensor, valid: Tensor, level: str) -> Tensor:
    """values [B, T] at `level`, broadcast back to [B, T]."""
    values = torch.where(valid, values, 0.0)  # [B, T]
    if level == "token":
        return values
    if level == "segment":
        return segment_mean(values, valid)
    total = values.sum(-1, keepdim=True)  # [B, 1]
    if level == "geometric":
        total = total / valid.sum(-1, keepdim=True).clamp(min=1)  # [B, 1]
    return total.expand_as(values)  # [B, T]


@torch.no_grad()
def train_infer_filter(log_probs: Tensor, infer_log_probs: Tensor, mask: Tensor,
                       rule: TrainInferFilter) -> tuple[Tensor, dict[str, float]]:
    """(keep [B, T], 1.0 where a valid token passes every band, else 0.0; metrics).

    metrics: offpolicy/filter_kept_frac (kept share of valid tokens) and
    offpolicy/prob_diff_mean (the token difference d_t, mean over valid tokens)."""
    valid = mask.bool()  # [B, T]
    log_ratio = torch.where(valid, log_probs - infer_log_probs, 0.0)  # [B, T]
    diff = torch.where(valid, log_probs.exp() - infer_log_probs.exp(), 0.0)  # [B, T]
    keep = valid.clone()  # [B, T]
    if rule.ratio_band is not None:
        ratio = torch.exp(_aggregate(log_ratio, valid, rule.level).clamp(
            -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # [B, T]
        keep &= (ratio >= rule.ratio_band[0]) & (ratio <= rule.ratio_band[1])
    if rule.diff_band is not None:
        level_diff = _aggregate(diff, valid, rule.level)  # [B, T]
        keep &= (level_diff >= rule.diff_band[0]) & (level_diff <= rule.diff_band[1])
    metrics = {"offpolicy/filter_kept_frac": masked_mean(keep.float(), valid).item(),
               "offpolicy/prob_diff_mean": masked_mean(diff, valid).item()}
    return keep.float(), metrics
