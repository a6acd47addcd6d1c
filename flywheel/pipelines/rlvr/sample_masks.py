"""RLVR's loss masks on a packed batch: `max_len_mask` and `difficulty_mask` (ROLL's keys).

Applied at the start of the advantage phase (step 3 of the loop), after the step's
reward and length metrics were taken over every sample: a masked sample's rows of
`response_mask` become 0, so the policy loss (and the critic's value loss), the KL terms,
advantage whitening and the loss's token and sequence counts all leave it out, as ROLL's
`final_response_mask` does; its score still enters its group's GRPO baseline. The rules
themselves are algorithms/sample_masks.py. Agentic runs have no such masks (their keys
are refused there: config/acts_when/table.py).
"""

from __future__ import annotations

import torch

from flywheel.algorithms import difficulty_keep, mask_samples
from flywheel.config.schema import PipelineConfig
from flywheel.workers.batch import TokenBatch


def apply_sample_masks(batch: TokenBatch, cfg: PipelineConfig, group_size: int
                       ) -> dict[str, float]:
    """Zero the rows of the masked samples in batch.response_mask; metrics (samples):
    rollout/masked_truncated, rollout/masked_difficulty, rollout/loss_samples_frac."""
    if not (cfg.max_len_mask or cfg.difficulty_mask):
        return {}
    keep = torch.ones(len(batch), dtype=torch.bool)  # [B]
    metrics: dict[str, float] = {}
    if cfg.max_len_mask:
        cut = batch.truncated.bool()  # [B]
        keep &= ~cut
        metrics["rollout/masked_truncated"] = float(cut.sum())
    if cfg.difficulty_mask:
        inside = difficulty_keep(batch.scores, group_size, cfg.difficulty_low_threshold,
                                 cfg.difficulty_high_threshold)  # [B]
        keep &= inside
        metrics["rollout/masked_difficulty"] = float((~inside).sum())
    batch.response_mask = mask_samples(batch.response_mask, keep)  # [B, L]
    metrics["rollout/loss_samples_frac"] = float(keep.float().mean())
    return metrics
