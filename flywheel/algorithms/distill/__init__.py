"""Distillation maths, as pure tensor functions (no Ray, no I/O, no config objects).

    opd_advantage.py   on-policy distillation: the per-token reverse-KL advantage from one or
                       more teachers' log-probs of the student's sampled tokens, its
                       discounted return, per-teacher routing and coefficients, mixing with
                       the verifier rewards' advantage
    divergences.py     offline distillation: the divergences chosen by name (forward /
                       reverse / adaptive / skewed KL, Jensen-Shannon) over the teacher's
                       top-k log-probs, on one of two supports (ours, ROLL's)
    offline_loss.py    the divergence mixed with the SFT loss by `distill_loss_weight`

A new divergence: one function in divergences.py and its name in `DIVERGENCES` and the
`DivergenceName` Literal beside it.
"""

from flywheel.algorithms.distill.divergences import (
    DIVERGENCE_NAMES,
    DIVERGENCES,
    TOPK_SUPPORTS,
    DivergenceParams,
    log_probs_at,
    token_divergence,
    topk_log_probs,
)
from flywheel.algorithms.distill.offline_loss import distill_loss
from flywheel.algorithms.distill.opd_advantage import (
    discounted_return,
    opd_advantages,
    route_by_tag,
)

__all__ = ["DIVERGENCES", "DIVERGENCE_NAMES", "TOPK_SUPPORTS", "DivergenceParams",
           "discounted_return", "distill_loss", "log_probs_at", "opd_advantages",
           "route_by_tag", "token_divergence", "topk_log_probs"]
