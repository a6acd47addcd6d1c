"""`kimi15` and `kimi15_seq`: Kimi k1.5's policy loss (Kimi Team 2025, arXiv 2501.12599, §2.3.2).

The paper regresses the reward on the log-ratio of the whole response, with the mean reward
r̄ standing in for τ·log Z; its gradient per sampled response y_j is

    ∇ log π_θ(y_j | x) · (r_j - r̄) - (τ/2) · ∇ (log π_θ(y_j | x) / π_old(y_j | x))²

`kimi15_seq` is that form. With δ_t = ℓ_t - ℓ_old,t and D = Σ_s δ_s over the response (the
sequence log-ratio), the per-token loss

    L_t = -A_t · ℓ_t + τ · sg(D) · (δ_t - sg(δ_t) / 2)

sums over a response to -A·Σ_t ℓ_t + (τ/2)·D² and has ∂L/∂ℓ_t = -A_t + τ·D: every token of
a response is pulled back by the whole response's drift.

`kimi15` (the default, ROLL's form: its agentic actor worker's kimi15 term) penalises each
token's own log-ratio instead:

    L_t = -A_t · ℓ_t + (τ / 2) · δ_t²,   ∂L/∂ℓ_t = -A_t + τ·δ_t

The two agree on-policy (δ = 0) and differ as soon as the policy has moved: τ·Σ_s δ_s
against τ·δ_t. τ = kimi15_tau in both. `loss_agg_mode` scales each response's gradient as a
whole (the paper sums over tokens: seq-mean-token-sum), never one term against the other.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flywheel.algorithms.policy_loss.params import PolicyLossParams


def kimi15_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
) -> tuple[Tensor, dict[str, Tensor]]:
    log_ratio = log_probs - old_log_probs  # [B, T]
    loss_mat = -advantages * log_probs + 0.5 * params.kimi15_tau * log_ratio**2  # [B, T]
    return loss_mat, {"pg/kimi15_sq_log_ratio": log_ratio.detach() ** 2}


def kimi15_seq_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor | None,
    params: PolicyLossParams,
    *,
    response_mask: Tensor,
) -> tuple[Tensor, dict[str, Tensor]]:
    valid = response_mask.bool()  # [B, T]
    log_ratio = torch.where(valid, log_probs - old_log_probs, 0.0)  # [B, T], δ
    seq_log_ratio = log_ratio.sum(-1, keepdim=True).detach()  # [B, 1], sg(D)
    penalty = params.kimi15_tau * seq_log_ratio * (log_ratio - 0.5 * log_ratio.detach())
    loss_mat = -advantages * log_probs + penalty  # [B, T]
    return loss_mat, {"pg/kimi15_sq_log_ratio": (seq_log_ratio**2).expand_as(log_probs)}
