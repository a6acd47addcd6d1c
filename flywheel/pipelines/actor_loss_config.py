"""Config fields → the actor's loss object (kept apart so the pipeline file stays a loop)."""

from __future__ import annotations

from flywheel.algorithms import PolicyLossParams
from flywheel.platform.config.schema import PipelineConfig
from flywheel.workers.actor_loss import ActorLoss


def build_actor_loss(cfg: PipelineConfig) -> ActorLoss:
    at = cfg.actor_train
    params = PolicyLossParams(
        pg_clip=cfg.pg_clip, use_pg_clip_range=cfg.use_pg_clip_range,
        pg_clip_low=cfg.pg_clip_low, pg_clip_high=cfg.pg_clip_high,
        dual_clip_loss=cfg.dual_clip_loss, dual_clip_c=cfg.dual_clip_c,
        tis_lower_bound=at.tis_lower_bound, tis_upper_bound=at.tis_upper_bound,
        topr_positive_weight=at.topr_positive_weight,
        topr_negative_weight=at.topr_negative_weight,
        cispo_epsilon_low=at.cispo_epsilon_low, cispo_epsilon_high=at.cispo_epsilon_high,
        cispo_use_unified_mask=at.cispo_use_unified_mask, kimi15_tau=at.kimi15_tau,
    )
    return ActorLoss(
        pg_variant=at.pg_variant, params=params, loss_agg_mode=at.loss_agg_mode,
        kl_loss_coef=cfg.kl_loss_coef if cfg.use_kl_loss else 0.0,
        kl_loss_type=cfg.kl_loss_type, entropy_loss_coef=cfg.entropy_loss_coef,
    )
