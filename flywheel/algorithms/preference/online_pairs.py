"""Online DPO's pairs: from each group of a prompt's scored samples, its best and its worst.

The policy samples `group_size` responses per prompt (rows laid group after group, as
RLVR's rollout lays them) and the rewards score them; each group then gives one pair, the
highest-scored sample as chosen and the lowest as rejected (the first of equal scores, so
the choice is deterministic): the rule of Self-Rewarding Language Models (Yuan et al.
2024, sec. 2.3: the highest- and lowest-scored of N responses, a pair with equal scores
discarded). TRL's OnlineDPOTrainer samples two responses per prompt and ranks them, the
group_size 2 case. A group whose scores are all equal holds no preference: it gives no
pair and is counted (`dropped`), never trained on as a tie.

Not yet wired: the step-loop kind that trains these pairs (pipelines/, issue 46 item 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OnlinePairs:
    chosen: torch.Tensor  # [P] long, row index of each pair's best sample
    rejected: torch.Tensor  # [P] long, row index of its worst sample
    groups: torch.Tensor  # [P] long, the group each pair came from
    dropped: int  # groups whose samples all scored the same

    def layout(self) -> torch.Tensor:
        """[2P] rows in the pair layout (chosen, rejected, chosen, ...): a batch's
        `select` of them, with pair_logprobs.pair_layout over range(P), trains the pairs."""
        return torch.stack([self.chosen, self.rejected], dim=1).reshape(-1)


def best_worst_pairs(scores: torch.Tensor, group_size: int) -> OnlinePairs:
    """The pairs of [N] `scores` of N = groups x group_size samples (module docstring)."""
    if group_size < 2 or scores.shape[0] % group_size:
        raise ValueError(f"{scores.shape[0]} scores do not form groups of {group_size} >= 2")
    grouped = scores.reshape(-1, group_size)  # [G, n]
    best, worst = grouped.argmax(dim=1), grouped.argmin(dim=1)  # [G] first of equals
    keep = grouped.max(dim=1).values > grouped.min(dim=1).values  # [G]
    base = torch.arange(grouped.shape[0]) * group_size  # [G] first row of each group
    groups = torch.nonzero(keep).flatten()
    return OnlinePairs((base + best)[keep], (base + worst)[keep], groups,
                       int((~keep).sum()))
