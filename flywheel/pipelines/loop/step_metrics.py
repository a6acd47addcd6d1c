"""Per-step metrics of any rollout, derived from a batch: rewards, lengths, staleness, drops.

Names are stable and documented in the metrics table (docs_site/metrics.yaml): `reward/*`,
`response/*`, `staleness/*` (train step minus the policy version that generated each
sample, over the batch's samples), `rollout/*` (drops this step, groups waiting in the
buffer). A rollout adds its own (RLVR's: pipelines/rlvr/metrics.py).
"""

from __future__ import annotations

from flywheel.pipelines.loop.seams import Taken
from flywheel.workers.batch import TokenBatch


def rollout_metrics(batch: TokenBatch) -> dict[str, float]:
    scores = batch.scores.float()
    lengths = batch.response_mask.sum(-1)
    return {"reward/mean": float(scores.mean()), "reward/std": float(scores.std()),
            "reward/max": float(scores.max()), "reward/min": float(scores.min()),
            "response/length_mean": float(lengths.mean()),
            "response/length_max": float(lengths.max())}


def staleness_metrics(taken: Taken, step: int, queue_depth: int) -> dict[str, float]:
    """`step` is the 1-based step that trained `taken.groups`."""
    lags = [step - 1 - g.version for g in taken.groups for _ in range(g.num_samples)]
    return {"staleness/min": float(min(lags)), "staleness/max": float(max(lags)),
            "staleness/mean": sum(lags) / len(lags),
            "rollout/dropped_stale": float(sum(g.num_samples for g in taken.stale)),
            "rollout/dropped_filtered": float(sum(g.num_samples for g in taken.filtered)),
            "rollout/filter_cap_kept": float(taken.filter_cap_kept),
            "rollout/queue_depth": float(queue_depth)}
