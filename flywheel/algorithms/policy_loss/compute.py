"""`compute_policy_loss`: the one entry point the trainer calls for the policy-gradient loss.

It checks shapes, makes everything except ℓ a constant, neutralises masked positions, runs
the selected variant to get a per-token loss, applies optional per-token weights (e.g. the
train/infer mismatch correction), aggregates, and reports metrics under `pg/`:

    pg/loss         this micro-batch's aggregated loss (summing micro-batches gives the
                    mini-batch loss when global counts are passed)
    pg/ratio_mean   mean of r = exp(ℓ - ℓ_old) over valid tokens; also pg/ratio_max, _min
    pg/approx_kl    k3 estimate of KL(π_old ‖ π_θ): mean of (r - 1) - log r (Schulman 2020)
    pg/clipfrac     fraction of valid tokens whose ratio/weight was clipped or truncated
    pg/outside_old_support  fraction of valid tokens π_old gives probability 0 (below)
    pg/...          variant-specific fractions (pg/dual_clipfrac, pg/cispo_masked_frac, ...)

Metrics are local to the micro-batch (token means over its valid tokens).
"""

from __future__ import annotations

import dataclasses
import inspect
from functools import cache

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import Count, aggregate_loss, masked_mean
from flywheel.algorithms.policy_loss.params import PolicyLossFn, PolicyLossParams
from flywheel.algorithms.policy_loss.registry import get_policy_loss
from flywheel.algorithms.sampled_distribution import OUTSIDE_LOGIT


def compute_policy_loss(
    pg_variant: str,
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    scores: Tensor | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
    global_num_tokens: Count | None = None,
    global_num_seqs: Count | None = None,
    norm_length: int | None = None,
    token_weights: Tensor | None = None,
    params: PolicyLossParams | None = None,
    loss_fn: PolicyLossFn | None = None,
    **hparams: float | bool,
) -> tuple[Tensor, dict[str, float]]:
    """Policy-gradient loss of `pg_variant`, aggregated by `loss_agg_mode`.

    Args:
        log_probs: ℓ [B, T], log π_θ of the response tokens; the only input with a gradient.
        old_log_probs: ℓ_old [B, T] under the proximal policy: actor_train's weights before
            this update, which the clip is taken against (detached here). With generation
            running ahead it is *not* the policy that sampled the tokens; the behaviour
            policy enters through `token_weights` (algorithms/mismatch.py).
        advantages: A [B, T] token-level, or [B] broadcast over tokens (detached here).
        response_mask: [B, T], nonzero where the token is trained on.
        scores: per-sample scores [B]; required by `topr` (positive if > 0).
        loss_agg_mode / global_num_tokens / global_num_seqs / norm_length: see
            `aggregate_loss`.
        token_weights: optional constant per-token weights [B, T] multiplied into the
            per-token loss before aggregation (e.g. `train_infer_mismatch_weights`: the
            decoupled-PPO weight π_prox / π_behav, staleness and kernel mismatch together).
        params: a `PolicyLossParams`; keyword `hparams` (its field names, e.g. pg_clip=0.3)
            override its fields. Unknown names raise TypeError. A variant that declares
            settings of its own (registry.py) gets its settings object here instead, as is.
        loss_fn: `pg_variant`'s function, when the caller resolved it already (in the
            process that registered the variant); unset: looked up in this process's catalog.

    Returns:
        (loss, metrics): the scalar loss and a dict of python floats under `pg/`.
    """
    if params is not None and not hparams:
        p = params
    else:
        base = {} if params is None else dataclasses.asdict(params)
        p = PolicyLossParams.from_kwargs(**{**base, **hparams})  # unknown names: TypeError
    loss_fn = loss_fn or get_policy_loss(pg_variant)
    advantages = _token_level(advantages, log_probs)
    if (log_probs.dim() != 2 or old_log_probs.shape != log_probs.shape
            or response_mask.shape != log_probs.shape):
        raise ValueError(
            f"log_probs {tuple(log_probs.shape)}, old_log_probs {tuple(old_log_probs.shape)} "
            f"and response_mask {tuple(response_mask.shape)} must all be [B, T]"
        )
    if scores is not None and scores.shape != log_probs.shape[:1]:
        raise ValueError(f"scores must be [B]={tuple(log_probs.shape[:1])}, got "
                         f"{tuple(scores.shape)}")

    valid = response_mask.bool()  # [B, T]
    # A sampled token outside π_old's top-k / top-p kept set (ℓ_old = OUTSIDE_LOGIT,
    # algorithms/sampled_distribution.py): the sampler kept it, so this is the old pass and
    # the sampler disagreeing at the edge of the set (bf16 rounding of a separate old-log-
    # prob pass), and r = π_θ/π_old = exp(~1e4) = inf. No ratio exists there: the token
    # takes no part in the loss (r = 1 and A = 0, like padding; it still counts in the
    # token means' denominators, as the global counts do) and is counted.
    outside_old = valid & (old_log_probs < OUTSIDE_LOGIT / 2)  # [B, T]
    neutral = ~valid | outside_old  # [B, T]
    # Constants, and neutral values at masked positions (r = 1, A = 0) so garbage in the
    # padding of old_log_probs / advantages cannot become inf/NaN in the loss or gradient.
    old_log_probs = torch.where(neutral, log_probs, old_log_probs).detach()  # [B, T]
    advantages = torch.where(neutral, torch.zeros_like(advantages), advantages).detach()
    # and no gradient through it (a sequence-level ratio would otherwise carry one)
    log_probs = torch.where(outside_old, log_probs.detach(), log_probs)  # [B, T]
    scores = None if scores is None else scores.detach()  # [B]

    # a sequence-level variant (gspo) declares `response_mask` to learn each row's length
    mask_arg = {"response_mask": valid} if takes_response_mask(loss_fn) else {}
    loss_mat, flags = loss_fn(log_probs, old_log_probs, advantages, scores, p,
                              **mask_arg)  # [B, T]
    if token_weights is not None:
        loss_mat = loss_mat * token_weights.detach()  # [B, T]
    loss = aggregate_loss(loss_mat, valid, loss_agg_mode, global_num_tokens=global_num_tokens,
                          global_num_seqs=global_num_seqs,
                          norm_length=norm_length)
    flags = {**flags, "pg/outside_old_support": outside_old}
    return loss, _metrics(loss, log_probs, old_log_probs, valid, flags)


