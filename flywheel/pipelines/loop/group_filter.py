"""Which scored groups carry a training signal: DAPO's dynamic sampling filter.

DAPO (arXiv 2503.14476, sec. 3.2) drops prompts whose samples are all right or all wrong:
their GRPO advantages are all zero, so they only shrink the effective batch. More
generally a group is kept only if its scores' mean lies in `mean_range` and their
(population) standard deviation is above `min_std`; `drop_uniform` is the DAPO case (all
scores equal). The replay buffer applies it as groups are scored, so the prefetch
generator can refill the batch at once; `max_gen_batches` caps the refilling: once a
batch has cost that many batches of groups, the rest of it is filled with whatever comes
(those groups are trained, and counted in `rollout/filter_cap_kept`), so a task the
policy always or never solves slows a run down but never stops it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flywheel.config.kinds import kind_of
from flywheel.config.schema import PipelineConfig


@dataclass(frozen=True)
class GroupFilter:
    drop_uniform: bool = False
    mean_range: tuple[float, float] | None = None  # kept if lo <= mean <= hi
    min_std: float = 0.0  # kept if std > min_std (when > 0)
    max_gen_batches: int = 10  # generated per trained batch, at most; 0: no cap

    def __post_init__(self) -> None:
        lo, hi = self.mean_range or (0.0, 0.0)
        if lo > hi or self.min_std < 0 or self.max_gen_batches < 0:
            raise ValueError(f"group filter: need group_filter_mean_range lo <= hi, "
                             f"group_filter_min_std >= 0 and max_num_gen_batches >= 0 (got "
                             f"{self.mean_range}, {self.min_std}, {self.max_gen_batches})")

    @property
    def active(self) -> bool:
        return self.drop_uniform or self.mean_range is not None or self.min_std > 0

    def keeps(self, scores: list[float]) -> bool:
        if not self.active or not scores:
            return True
        if self.drop_uniform and len(set(scores)) <= 1:
            return False
        mean = sum(scores) / len(scores)
        if self.mean_range is not None and not self.mean_range[0] <= mean <= self.mean_range[1]:
            return False
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
        return not (self.min_std > 0 and std <= self.min_std)


def group_filter(cfg: PipelineConfig) -> GroupFilter:
    """The config's filter; a kind whose groups train only when their scores differ
    (`drops_tied_groups`: online DPO's pairs) always drops the uniform ones."""
    band = cfg.group_filter_mean_range
    return GroupFilter(cfg.drop_uniform_groups or kind_of(cfg).drops_tied_groups,
                       tuple(band) if band else None, cfg.group_filter_min_std,
                       cfg.max_num_gen_batches)
