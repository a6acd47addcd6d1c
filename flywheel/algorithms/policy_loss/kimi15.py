"""`kimi15`: Kimi k1.5 policy loss (Kimi Team 2025, arXiv 2501.12599).

The paper's squared-error surrogate, with the mean reward standing in for τ·log Z, has the
per-token gradient of

    L_t = -A_t · ℓ_t + (τ / 2) · (ℓ_t - ℓ_old,t)²

i.e. REINFORCE plus an L2 penalty on the log-ratio to the behaviour policy
(τ = kimi15_tau); ∂L_t/∂ℓ_t = -A_t + τ·(ℓ_t - ℓ_old,t).
"""

from __future__ import annotations

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
