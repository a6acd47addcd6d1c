"""Scored groups → the token batch actor_train learns from.

Order of operations follows the usual RLVR recipe: sequence scores (optionally clipped)
→ optional KL-to-reference reward penalty (token level, k1 by default, fixed or adaptive
coefficient) → advantages → optional whitening and clipping. For grpo / reinforce the
advantage is per sample, broadcast over response tokens, plus the reward-to-go of the KL
penalty so the penalty shapes the advantage of the tokens that caused it; for gae the
score sits on the last token and GAE runs against the critic's values. An agentic episode
row (`batch.turn_rewards`) puts each turn's reward on that turn's last model token
instead, so a turn's format penalty or tool reward is discounted by the tokens after it
in its own turn only, not by every later turn's (Schulman et al. 2016: r_t at the step
that earned it).
"""

from __future__ import annotations

import bisect

import torch

from flywheel.algorithms import (
    advantage_clip,
    apply_kl_penalty,
    compute_gae,
    masked_mean,
    reward_clip,
    scores_to_token_rewards,
    whiten_advantages,
)
from flywheel.algorithms.estimators import estimator_spec, sample_estimator
from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.rlvr.generation import Group
from flywheel.workers.batch import TokenBatch, pack_sequences


def pack_groups(groups: list[Group], pad_id: int) -> TokenBatch:
    prompts = [g.prompt_ids for g in groups for _ in g.responses]
    responses = [r.token_ids for g in groups for r in g.responses]
    infer_lp = [r.log_probs for g in groups for r in g.responses]
    batch = pack_sequences(prompts, responses, pad_id, infer_lp)
    batch.scores = torch.tensor([s for g in groups for s in g.scores])
    batch.version = torch.tensor([g.version for g in groups for _ in g.responses])
    batch.truncated = torch.tensor([r.finish_reason == "length" for g in groups
                                    for r in g.responses])
    return batch


def place_turn_rewards(row: torch.Tensor, response_mask: torch.Tensor,
                       turn_spans: list[tuple[int, int]], rewards: list[float]) -> None:
    """Write each turn's reward into `row` [L] at the turn's last model token; a turn that
    generated nothing puts its reward on the closest model token before it (after it when
    there is none), so no reward is lost while the row has one model token."""
    model = response_mask.nonzero().flatten().tolist()  # model-token columns, ascending
    if not model:
        return
    for (_, end), reward in zip(turn_spans, rewards):
        before = bisect.bisect_left(model, end)  # model tokens left of `end`
        row[model[before - 1] if before else model[0]] += float(reward)


def _clipped(rewards: torch.Tensor, clip: float | None) -> torch.Tensor:
    return rewards if clip is None else reward_clip(rewards, clip)


def add_advantages(batch: TokenBatch, cfg: PipelineConfig, group_size: int,
                   kl_coef: float) -> dict[str, float]:
    """Fill batch.advantages [B, L]; returns metrics (incl. kl/penalty_mean for the KL ctl)."""
    mask = batch.response_mask  # [B, L]
    scores = batch.scores.float()  # [B]
    if cfg.reward_clip is not None:
        scores = reward_clip(scores, cfg.reward_clip)
    metrics: dict[str, float] = {}
    penalty = torch.zeros_like(mask)  # [B, L] token rewards from the KL penalty (≤ 0 for k1>0)
    if kl_coef > 0:
        penalty, kl_metrics = apply_kl_penalty(penalty, batch.old_log_probs,
                                               batch.ref_log_probs, mask, kl_coef,
                                               cfg.kl_penalty)
        metrics.update(kl_metrics)
    spec = estimator_spec(cfg.adv_estimator)  # algorithms/estimators.py
    if spec.rows == "token":
        # Outcome score on the last response token, KL penalty on every token, then GAE
        # against the critic's values (Schulman et al. 2016).
        outcome = scores_to_token_rewards(scores, mask) if batch.turn_rewards is None else (
            _clipped(batch.turn_rewards.float(), cfg.reward_clip) * mask)  # [B, L]
        token_rewards = outcome + penalty * mask  # [B, L]
        advantages, returns = compute_gae(token_rewards, batch.values, mask,
                                          cfg.gamma, cfg.lambd)
        batch.returns = returns
    else:
        adv = sample_estimator(spec.fn)(scores, group_size,
                                        norm_mean_type=cfg.norm_mean_type,
                                        norm_std_type=cfg.norm_std_type)  # [B]
        # Reward-to-go of the per-token KL penalty keeps it causal.
        to_go = torch.flip(torch.cumsum(torch.flip(penalty * mask, [1]), 1), [1])  # [B, L]
        advantages = (adv[:, None] + to_go) * mask  # [B, L]
    if cfg.whiten_advantages:
        advantages = whiten_advantages(advantages, mask)
    if cfg.advantage_clip is not None:
        advantages = advantage_clip(advantages, cfg.advantage_clip)
    batch.advantages = advantages * mask
    valid = mask.bool()  # none when every sample is masked (rlvr/sample_masks.py)
    metrics["advantages/mean"] = float(masked_mean(batch.advantages, valid))
    metrics["advantages/abs_mean"] = float(masked_mean(batch.advantages.abs(), valid))
    return metrics
