"""Hyper-parameters of every policy-loss variant, and the signature a variant implements.

`PolicyLossParams` is flat on purpose: its field names are exactly the keyword arguments of
`compute_policy_loss` and the config keys, so a config block maps onto it one to one. A
variant reads only its own fields; the others are ignored (not errors), so one params object
serves whichever `pg_variant` is selected.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only: the params are built where no torch is imported
    from torch import Tensor


@dataclass(frozen=True)
class PolicyLossParams:
    # ppo: ratio clip ε, symmetric: clip(r, 1 - pg_clip, 1 + pg_clip).
    pg_clip: float = 0.2
    # ppo: use the asymmetric range [1 - pg_clip_low, 1 + pg_clip_high] instead of pg_clip
    # ("clip-higher", DAPO arXiv 2503.14476).
    use_pg_clip_range: bool = False
    pg_clip_low: float = 0.2
    pg_clip_high: float = 0.28
    # ppo: dual clip (Ye et al. 2020): for A < 0 the loss is capped at -c·A; needs c > 1.
    dual_clip_loss: bool = False
    dual_clip_c: float = 3.0
    # tis: truncated importance weight sg(clip(r, lower, upper)).
    tis_lower_bound: float = 0.0
    tis_upper_bound: float = 1.0
    # topr: weights of the positive-score (plain REINFORCE) and other (truncated IS) terms.
    topr_positive_weight: float = 1.0
    topr_negative_weight: float = 1.0
    # cispo: IS weight clipped to [1 - ε_low, 1 + ε_high]; unified mask drops tokens already
    # outside that range in the direction of A.
    cispo_epsilon_low: float = 0.1
    cispo_epsilon_high: float = 0.1
    cispo_use_unified_mask: bool = False
    # kimi15: weight τ of the (τ/2)·(ℓ - ℓ_old)² regulariser.
    kimi15_tau: float = 0.1

    def __post_init__(self) -> None:
        # Pure validation: raises, never rewrites a field.
        for name in ("pg_clip", "pg_clip_low", "pg_clip_high", "cispo_epsilon_low",
                     "cispo_epsilon_high", "kimi15_tau", "topr_positive_weight",
                     "topr_negative_weight", "tis_lower_bound"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1 (Ye et al. 2020), got {self.dual_clip_c}")
        if self.tis_lower_bound > self.tis_upper_bound:
            raise ValueError(
                f"tis_lower_bound ({self.tis_lower_bound}) must be <= tis_upper_bound "
                f"({self.tis_upper_bound})"
            )

    @classmethod
    def from_kwargs(cls, **hparams: object) -> PolicyLossParams:
        """Build from keyword args; an unknown name raises TypeError naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(hparams) - known)
        if unknown:
            raise TypeError(
                f"unknown policy-loss hyper-parameter(s) {unknown}; known: {sorted(known)}"
            )
        return cls(**hparams)  # type: ignore[arg-type]


class PolicyLossFn(Protocol):
    """What a variant implements (one file per variant, one line in registry.py).

    Args (all [B, T]; everything but `log_probs` is already detached, masked positions are
    already neutral: old_log_probs = log_probs there and advantages = 0):
        log_probs: ℓ = log π_θ(a_t | s_t), carries the gradient.
        old_log_probs: ℓ_old under the behaviour policy.
        advantages: A, token-level.
        scores: per-sample scores [B] or None (only some variants need them).
        params: the hyper-parameters.

    A variant that needs each row's valid tokens (a sequence-level ratio: gspo) adds a
    keyword-only parameter `response_mask: Tensor` ([B, T] bool); `compute_policy_loss`
    passes it to exactly the variants whose signature names it, so a token-level variant
    keeps the five arguments above.

    Returns:
        loss_mat [B, T]: the per-token loss, before masking and aggregation.
        flags: metric name → [B, T] tensor (bool or float) whose mean over valid tokens is
            reported, e.g. {"pg/clipfrac": clipped}.
    """

    def __call__(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        scores: Tensor | None,
        params: PolicyLossParams,
    ) -> tuple[Tensor, dict[str, Tensor]]: ...
