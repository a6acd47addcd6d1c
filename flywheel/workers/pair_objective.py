"""The pairwise objective: a DPO-family loss (algorithms/preference/) on the update loop.

Handed to a train backend's `train_step` like the actor's `ActorLoss` or SFT's
`CrossEntropy`; called per micro-batch with the policy's per-token log-probs of rows in the
pair layout (chosen at 2i, rejected at 2i + 1: pair_logprobs.py) and, for a loss with a
reference, the reference's in `micro.ref_log_probs` (computed before the step by the
reference role, or the LoRA base: the adapter disabled).

Scaling: each pair's loss is divided by the mini-batch's pairs (`counts.num_seqs / 2`:
every row of a pair has response tokens), so the micro-batch losses add up to the
mini-batch's mean pair loss however it is cut (train_loop.py's invariant). Metrics are
means over the micro-batch's pairs; the loop averages them over micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from flywheel.algorithms.preference import LOSS_NAMES
from flywheel.algorithms.preference.pair_logprobs import pair_logps
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
        logps = pair_logps(outputs, micro.response_mask, micro.ref_log_probs)
        out = PAIR_LOSSES[self.loss_type](logps, self.args)
        loss = out.losses.sum() / (counts.num_seqs / 2.0)
        return loss, pair_metrics(logps, out)
