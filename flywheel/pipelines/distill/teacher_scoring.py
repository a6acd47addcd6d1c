"""Teachers score finished groups, beside the rewards: the teachers' log-probs of the
student's sampled tokens, per response, carried by the group to its training batch.

Why per finished group, in the scoring job: with async_generation_ratio > 0 the teachers
work while the student trains, as the rewards do, and the prefetch generator waits for a
group's teacher calls the way it waits for its reward calls (the same stall clocks, the
same `Scoring` protocol, loop/seams.py). A teacher's weights never change, so its scores
are never stale, whenever they were taken.

Each teacher scores only the groups routed to it by their record's tag (`tag_included`;
empty: every tag), on the prompt its `context_template` writes from the record (the
student's prompt without one): the response tokens are the student's either way, so its
log-probs line up with the student's tokens. Its batch is sharded over its ranks like any
forward pass; rows that do not divide are padded with copies of the first row, whose scores
are dropped.

A teacher of the student's own weights (weights: student) is not scored here: it scores on
actor_train when the batch is packed (`score_on`), with the weights about to be updated.
"""

from __future__ import annotations

from collections.abc import Callable
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
    starts: list[int]  # per group it scores, the length of the prompt it was shown


TeacherPrompt = Callable[[str, Group], list[int]]  # (teacher name, group) -> prompt ids


def rows_of(groups: list[Group], indices: list[int], world_size: int,
            prompt_ids: list[list[int]] | None = None
            ) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, responses) of the groups' responses in order, padded with copies of the
    first row to a multiple of `world_size`; `prompt_ids[i]`: the prompt group indices[i]
    is shown (default: its own)."""
    shown = prompt_ids or [groups[gi].prompt_ids for gi in indices]
    prompts = [p for gi, p in zip(indices, shown) for _ in groups[gi].responses]
    responses = [r.token_ids for gi in indices for r in groups[gi].responses]
    pad = -len(prompts) % world_size
    return prompts + prompts[:1] * pad, responses + responses[:1] * pad


def routed(groups: list[Group], included: tuple[str, ...]) -> list[int]:
    """The groups a teacher of these tags scores (empty: every tag)."""
    return [gi for gi, g in enumerate(groups)
            if g.responses and (not included or g.record.tag in included)]


def submit_part(name: str, cluster: TrainRole, groups: list[Group], indices: list[int],
                prompt: TeacherPrompt, pad_id: int) -> TeacherPart:
    """One teacher's forward pass over the rows of `indices`, without waiting."""
    shown = [prompt(name, groups[gi]) for gi in indices]
    prompts, responses = rows_of(groups, indices, cluster.world_size, shown)
    refs = cluster.forward_logprobs(pack_sequences(prompts, responses, pad_id)).refs
    return TeacherPart(name, cluster, refs, indices, [len(p) for p in shown])


def submit_teachers(groups: list[Group], teachers: dict[str, TrainRole],
                    routing: dict[str, tuple[str, ...]], prompt: TeacherPrompt,
                    pad_id: int) -> list[TeacherPart]:
    """Every teacher's forward pass over the groups routed to it, without waiting."""
    parts = []
    for name, cluster in teachers.items():
        indices = routed(groups, routing[name])
        if indices:
            parts.append(submit_part(name, cluster, groups, indices, prompt, pad_id))
    return parts


def score_on(cluster: TrainRole, names: list[str], groups: list[Group],
             routing: dict[str, tuple[str, ...]], prompt: TeacherPrompt, pad_id: int) -> None:
    """Teachers of the student's own weights: each one's pass on `cluster` (actor_train),
    waited for, its log-probs written into the groups."""
    for name in names:
        indices = routed(groups, routing[name])
        if indices:
            part = submit_part(name, cluster, groups, indices, prompt, pad_id)
            write_teacher_log_probs(groups, part, torch.cat(cluster.gather(part.refs)))


def write_teacher_log_probs(groups: list[Group], part: TeacherPart,
                            log_probs: torch.Tensor) -> None:
    """Each response's teacher log-probs [len(response)] from the part's [rows, L] result
    (aligned with input_ids: the response columns follow the prompt)."""
    row = 0
    for gi, start in zip(part.indices, part.starts):
        group = groups[gi]
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
