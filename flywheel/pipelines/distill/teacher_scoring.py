"""Teachers score finished groups, beside the rewards: the teachers' log-probs of the
student's sampled tokens, per response, carried by the group to its training batch.

Why per finished group, in the scoring job: with async_generation_ratio > 0 the teachers
work while the student trains, as the rewards do, and the prefetch generator waits for a
group's teacher calls the way it waits for its reward calls (the same stall clocks, the
same `Scoring` protocol, loop/seams.py). A teacher's weights never change, so its scores
are never stale, whenever they were taken.

Each teacher scores only the groups routed to it by their record's tag (`tag_included`;
empty: every tag). Its batch is sharded over its ranks like any forward pass; a group
whose rows do not divide is padded with copies of its first row, whose scores are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray
import torch

from flywheel.pipelines.rlvr.generation import Group, ScoringJob
from flywheel.pipelines.roles.handles import TrainRole
from flywheel.platform.cluster import Cluster
from flywheel.workers.batch import pack_sequences


@dataclass
class TeacherPart:
    """One teacher's forward pass over some groups' rows, in flight on its ranks."""

    name: str
    cluster: TrainRole
    refs: list[ray.ObjectRef]  # one per rank, in rank order
    indices: list[int]  # the groups it scores (positions in the job's groups)


def rows_of(groups: list[Group], indices: list[int], world_size: int
            ) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, responses) of the groups' responses in order, padded with copies of the
    first row to a multiple of `world_size`."""
    prompts = [groups[gi].prompt_ids for gi in indices for _ in groups[gi].responses]
    responses = [r.token_ids for gi in indices for r in groups[gi].responses]
    pad = -len(prompts) % world_size
    return prompts + prompts[:1] * pad, responses + responses[:1] * pad


def submit_teachers(groups: list[Group], teachers: dict[str, TrainRole],
                    routing: dict[str, tuple[str, ...]], pad_id: int) -> list[TeacherPart]:
    """Every teacher's forward pass over the groups routed to it, without waiting."""
    parts = []
    for name, cluster in teachers.items():
        included = routing[name]
        indices = [gi for gi, g in enumerate(groups)
                   if g.responses and (not included or g.record.tag in included)]
        if not indices:
            continue
        prompts, responses = rows_of(groups, indices, cluster.world_size)
        batch = pack_sequences(prompts, responses, pad_id)
        refs = cluster.forward_logprobs(batch).refs
        parts.append(TeacherPart(name, cluster, refs, indices))
    return parts


def write_teacher_log_probs(groups: list[Group], part: TeacherPart,
                            log_probs: torch.Tensor) -> None:
    """Each response's teacher log-probs [len(response)] from the part's [rows, L] result
    (aligned with input_ids: the response columns follow the prompt)."""
    row = 0
    for gi in part.indices:
        group = groups[gi]
        start = len(group.prompt_ids)
        scored = []
        for response in group.responses:
            scored.append(log_probs[row, start:start + len(response.token_ids)].tolist())
            row += 1
        group.teacher_log_probs[part.name] = scored


@dataclass
class TeacherScoring:
    """A `Scoring` (loop/seams.py): the rewards' job and the teachers' passes together;
    `finish` writes the scores and each response's teacher log-probs into its group."""

    rewards: ScoringJob
    teacher_parts: list[TeacherPart]

    @property
    def groups(self) -> list[Group]:
        return self.rewards.groups

    @property
    def parts(self) -> list[tuple[Cluster, int, ray.ObjectRef, list[int]]]:
        return self.rewards.parts + [(p.cluster, rank, ref, p.indices)
                                     for p in self.teacher_parts
                                     for rank, ref in enumerate(p.refs)]

    @property
    def refs(self) -> list[ray.ObjectRef]:
        return [ref for _, _, ref, _ in self.parts]

    def finish(self) -> list[Group]:
        groups = self.rewards.finish()
        for part in self.teacher_parts:
            log_probs = torch.cat(part.cluster.gather(part.refs))  # [rows (+ pad), L]
            write_teacher_log_probs(groups, part, log_probs)
        return groups