@cache
def takes_response_mask(loss_fn: PolicyLossFn) -> bool:
    """Whether a variant declares the keyword `response_mask` (PolicyLossFn says why)."""
    return "response_mask" in inspect.signature(loss_fn).parameters


def _token_level(advantages: Tensor, log_probs: Tensor) -> Tensor:
    if advantages.shape == log_probs.shape:
        return advantages  # [B, T]
    if advantages.dim() == 1 and advantages.shape[0] == log_probs.shape[0]:
        return advantages.unsqueeze(-1).expand_as(log_probs)  # [B] -> [B, T]
    raise ValueError(f"advantages must be [B, T]={tuple(log_probs.shape)} or [B], got "
                     f"{tuple(advantages.shape)}")


@torch.no_grad()
def _metrics(loss: Tensor, log_probs: Tensor, old_log_probs: Tensor, valid: Tensor,
             flags: dict[str, Tensor]) -> dict[str, float]:
    log_ratio = log_probs - old_log_probs  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    any_valid = bool(valid.any())
    metrics = {
        "pg/loss": loss.item(),
        "pg/ratio_mean": masked_mean(ratio, valid).item(),
        "pg/ratio_max": ratio[valid].max().item() if any_valid else 0.0,
        "pg/ratio_min": ratio[valid].min().item() if any_valid else 0.0,
        "pg/approx_kl": masked_mean(ratio - 1.0 - log_ratio, valid).item(),
    }
    for name, flag in flags.items():
        metrics[name] = masked_mean(flag.float(), valid).item()
    return metrics
