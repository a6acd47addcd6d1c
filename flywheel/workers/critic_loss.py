"""The critic's objective: the (optionally clipped) PPO value loss against GAE returns.

Reads `values` (the critic's, before this update) and `returns` that the pipeline put on
the batch; built once from
config (`value_clip`) and handed to the critic's training backend like the actor's loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flywheel.algorithms import value_loss
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.train_loop import Counts


@dataclass(frozen=True)
class CriticLoss:
    value_clip: float | None = None
    loss_agg_mode: str = "token-mean"
    needs_entropy: bool = False

    def __call__(self, values: torch.Tensor, entropy: torch.Tensor | None, micro: TokenBatch,
                 counts: Counts) -> tuple[torch.Tensor, dict[str, float]]:
        return value_loss(values, micro.values, micro.returns,
                          micro.response_mask, self.value_clip, self.loss_agg_mode,
                          global_num_tokens=counts.num_tokens,
                          global_num_seqs=counts.num_seqs)
