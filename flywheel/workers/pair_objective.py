"""The pairwise objective: a DPO-family loss (algorithms/preference/) on the update loop.

Handed to a train backend's `train_step` like the actor's `ActorLoss` or SFT's
`CrossEntropy`; called per micro-batch with the policy's per-token log-probs of rows in the
pair layout (the `pair` batch extra says which rows pair up: pair_logprobs.py) and, for a
loss with a reference, the reference's in `micro.ref_log_probs` (computed before the step
by the frozen reference, or the LoRA base: the adapter disabled).

Scaling: each pair's loss is divided by the mini-batch's pairs (`counts.num_seqs / 2`:
every row of a pair has response tokens), so the micro-batch losses add up to the
mini-batch's mean pair loss however it is cut (train_loop.py's invariant). Metrics are
means over the micro-batch's pairs; the loop averages them over micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from flywheel.algorithms.preference import LOSS_NAMES
from flywheel.algorithms.preference.bradley_terry import (
    bradley_terry_loss,
    bradley_terry_metrics,
)
from flywheel.algorithms.preference.pair_logprobs import (
    PAIR_EXTRA,
    pair_logps,
    sequence_sums,
    split_pairs,
)
from flywheel.algorithms.preference.pair_losses import PAIR_LOSSES, PairLossArgs, pair_metrics
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.train_loop import Counts


@dataclass(frozen=True)
class PairObjective:
    loss_type: str = "sigmoid"  # a key of PAIR_LOSSES (dpo_loss_type)
    args: PairLossArgs = field(default_factory=PairLossArgs)
    needs_entropy = False

    @property
    def needs_reference(self) -> bool:
        return LOSS_NAMES[self.loss_type]

    def __call__(self, outputs: torch.Tensor, entropy: torch.Tensor | None,
                 micro: TokenBatch, counts: Counts) -> tuple[torch.Tensor, dict[str, float]]:
        logps = pair_logps(outputs, micro.response_mask, micro.extra(PAIR_EXTRA),
                           micro.ref_log_probs)
        out = PAIR_LOSSES[self.loss_type](logps, self.args)
        loss = out.losses.sum() / (counts.num_seqs / 2.0)
        return loss, pair_metrics(logps, out)


MARGIN_EXTRA = "pair_margin"  # [2P] per sample: each pair's Bradley-Terry margin


@dataclass(frozen=True)
class BradleyTerryObjective:
    """The reward model's objective over the value head (algorithms/preference/
    bradley_terry.py): each row is a rendered (prompt, response) and one read position
    after it, the only response token, so `outputs` there is the head at the row's last
    real token (token_values shifts by one: V at t reads position t - 1), where a
    `*ForSequenceClassification` model reads its score (workers/rewards/reward_model.py)."""

    needs_entropy = False

    def __call__(self, outputs: torch.Tensor, entropy: torch.Tensor | None,
                 micro: TokenBatch, counts: Counts) -> tuple[torch.Tensor, dict[str, float]]:
        scores = sequence_sums(outputs, micro.response_mask)  # [2P]
        pair = micro.extra(PAIR_EXTRA)
        chosen, rejected = split_pairs(scores, pair)
        margin = None
        if MARGIN_EXTRA in micro.extras:  # margin_key: the pair's margin on both its rows
            margin = split_pairs(micro.extra(MARGIN_EXTRA).to(scores.device), pair)[0]
        losses = bradley_terry_loss(chosen, rejected, margin)
        loss = losses.sum() / (counts.num_seqs / 2.0)
        return loss, bradley_terry_metrics(chosen, rejected, losses)
