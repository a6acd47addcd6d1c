"""A pipeline kind and an advantage estimator from outside flywheel's catalogs
(tests/pipelines/test_registration.py registers them with `register_kind` and
`register_estimator`, as docs_site/docs/extending/pipeline-kinds.md says): RLVR whose rollout
attaches two batch extras (one per sample, one per token) and whose loss reads both, so the
metrics `user/row_mark` and `user/token_mark` say the extras reached the loss in the
training worker; and an estimator giving every sample the advantage `ADVANTAGE`, so
`advantages/mean` says it ran."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from flywheel.pipelines.loop.actor_loss_config import build_actor_loss
from flywheel.pipelines.rlvr.rollout import RLVRRollout
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import TokenBatch

ROW_MARK = 0.75
TOKEN_MARK = 0.5
ADVANTAGE = 0.25


def constant_advantages(scores: torch.Tensor, group_size: int, *, norm_mean_type: str,
                        norm_std_type: str) -> torch.Tensor:
    return torch.full_like(scores, ADVANTAGE, dtype=torch.float32)  # [N]


class MarkedRollout(RLVRRollout):
    def add_advantages(self, batch: TokenBatch, kl_coef: float) -> dict[str, float]:
        metrics = super().add_advantages(batch, kl_coef)
        batch.attach("row_mark", torch.full((len(batch),), ROW_MARK), per="sample")
        batch.attach("token_mark", batch.response_mask * TOKEN_MARK, per="token")
        return metrics


def start_marked(cfg, roles, tokenizer, prompts, model_path, log_dir) -> MarkedRollout:
    return MarkedRollout(cfg, roles, tokenizer, prompts.train, prompts.validation,
                         image_encoder=prompts.image_encoder,
                         val_image_encoder=prompts.val_image_encoder)


@dataclass(frozen=True)
class MarkedLoss:
    """The policy-gradient loss, plus what the batch's extras held on this micro-batch."""

    inner: ActorLoss
    needs_entropy: bool = False

    def __call__(self, log_probs, entropy, micro: TokenBatch, counts):
        loss, metrics = self.inner(log_probs, entropy, micro, counts)
        mask = micro.response_mask  # [b, L]
        token = (micro.extra("token_mark") * mask).sum() / mask.sum().clamp(min=1)
        return loss, {**metrics, "user/row_mark": float(micro.extra("row_mark").mean()),
                      "user/token_mark": float(token)}


def build_marked_loss(cfg) -> MarkedLoss:
    inner = build_actor_loss(cfg)
    return MarkedLoss(inner, needs_entropy=inner.needs_entropy)


def marked_kind(rlvr):
    """The RLVR entry with this module's rollout and loss (what register_kind is given)."""
    return dataclasses.replace(rlvr, rollout="tests.pipelines.user_kind:start_marked",
                               loss="tests.pipelines.user_kind:build_marked_loss",
                               title="marked RLVR", doc="RLVR with batch extras")
