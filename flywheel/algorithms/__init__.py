"""flywheel.algorithms: the RL maths, as pure tensor functions.

What this package owns
    Everything between "a batch of scored rollouts with log-probs" and "a scalar loss":
    advantage estimators (advantages.py, gae.py), reward shaping (rewards.py), the
    policy-gradient losses selected by `pg_variant` (policy_loss/), the value loss (gae.py),
    KL estimators, penalties and controllers (kl.py), entropy (entropy.py), train/infer
    mismatch correction (mismatch.py) and the one place that turns a per-token loss into a
    scalar, `aggregate_loss` (aggregation.py), shared by every loss so `loss_agg_mode`
    means the same thing everywhere and gradient accumulation is exact.

What it deliberately does not own
    No Ray, no I/O, no config objects, no models or tokenizers, no distributed calls.
    Inputs are tensors ([B, T] = batch x response tokens, masks nonzero where valid) and
    plain floats/strings; outputs are tensors plus a metrics dict of python floats under a
    stable namespace (pg/, vf/, kl/, entropy/, offpolicy/). The caller (workers/,
    pipelines/) computes log-probs, all-reduces the global token/sequence counts
    (`count_tokens`, `count_seqs`) and maps config fields onto these arguments, e.g.
    `PolicyLossParams(**fields)`.

How to extend
    A new pg_variant: one file in policy_loss/ and one line in policy_loss/registry.py (see
    the policy_loss package docstring). A new advantage estimator or KL estimator: a branch
    in its function plus its name in the Literal next to it. Every function cites its
    formula and paper in its docstring; tests in tests/algorithms/ check it against numbers
    worked out by hand.
"""

from flywheel.algorithms.advantages import (
    ADV_ESTIMATORS,
    advantage_clip,
    compute_advantages,
    whiten_advantages,
)
from flywheel.algorithms.aggregation import (
    LOSS_AGG_MODES,
    LossAggMode,
    aggregate_loss,
    count_seqs,
    count_tokens,
    masked_mean,
)
from flywheel.algorithms.entropy import entropy_from_logits, entropy_loss
from flywheel.algorithms.gae import compute_gae, value_loss
from flywheel.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    kl_estimate,
    kl_loss,
)
from flywheel.algorithms.mismatch import MismatchCorrection, train_infer_mismatch_weights
from flywheel.algorithms.policy_loss import (
    POLICY_LOSSES,
    PolicyLossFn,
    PolicyLossParams,
    compute_policy_loss,
    get_policy_loss,
)
from flywheel.algorithms.rewards import reward_clip, scores_to_token_rewards

__all__ = [
    "ADV_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "FixedKLController",
    "LossAggMode",
    "MismatchCorrection",
    "PolicyLossFn",
    "PolicyLossParams",
    "advantage_clip",
    "aggregate_loss",
    "apply_kl_penalty",
    "compute_advantages",
    "compute_gae",
    "compute_policy_loss",
    "count_seqs",
    "count_tokens",
    "entropy_from_logits",
    "entropy_loss",
    "get_policy_loss",
    "kl_estimate",
    "kl_loss",
    "masked_mean",
    "reward_clip",
    "scores_to_token_rewards",
    "train_infer_mismatch_weights",
    "value_loss",
    "whiten_advantages",
]
