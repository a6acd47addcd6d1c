"""Scored groups waiting for training, and the rule that keeps stale ones out.

The buffer hands out groups in prompt-stream order (lowest `seq` first), so with
synchronous generation a batch is exactly the prompts drawn for that step, in order.
`take` enforces the staleness bound at the moment of training: a group generated at
policy version v may be trained at (0-based) step t only if t − v ≤ max_staleness;
older groups are removed and reported as dropped, never trained. Optionally groups
whose responses all scored the same are filtered (they carry no GRPO signal, DAPO's
"dynamic sampling", arXiv 2503.14476).

Not here: who produces groups (the prefetch generator) and what is recorded about them
(the ledger); the buffer only orders, filters and hands out.
It reads only `seq`, `version` and `scores`, which RLVR's `Group` and the agentic
`EpisodeGroup` (envs sharing a seed; version = the policy of its first turn) both have.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flywheel.pipelines.rollout import Group


@dataclass
class Taken:
    groups: list[Group]
    stale: list[Group] = field(default_factory=list)
    filtered: list[Group] = field(default_factory=list)


@dataclass
class ReplayBuffer:
    max_staleness: int
    drop_uniform_groups: bool = False
    _groups: dict[int, Group] = field(default_factory=dict)  # seq -> group

    def __len__(self) -> int:
        return len(self._groups)

    def put(self, groups: list[Group]) -> None:
        for g in groups:
            self._groups[g.seq] = g

    def take(self, n: int, step: int) -> Taken | None:
        """`n` trainable groups for 0-based `step`, lowest seq first; None if too few yet.

        Stale and filtered groups are removed (and returned) only by a successful take,
        so what was dropped is reported with the step that dropped it.
        """
        verdicts = {seq: self._verdict(g, step) for seq, g in self._groups.items()}
        usable = sorted(seq for seq, v in verdicts.items() if v == "ok")
        if len(usable) < n:
            return None
        taken = Taken(groups=[self._groups.pop(seq) for seq in usable[:n]])
        for seq, verdict in verdicts.items():
            if verdict == "stale":
                taken.stale.append(self._groups.pop(seq))
            elif verdict == "filtered":
                taken.filtered.append(self._groups.pop(seq))
        return taken

    def _verdict(self, g: Group, step: int) -> str:
        if step - g.version > self.max_staleness:
            return "stale"
        if self.drop_uniform_groups and len(set(g.scores)) <= 1:
            return "filtered"
        return "ok"

    def snapshot(self) -> list[Group]:
        return [self._groups[seq] for seq in sorted(self._groups)]
