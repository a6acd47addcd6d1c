"""The reward model's pairwise loss: Bradley-Terry on a scalar head's two scores.

    loss = -log sigma(r(x, y_w) - r(x, y_l) - m)

Bradley & Terry 1952; as a reward-model objective InstructGPT (Ouyang et al. 2022, eq. 1),
with the optional per-pair margin m of Llama 2 (Touvron et al. 2023, eq. 2: m larger for
pairs rated further apart; TRL's RewardTrainer reads it from a `margin` column). m = 0 is
the plain loss. Accuracy is the share of pairs the model orders right (r_w > r_l; a tie is
wrong), the held-out number a reward model is judged by.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor,
                       margin: torch.Tensor | None = None) -> torch.Tensor:
    """[P] per-pair losses from the [P] scores of the chosen and the rejected responses."""
    diff = chosen - rejected  # [P]
    if margin is not None:
        diff = diff - margin
    return -F.logsigmoid(diff)


def bradley_terry_metrics(chosen: torch.Tensor, rejected: torch.Tensor,
                          losses: torch.Tensor, prefix: str = "rm") -> dict[str, float]:
    diff = (chosen - rejected).detach()  # [P]
    return {f"{prefix}/loss": float(losses.detach().mean()),
            f"{prefix}/accuracy": float((diff > 0).float().mean()),
            f"{prefix}/score_margin": float(diff.mean()),
            f"{prefix}/chosen_score": float(chosen.detach().mean()),
            f"{prefix}/rejected_score": float(rejected.detach().mean())}
