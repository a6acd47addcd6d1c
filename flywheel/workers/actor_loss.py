"""The actor's objective: policy loss (+ KL to the reference) (+ entropy bonus).

Built once by the pipeline from config fields and handed to the training backend, which
calls it per micro-batch. It reads only tensors the pipeline put on the batch:
`advantages`, `old_log_probs`, and, when used, `ref_log_probs` and `is_weights` (the
train/infer mismatch correction, computed once per batch without gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flywheel.algorithms import (
    PolicyLossFn,
    PolicyLossParams,
    compute_policy_loss,
    entropy_loss,
    kl_loss,
)
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.train_loop import Counts


@dataclass(frozen=True)
class ActorLoss:
    pg_variant: str
    params: PolicyLossParams  # or the settings object of a variant that declares its own
    loss_agg_mode: str
    # seq-mean-token-sum-norm's constant (derived.loss_norm_length); unused by other modes
    norm_length: int | None = None
    kl_loss_coef: float = 0.0  # > 0 adds the KL-to-reference loss term
    kl_loss_type: str = "k3"
    entropy_loss_coef: float = 0.0
    # pg_variant's function, resolved where the variant was registered (the driver: a user's
    # register_policy_loss ran there, not in this worker); unset: this process's catalog.
    policy_loss: PolicyLossFn | None = None

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_loss_coef != 0.0

    def __call__(self, log_probs: torch.Tensor, entropy: torch.Tensor | None,
                 micro: TokenBatch, counts: Counts) -> tuple[torch.Tensor, dict[str, float]]:
        mask = micro.response_mask  # [b, L]
        agg = dict(loss_agg_mode=self.loss_agg_mode, global_num_tokens=counts.num_tokens,
                   global_num_seqs=counts.num_seqs, norm_length=self.norm_length)
        loss, metrics = compute_policy_loss(
            self.pg_variant, log_probs, micro.old_log_probs, micro.advantages, mask,
            scores=micro.scores, token_weights=micro.is_weights, params=self.params,
            loss_fn=self.policy_loss, **agg,
        )
        if self.kl_loss_coef:
            term, kl_metrics = kl_loss(log_probs, micro.ref_log_probs, mask,
                                       self.kl_loss_coef, estimator=self.kl_loss_type, **agg)
            loss, metrics = loss + term, {**metrics, **kl_metrics}
        if self.needs_entropy:
            term, ent_metrics = entropy_loss(entropy, mask, self.entropy_loss_coef, **agg)
            loss, metrics = loss + term, {**metrics, **ent_metrics}
        return loss, metrics
