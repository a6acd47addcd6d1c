"""ROLL's domain mix on convert: `actor_train.data_args.domain_interleave_probs` whose
probabilities do not sum to 1.

ROLL gives each domain but the last int(p x rollout_batch_size) prompts per batch and the
last domain the rest (roll/pipeline/rlvr/rlvr_pipeline.py), so the last probability as
written is never read: the last domain's share is 1 - the others'. Several examples leave
a commented-out domain's share behind (qwen3-235BA22B: 0.4 + 0.3 + 0.1 + 0.1). flywheel
needs the probabilities to sum to 1 (pipelines/rlvr/domain_mix.py): the last one becomes
the rest, which is ROLL's share. Shares of the others above 1 are left for validate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

KEY = "domain_interleave_probs"
TOLERANCE = 1e-6


def fit_domain_mix(out: Conversion) -> None:
    args = (out.data.get("actor_train") or {}).get("data_args") or {}
    probs = args.get(KEY)
    if not isinstance(probs, dict) or not probs:
        return
    try:
        values = {name: float(p) for name, p in probs.items()}
    except (TypeError, ValueError):
        return  # not numbers: the strict loader names them
    *others, last = values
    rest = 1.0 - sum(values[name] for name in others)
    if abs(sum(values.values()) - 1.0) <= TOLERANCE or rest < 0:
        return
    probs[last] = round(rest, 12)
    out.mapped.append(f"actor_train.data_args.{KEY}.{last}: {values[last]:g} -> {rest:g} "
                      f"(ROLL gives the last domain what the others leave of each batch; "
                      f"the probabilities as written sum to {sum(values.values()):g})")
