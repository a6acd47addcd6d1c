"""The teachers' log-probs of a training batch, and the OPD term of its advantages.

`attach_teacher_scores` lays each group's per-response teacher log-probs
(teacher_scoring.py) onto the batch's columns as batch extras (workers/batch.py):
`teacher_log_probs.<name>` per token, `teacher_rows.<name>` per sample (the rows that
teacher scored); `teacher_scores` reads them back; `add_opd` adds the teachers' per-token advantage
(algorithms/distill/opd_advantage.py) to the verifier rewards' advantage (opd_mode
mixed) or puts it in its place (pure: only the KL-to-reference penalty's reward-to-go,
when there is one, stays beside it).

The student's log-probs are actor_infer's recorded ones: those of the distribution that
sampled the tokens (temperature, top-k / top-p applied), so the per-token log-ratio
estimates the KL of the policy that produced them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flywheel.algorithms.distill import opd_advantages
from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.rlvr.generation import Group
from flywheel.workers.batch import TokenBatch


@dataclass
class TeacherScores:
    """Per teacher: its log-probs [B, L] (aligned with input_ids, 0 off its rows and off the
    responses) and the rows [B] (bool) it scored."""

    log_probs: dict[str, torch.Tensor]
    routes: dict[str, torch.Tensor]


def attach_teacher_scores(groups: list[Group], batch: TokenBatch, teachers: list[str]) -> None:
    """The batch's rows are the groups' responses in order (rlvr/train_batch.pack_groups)."""
    rows, width = batch.input_ids.shape
    log_probs = {n: torch.zeros(rows, width) for n in teachers}
    routes = {n: torch.zeros(rows, dtype=torch.bool) for n in teachers}
    row = 0
    for group in groups:
        start = len(group.prompt_ids)
        for i, response in enumerate(group.responses):
            for name, scored in group.teacher_log_probs.items():
                values = scored[i]
                if len(values) != len(response.token_ids):
                    raise ValueError(f"teacher {name}: {len(values)} log-probs for a response "
                                     f"of {len(response.token_ids)} tokens")
                log_probs[name][row, start:start + len(values)] = torch.tensor(values)
                routes[name][row] = True
            row += 1
    for name in teachers:
        batch.attach(f"teacher_log_probs.{name}", log_probs[name], per="token")
        batch.attach(f"teacher_rows.{name}", routes[name], per="sample")


def teacher_scores(batch: TokenBatch, teachers: list[str]) -> TeacherScores:
    """The teachers' log-probs and rows the batch carries (attach_teacher_scores)."""
    return TeacherScores({n: batch.extra(f"teacher_log_probs.{n}") for n in teachers},
                         {n: batch.extra(f"teacher_rows.{n}") for n in teachers})


def add_opd(advantages: torch.Tensor, penalty_to_go: torch.Tensor, batch: TokenBatch,
            scores: TeacherScores, cfg: PipelineConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages [B, L] with the teachers' term, and its metrics (distill/...).
    `advantages`: the rewards' (with the KL penalty's reward-to-go); `penalty_to_go`: that
    reward-to-go alone, what a pure run keeps."""
    base = advantages if cfg.opd_mode == "mixed" else penalty_to_go
    coefs = {name: cfg.teacher[name].opd_kl_coef for name in scores.log_probs}
    return opd_advantages(batch.infer_log_probs, scores.log_probs, batch.response_mask,
                          coefs=coefs, routes=scores.routes, gamma=cfg.opd_gamma,
                          rl_advantages=base)
