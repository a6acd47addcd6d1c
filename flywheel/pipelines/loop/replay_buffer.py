"""Scored groups waiting for training, and the rules that keep stale and useless ones out.

The buffer hands out groups in prompt-stream order (lowest `seq` first), so with
synchronous generation a batch is exactly the prompts drawn for that step, in order.
`take` enforces the staleness bound at the moment of training: a group generated at
policy version v may be trained at (0-based) step t only if t − v ≤ max_staleness;
older groups are removed as soon as a take for t is attempted (`drop_stale`; the
generator then frees their place), reported as dropped with the next successful take,
and never trained.

Dynamic sampling (loop/group_filter.py): `put` drops groups without a training signal as they
arrive and returns them, so the prefetch generator frees their place in its window at once
and generates more prompts in their stead; waiting for a take to release them stalls a
synchronous run, whose window holds exactly one batch. They are reported with the next
successful take (`Taken.filtered`), so the ledger and metrics show them at the step whose
batch they would have joined. Past the filter's cap, groups are kept whatever they scored.

Not here: who produces groups (the prefetch generator) and what is recorded about them
(the ledger); the buffer only orders, filters and hands out.
It reads only what `loop/seams.TrainableGroup` names (`seq`, `version`, `scores`), so
it holds RLVR's `Group` and the agentic `EpisodeGroup` (envs sharing a seed; version = the
policy of its first turn) alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic

from flywheel.pipelines.loop.group_filter import GroupFilter
from flywheel.pipelines.loop.seams import G, Taken


@dataclass
class ReplayBuffer(Generic[G]):
    max_staleness: int
    drop_uniform_groups: bool = False  # shorthand for group_filter=GroupFilter(True)
    group_filter: GroupFilter | None = None  # unset: GroupFilter(drop_uniform_groups)
    # Groups per trained batch, known before the first take: the filter's cap counts in
    # batches, and groups arrive (a fresh run's first ones, a resumed run's restored ones)
    # before the trainer first asks. 0: unknown until the first take.
    batch_groups: int = 0
    _groups: dict[int, G] = field(default_factory=dict)  # seq -> trainable group
    _filtered: list[G] = field(default_factory=list)  # dropped, reported by next take
    _stale: list[G] = field(default_factory=list)  # the same, for stale groups
    _filtered_since_take: int = 0  # groups, toward the filter's cap
    _cap_kept: int = 0  # samples kept past the cap since the last take
    _batch_size: int = 0  # groups per take, as last asked (the cap counts in batches)

    def __post_init__(self) -> None:
        self._batch_size = self.batch_groups
        if self.group_filter is None:
            self.group_filter = GroupFilter(drop_uniform=self.drop_uniform_groups)

    def __len__(self) -> int:
        """Groups waiting to be trained (filtered ones are already let go)."""
        return len(self._groups)

    def put(self, groups: list[G]) -> list[G]:
        """Add scored groups; returns those the filter dropped (their place is free)."""
        dropped = []
        for g in groups:
            if self.group_filter.keeps(g.scores):
                self._groups[g.seq] = g
            elif self._cap_reached():
                self._groups[g.seq] = g
                self._cap_kept += g.num_samples
            else:
                self._filtered.append(g)
                self._filtered_since_take += 1
                dropped.append(g)
        return dropped

    def _cap_reached(self) -> bool:
        """The current batch has cost max_gen_batches batches of groups. With the batch
        size not known yet (no batch_groups, no take) only a cap of 1 is reached: treating
        an unknown size as 0 would keep every group the filter drops."""
        cap = self.group_filter.max_gen_batches
        if not cap or (not self._batch_size and cap > 1):
            return False
        return self._filtered_since_take >= (cap - 1) * self._batch_size

    def drop_stale(self, step: int) -> list[G]:
        """Remove the groups too old for 0-based `step` (so for every later step too) and
        return them; their place in the generator's window is free from now on."""
        stale = [self._groups.pop(seq) for seq in sorted(self._groups)
                 if step - self._groups[seq].version > self.max_staleness]
        self._stale.extend(stale)
        return stale

    def take(self, n: int, step: int) -> Taken[G] | None:
        """`n` trainable groups for 0-based `step`, lowest seq first; None if too few yet.

        Groups dropped as stale or filtered since the last take are reported by the next
        successful one, so what was dropped shows at the step whose batch it missed.
        """
        self._batch_size = n
        self.drop_stale(step)
        if len(self._groups) < n:
            return None
        taken = Taken(groups=[self._groups.pop(seq) for seq in sorted(self._groups)[:n]],
                      stale=self._stale, filtered=self._filtered,
                      filter_cap_kept=self._cap_kept)
        self._stale, self._filtered, self._filtered_since_take, self._cap_kept = [], [], 0, 0
        return taken

    def snapshot(self) -> list[G]:
        """Every group the buffer holds, dropped ones not yet reported included (a resumed
        run puts them back, and the filter or the staleness bound drops and reports them
        again)."""
        return sorted([*self._groups.values(), *self._filtered, *self._stale],
                      key=lambda g: g.seq)
