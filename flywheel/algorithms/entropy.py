"""Token entropy of the policy and the entropy bonus.

    H_t = -Σ_v p_v log p_v = logsumexp(z) - Σ_v softmax(z)_v · z_v      (z: logits)

The bonus *subtracts* entropy_loss_coef · aggregate(H) from the loss (maximising entropy),
aggregated with the same `loss_agg_mode` as the policy loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import Count, aggregate_loss, masked_mean


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy [B, T] of the categorical distributions given by logits [B, T, V]."""
    probs = torch.softmax(logits, dim=-1)  # [B, T, V]
    safe_logits = torch.where(probs > 0, logits, 0.0)  # [B, T, V], so 0·(-inf) := 0
    p_z = probs * safe_logits  # [B, T, V]
    return torch.logsumexp(logits, dim=-1) - p_z.sum(dim=-1)  # [B, T]


def entropy_loss(
    entropy: Tensor,
    mask: Tensor,
    entropy_loss_coef: float,
    *,
    loss_agg_mode: str = "seq-mean-token-mean",
    global_num_tokens: Count | None = None,
    global_num_seqs: Count | None = None,
    norm_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Entropy bonus as a loss term: -entropy_loss_coef · aggregate(H) from H [B, T]."""
    valid = mask.bool()  # [B, T]
    h = aggregate_loss(entropy, valid, loss_agg_mode, global_num_tokens=global_num_tokens,
                       global_num_seqs=global_num_seqs,
                       norm_length=norm_length)
    loss = -entropy_loss_coef * h
    metrics = {"entropy/loss": loss.item(), "entropy/mean": masked_mean(entropy.detach(),
                                                                        valid).item()}
    return loss, metrics
