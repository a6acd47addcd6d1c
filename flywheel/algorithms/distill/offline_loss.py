"""Offline distillation's loss: a divergence to the teacher mixed with the SFT loss.

    L = (1 − w) · agg(−log q_θ(y_t)) + w · agg(D(p_T ‖ q_θ)_t)

over the response tokens of a fixed (prompt, response) dataset: the first term is the SFT
negative log-likelihood of the dataset's tokens, the second the chosen divergence
(divergences.py) between the teacher's top-k distribution and the student's at each
position; w is ROLL's `distill_loss_weight` (its default 0.5; w = 1: pure distillation,
w = 0: plain SFT). Both terms go through `aggregate_loss`, so `loss_agg_mode` and the
global counts of gradient accumulation mean what they mean for every other loss (ROLL
divides each sum by the batch's token count: token-mean).
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import Count, aggregate_loss, masked_mean
from flywheel.algorithms.distill.divergences import (
    DEFAULT_PARAMS,
    DivergenceParams,
    token_divergence,
)


def distill_loss(
    teacher_topk_log_probs: Tensor,
    student_topk_log_probs: Tensor,
    label_log_probs: Tensor,
    mask: Tensor,
    *,
    divergence: str,
    distill_loss_weight: float,
    support: str = "tail",
    params: DivergenceParams = DEFAULT_PARAMS,
    loss_agg_mode: str = "token-mean",
    global_num_tokens: Count | None = None,
    global_num_seqs: Count | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The scalar loss and its metrics; see the module docstring.

    teacher_topk_log_probs  [B, T, k] the teacher's log-probs of its k most likely tokens
    student_topk_log_probs  [B, T, k] the student's at the same indices (with gradient)
    label_log_probs         [B, T] the student's log-prob of the dataset's token (with gradient)
    mask                    [B, T] nonzero where the loss applies (the response tokens)
    """
    if not 0.0 <= distill_loss_weight <= 1.0:
        raise ValueError(f"distill_loss_weight must be in [0, 1], got {distill_loss_weight}")
    valid = mask.bool()  # [B, T]
    div = token_divergence(teacher_topk_log_probs, student_topk_log_probs, divergence,
                           support=support, params=params)  # [B, T]
    nll = -label_log_probs  # [B, T]
    counts = dict(global_num_tokens=global_num_tokens, global_num_seqs=global_num_seqs)
    sft = aggregate_loss(nll, valid, loss_agg_mode, **counts)
    kd = aggregate_loss(div, valid, loss_agg_mode, **counts)
    loss = (1.0 - distill_loss_weight) * sft + distill_loss_weight * kd
    with torch.no_grad():
        metrics = {"distill/loss": float(loss), "distill/sft_loss": float(sft),
                   "distill/divergence": float(masked_mean(div, valid))}
    return loss, metrics
