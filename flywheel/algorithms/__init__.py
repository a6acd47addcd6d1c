"""flywheel.algorithms: the RL maths, as pure tensor functions.

What this package owns
    Everything between "a batch of scored rollouts with log-probs" and "a scalar loss":
    advantage estimators (advantages.py, gae.py), reward shaping (rewards.py), the
    policy-gradient losses selected by `pg_variant` (policy_loss/), the value loss (gae.py),
    KL estimators, penalties and controllers (kl.py), entropy (entropy.py), train/infer
    mismatch correction (mismatch.py) and its filter (infer_filter.py), which samples carry
    loss (sample_masks.py) and the one place that turns a per-token loss into a scalar,
    `aggregate_loss` (aggregation.py), shared by every loss so `loss_agg_mode` means the
    same thing everywhere and gradient accumulation is exact.

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
    the policy_loss package docstring). A new advantage estimator: its function and one line
    in estimators.py's catalog (`ESTIMATORS`, or `register_estimator`). A new KL estimator:
    a branch in its function plus its name in the Literal next to it. Every function cites its
    formula and paper in its docstring; tests in tests/algorithms/ check it against numbers
    worked out by hand.

Imports
    The names below are imported on first use (PEP 562 `__getattr__`), not with the
    package: the config checks read the loss catalog (policy_loss/registry.py) in processes
    that must not import torch (`platform validate`).
"""

from __future__ import annotations

import importlib

# module (under this package) -> the names it exports here
_EXPORTS: dict[str, tuple[str, ...]] = {
    "advantages": ("ADV_ESTIMATORS", "advantage_clip", "compute_advantages",
                   "whiten_advantages"),
    "aggregation": ("LOSS_AGG_MODES", "LossAggMode", "aggregate_loss", "count_seqs",
                    "count_tokens", "masked_mean"),
    "entropy": ("entropy_from_logits", "entropy_loss"),
    "gae": ("compute_gae", "value_loss"),
    "infer_filter": ("TrainInferFilter", "train_infer_filter"),
    "kl": ("KL_ESTIMATORS", "AdaptiveKLController", "FixedKLController", "apply_kl_penalty",
           "kl_estimate", "kl_loss"),
    "mismatch": ("MismatchCorrection", "train_infer_mismatch_weights"),
    "policy_loss.compute": ("compute_policy_loss",),
    "policy_loss.params": ("PolicyLossFn", "PolicyLossParams"),
    "policy_loss.registry": ("POLICY_LOSSES", "get_policy_loss"),
    "rewards": ("reward_clip", "scores_to_token_rewards"),
    "sample_masks": ("difficulty_keep", "mask_samples"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # the next lookup finds it without asking again
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
