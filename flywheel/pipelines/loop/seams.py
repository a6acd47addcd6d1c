"""The typed seams between the step loop and a kind of rollout.

The step loop (step_loop.py) is written once. What differs between RLVR (prompts → groups
of sampled responses → verifier rewards) and agentic RL (env workers → episodes) is a
`Rollout`: where generation work comes from (its `RolloutSource`), how a finished group
becomes training rows, its advantages and metrics, validation, and how its groups are
saved in a checkpoint. Two type parameters run through every seam so that nothing between
the generator, its source and the replay buffer is `Any`:

- `W`, a `WorkItem`: one unit of generation work sent to one pool worker (an RLVR chunk of
  prompts, an agentic env job);
- `G`, a `TrainableGroup`: the unit that is trained, or dropped as stale or filtered (an
  RLVR prompt group, an agentic episode group). The buffer, the ledger and the step
  metrics read only what this protocol names.

To add a kind of rollout: implement `Rollout` in a folder of its own under pipelines/ and
add one line to the pipeline-kinds catalog (flywheel/config/kinds.py `KINDS`) naming its
`prepare` and `rollout` functions by import path (launch.py's PrepareRollout and
StartRollout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import ray

from flywheel.platform.cluster import Cluster

if TYPE_CHECKING:
    from flywheel.workers.batch import TokenBatch


class TrainableGroup(Protocol):
    """Samples that share a prompt (or an env seed) and are trained or dropped together."""

    seq: int  # position in the run's stream of groups (the buffer hands out lowest first)
    version: int  # policy version that started it (the staleness bound reads it)
    scores: list[float]  # one per sample (dynamic sampling reads them)

    @property
    def id(self) -> str: ...

    @property
    def num_samples(self) -> int: ...

    @property
    def num_tokens(self) -> int: ...  # generated tokens


class WorkItem(Protocol):
    """One unit of generation work sent to one pool worker."""

    batch_index: int  # the (0-based) training step it was drawn for

    # seq of its first group (a batch's items cover its seqs in order)
    @property
    def first_seq(self) -> int: ...

    @property
    def num_groups(self) -> int: ...

    def describe(self) -> str: ...  # for error messages: which prompts / envs


G = TypeVar("G", bound=TrainableGroup)
W = TypeVar("W", bound=WorkItem)


@dataclass
class Taken(Generic[G]):
    """One training batch from the replay buffer, and what was dropped since the last."""

    groups: list[G]
    stale: list[G] = field(default_factory=list)
    filtered: list[G] = field(default_factory=list)
    filter_cap_kept: int = 0  # samples in `groups` kept only because the cap was reached


class Scoring(Protocol[G]):
    """Groups whose rewards may still be in flight on reward workers."""

    groups: list[G]
    # (reward cluster, rank, ref, indices of the groups it scores): one per request
    parts: list[tuple[Cluster, int, ray.ObjectRef, list[int]]]

    @property
    def refs(self) -> list[ray.ObjectRef]: ...

    def finish(self) -> list[G]: ...  # the groups, their scores written back


@dataclass
class Scored(Generic[G]):
    """Groups that came back already scored (an env scored its own episodes)."""

    groups: list[G]
    parts: list[tuple[Cluster, int, ray.ObjectRef, list[int]]] = field(default_factory=list)

    @property
    def refs(self) -> list[ray.ObjectRef]:
        return []

    def finish(self) -> list[G]:
        return self.groups


@dataclass
class Completion(Generic[W, G]):
    """What a finished work item became."""

    scoring: Scoring[G]  # its groups, scoring in flight (no parts: already scored)
    busy: list[tuple[int, float, float]]  # actor_infer (rank, start, end) it used
    dropped: dict[str, list[G]] = field(default_factory=dict)  # reason -> groups not kept
    # Partial rollout: the item is not finished; this work item continues it (no groups yet).
    continuation: W | None = None


class RolloutSource(Protocol[W, G]):
    """Where the prefetch generator's work comes from, who runs it, what results become."""

    pool: Cluster  # the workers that run items
    waits_for_weights: bool  # see "Ordering" in loop/prefetch.py
    per_worker: int  # items in flight on one worker at once (see "Streaming" in loop/prefetch.py)

    def items(self, batch_index: int) -> list[W]: ...  # in seq order

    # `version`: the newest weights update sent to actor_infer before this item
    def submit(self, item: W, rank: int, version: int) -> ray.ObjectRef: ...

    def complete(self, item: W, rank: int, result: object) -> Completion[W, G]: ...


class Rollout(Protocol[W, G]):
    """One kind of pipeline's part of a step; the loop owns everything else."""

    batch_groups: int  # groups per training batch
    # reasons a source drops groups for as they arrive; each is logged every step as
    # rollout/dropped_<reason> (samples)
    drop_reasons: tuple[str, ...]

    def source(self) -> RolloutSource[W, G]: ...

    def pack(self, groups: list[G]) -> TokenBatch: ...  # training rows of one batch

    def add_advantages(self, batch: TokenBatch, kl_coef: float) -> dict[str, float]: ...

    # rewards / env outcomes of the batch `step` (1-based) took
    def step_metrics(self, taken: Taken[G], step: int) -> dict[str, float]: ...

    # run while generation is paused; with ratio > 0 from a thread of its own while the
    # trainer trains the next batch (loop/overlapped_validation.py): touch no state that
    # pack / add_advantages / step_metrics change
    def validate(self) -> dict[str, float]: ...

    # a checkpoint keeps the buffer's groups as JSON
    def group_state(self, group: G) -> dict: ...

    def group_from_state(self, state: dict) -> G: ...
