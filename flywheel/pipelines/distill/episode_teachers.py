"""On-policy distillation over agentic episodes: each teacher's log-probs of every model
token of the batch's trajectories (one row per episode, observations and tool results
between the turns), attached as the extras `add_opd` reads (opd_batch.py).

Why at packing, not per finished group as RLVR's teachers score: an episode's row is laid
out only when the batch is packed (its turns come back from the env workers one by one),
and a teacher's weights never change, so a score taken on the training path is as fresh as
one taken beside generation; it costs the teachers' forward on the step's critical path
(`time/logprobs` does not include it: it counts in the step's batch packing). Every teacher
scores every episode (episodes carry an env tag, not a record's: the config refuses
tag_included, context_template and a teacher of the student's own weights under agentic).
Rows that do not divide a teacher's ranks are padded with copies of the first row, whose
scores are dropped.
"""

from __future__ import annotations

import torch

from flywheel.pipelines.roles.handles import TrainRole
from flywheel.workers.batch import TokenBatch


def score_episodes(batch: TokenBatch, teachers: dict[str, TrainRole]) -> None:
    """Each teacher's per-token log-probs of the batch's rows (0 off the model tokens) and
    its rows (all), as `teacher_log_probs.<name>` / `teacher_rows.<name>`."""
    pending = {}
    for name, cluster in teachers.items():  # every teacher's pass in flight at once
        pad = -len(batch) % cluster.world_size
        rows = torch.cat([torch.arange(len(batch)), torch.zeros(pad, dtype=torch.long)])
        pending[name] = cluster.forward_logprobs(batch.select(rows) if pad else batch)
    for name, result in pending.items():
        log_probs = result.result()[: len(batch)] * batch.response_mask  # [B, L]
        batch.attach(f"teacher_log_probs.{name}", log_probs, per="token")
        batch.attach(f"teacher_rows.{name}", torch.ones(len(batch), dtype=torch.bool),
                     per="sample")
