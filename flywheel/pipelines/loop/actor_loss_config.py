"""Config fields → the actor's loss object (kept apart so the pipeline file stays a loop)."""

from __future__ import annotations

from flywheel.algorithms import PolicyLossParams, get_policy_loss
from flywheel.algorithms.policy_loss.registry import policy_loss_spec
from flywheel.config.derived import loss_norm_length
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.catalogs import entry_settings
from flywheel.workers.actor_loss import ActorLoss


def build_actor_loss(cfg: PipelineConfig) -> ActorLoss:
    at = cfg.actor_train
    # a variant that declares settings of its own gets them (pg_variant_args) as its params
    own = entry_settings(policy_loss_spec(at.pg_variant).settings, at.pg_variant_args,
                         "actor_train.pg_variant_args", f"pg_variant {at.pg_variant}")
    params = PolicyLossParams.from_groups(cfg, at) if own is None else own
    return ActorLoss(
        pg_variant=at.pg_variant, params=params,
        loss_agg_mode=at.loss_agg_mode, norm_length=loss_norm_length(cfg),
        kl_loss_coef=cfg.kl_loss_coef if cfg.use_kl_loss else 0.0,
        kl_loss_type=cfg.kl_loss_type, entropy_loss_coef=cfg.entropy_loss_coef,
        policy_loss=get_policy_loss(at.pg_variant),  # here, where it was registered
    )
