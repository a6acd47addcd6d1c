"""Hyper-parameters of every policy-loss variant, declared once, and the signature a variant
implements.

The knobs are config keys too, under ROLL's names: ROLL keeps its PPO clip keys at the top
level of a file and the other variants' knobs in actor_train. So they are declared here, in
two groups the schema composes (`AlgorithmKeys` takes `PPOClipKnobs`, `ActorTrainConfig`
takes `VariantKnobs`): a knob's name, default and meaning live in one place, beside the
losses that read it, and the configuration reference reads its comment from this file.
`PolicyLossParams` is both groups in one flat object, whose field names are exactly the
keyword arguments of `compute_policy_loss`; it checks the values (`__post_init__`), and
the config checks build one so a bad value is refused when the config loads. A variant
reads only its own fields; the others are ignored (not errors), so one params object
serves whichever `pg_variant` is selected.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: the params are built where no torch is imported
    from torch import Tensor


class KnobError(ValueError):
    """A knob's value no variant can use; `name` is the knob (the config key's last part)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name} {message}")
        self.name, self.message = name, message


@dataclass
class PPOClipKnobs:
    """The ratio clip of ppo (and gspo's sequence ratio): top-level keys, as in ROLL."""

    # PPO ratio clip ε, symmetric: clip(r, 1 - pg_clip, 1 + pg_clip) (pg_variant ppo, and
    # gspo on its sequence ratio); with use_pg_clip_range the asymmetric low/high bounds
    # apply.
    pg_clip: float = 0.2
    use_pg_clip_range: bool = False
    # Ratio clipped to [1 - pg_clip_low, 1 + pg_clip_high] when use_pg_clip_range is set
    # (DAPO's clip-higher, arXiv 2503.14476).
    pg_clip_low: float = 0.2
    pg_clip_high: float = 0.28
    # Dual clip (Ye et al. 2020, arXiv 1912.09729): for A < 0 the loss is capped at
    # -dual_clip_c * A; dual_clip_c must be > 1.
    dual_clip_loss: bool = False
    dual_clip_c: float = 3.0


@dataclass
class VariantKnobs:
    """The knobs of the other variants: actor_train keys, as in ROLL."""

    # tis: importance ratio truncated to [tis_lower_bound, tis_upper_bound].
    tis_lower_bound: float = 0.0
    tis_upper_bound: float = 1.0
    # topr and topr_seq: weights of the positive-score (topr_positive_weight) and
    # non-positive-score (topr_negative_weight) terms.
    topr_positive_weight: float = 1.0
    topr_negative_weight: float = 1.0
    # cispo: ratio clip bounds 1-cispo_epsilon_low .. 1+cispo_epsilon_high, and
    # (cispo_use_unified_mask) whether to drop tokens already outside the trust region in
    # the direction of the advantage.
    cispo_epsilon_low: float = 0.1
    cispo_epsilon_high: float = 0.1
    cispo_use_unified_mask: bool = False
    # kimi15: weight of the squared log-ratio penalty (tau/2)(logp - logp_old)^2 (per token;
    # kimi15_seq: of the response's summed log-ratio).
    kimi15_tau: float = 0.1


@dataclass
class PolicyLossParams(VariantKnobs, PPOClipKnobs):
    """Every knob of every variant, flat: what `compute_policy_loss` and a variant read."""

    def __post_init__(self) -> None:
        # Pure validation: raises, never rewrites a field.
        for name in ("pg_clip", "pg_clip_low", "pg_clip_high", "cispo_epsilon_low",
                     "cispo_epsilon_high", "kimi15_tau", "topr_positive_weight",
                     "topr_negative_weight", "tis_lower_bound"):
            if getattr(self, name) < 0:
                raise KnobError(name, f"must be >= 0, got {getattr(self, name)}")
        if self.dual_clip_c <= 1.0:
            raise KnobError("dual_clip_c", f"must be > 1 (Ye et al. 2020), got {self.dual_clip_c}")
        if self.tis_lower_bound > self.tis_upper_bound:
            raise KnobError("tis_lower_bound", f"must be <= tis_upper_bound "
                                               f"({self.tis_upper_bound}), got "
                                               f"{self.tis_lower_bound}")

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

    @classmethod
    def from_groups(cls, ppo_clip: PPOClipKnobs, variants: VariantKnobs) -> PolicyLossParams:
        """Read from any objects holding the two groups (the run config's top level and its
        actor_train block): each field from the group that declares it."""
        return cls(**_values(ppo_clip, PPOClipKnobs), **_values(variants, VariantKnobs))


def _values(holder: Any, group: type) -> dict[str, Any]:
    return {f.name: getattr(holder, f.name) for f in fields(group)}


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
