"""Offline distillation's `Objective` on the shared update loop: the divergence to the
teacher's top-k distribution mixed with the SFT loss (algorithms/distill/offline_loss.py).

The student's outputs come from `TopKHead` (workers/strategies/topk_head.py): [b, L, 1 + k],
its log-prob of each row's own token, then its log-probs at the teacher's k tokens; the
teacher's log-probs ride the micro-batch as the extra TOPK_LOG_PROBS. Both terms are
divided by the mini-batch's global token count (token-mean, as ROLL's; actor_train's
loss_agg_mode is RL's and refused here), so the gradient does not depend on how the batch
is cut into micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flywheel.algorithms.distill import DivergenceParams, distill_loss
from flywheel.config.schema import PipelineConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.topk_head import TOPK_LOG_PROBS
from flywheel.workers.strategies.train_loop import Counts


@dataclass(frozen=True)
class DistillObjective:
    divergence: str
    distill_loss_weight: float
    support: str
    params: DivergenceParams
    loss_agg_mode: str
    needs_entropy: bool = False

    @classmethod
    def of(cls, cfg: PipelineConfig) -> DistillObjective:
        return cls(cfg.kd_objective, cfg.distill_loss_weight, cfg.kd_support,
                   DivergenceParams(cfg.adaptive_kl_alpha, cfg.skew_lambda),
                   "token-mean")  # ROLL divides each sum by the token count

    def __call__(self, outputs: torch.Tensor, entropy: torch.Tensor | None,
                 micro: TokenBatch, counts: Counts) -> tuple[torch.Tensor, dict[str, float]]:
        return distill_loss(micro.extra(TOPK_LOG_PROBS), outputs[..., 1:], outputs[..., 0],
                            micro.response_mask, divergence=self.divergence,
                            distill_loss_weight=self.distill_loss_weight,
                            support=self.support, params=self.params,
                            loss_agg_mode=self.loss_agg_mode,
                            global_num_tokens=counts.num_tokens,
                            global_num_seqs=counts.num_seqs)
