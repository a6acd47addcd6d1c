"""Which samples carry loss: masks over whole samples, applied in place (nothing refilled).

Two rules ROLL's RLVR pipeline applies before advantages (its `get_sample_level_mask`):

- truncation (`max_len_mask`; TRL's `mask_truncated_completions`): a response the length
  limit cut off has no final answer, so its score says little about its tokens; masking it
  keeps a half-written answer from being pushed down as wrong (DAPO, arXiv 2503.14476,
  §3.4 "overlong filtering").
- difficulty (`difficulty_mask`): a group of G samples of one prompt is kept only when its
  mean score lies strictly between the bounds, low < mean_g < high (ROLL's rule: both
  bounds exclusive, so with the defaults 0 and 1 an all-wrong or all-right group goes).

A masked sample stays in the batch: its group's GRPO baseline still counts it (the
advantages are computed from every score), but its tokens carry no loss and count in no
denominator. Unlike the group filter (pipelines/loop/group_filter.py, DAPO's dynamic
sampling), nothing is dropped and nothing is generated to replace it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def difficulty_keep(scores: Tensor, group_size: int, low: float, high: float) -> Tensor:
    """[B] bool: True for the samples whose group (G = group_size contiguous rows) has a
    mean score strictly inside (low, high). With G = 1 there is no group: all are kept."""
    if group_size <= 1:
        return torch.ones_like(scores, dtype=torch.bool)
    if scores.numel() % group_size:
        raise ValueError(f"{scores.numel()} scores do not form groups of {group_size}")
    mean = scores.float().reshape(-1, group_size).mean(-1)  # [B/G]
    keep = (mean > low) & (mean < high)  # [B/G]
    return keep.repeat_interleave(group_size)  # [B]


def mask_samples(response_mask: Tensor, keep: Tensor) -> Tensor:
    """response_mask [B, T] with the rows of the samples not kept ([B] bool) zeroed."""
    return response_mask * keep.to(response_mask.dtype).unsqueeze(-1)  # [B, T]
