"""The old log-probs taken from the training forward, when that is provably the same thing.

actor_train computes ℓ_old (the proximal policy's log-probs, flywheel/algorithms/
mismatch.py) inside its train call when the pipeline does not need them earlier
(flywheel/workers/train_worker.py `train_step`): by default one no-grad forward over the
batch, then the update loop (train_loop.py). When the update is exactly ONE optimizer
step (ppo_epochs 1 and the rank's rows fit one mini-batch), no weight changes between
that forward and any training forward of the step, so each micro-batch's training
forward already holds ℓ_old: its log-probs, detached. The separate pass is then pure
waste (a quarter of the step on SmolLM2 on CPU); verl takes the same shortcut for
on-policy updates. The policy ratio r = exp(ℓ − ℓ_old) is then exactly 1 in value and
the gradient is the one the separate pass gives (up to float rounding between batch
shapes).

Two conditions make the shortcut exact, and `can_fuse_old_logprobs` checks both:

- one optimizer step (`optimizer_steps_per_train_step` == 1);
- train mode computes what eval mode computes: the training forward runs in train mode,
  the separate pass in eval mode, so any active dropout (an `nn.Dropout` with p > 0, or
  a positive `*dropout*` / `*pdrop` field in the Hugging Face config: several models
  apply attention dropout functionally, with no module) or router noise (a positive
  `*jitter*` field: Mixtral's `router_jitter_noise` acts in train mode only) rules it
  out.

`FusedOldLogProbs` wraps the objective: per micro-batch it sets `old_log_probs` to the
detached log-probs and, when the mismatch correction is applied, `is_weights` from them
(both are per token or per row, so a micro-batch holds all it needs); it keeps the
micro-batches' log-probs so the off-policy metrics are computed once over the whole
batch, as the separate pass computes them.

A backend opts in through `TrainStrategy.fuses_old_logprobs` (hf_train, deepspeed_train).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from flywheel.algorithms import MismatchCorrection
from flywheel.config.schema import TrainingArgs
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.train_loop import (
    Counts,
    Objective,
    optimizer_steps_per_train_step,
)

DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                   nn.FeatureAlphaDropout)


def can_fuse_old_logprobs(model: nn.Module, args: TrainingArgs, rows: int,
                          ppo_epochs: int) -> bool:
    """Whether a train step of `rows` rows on this rank may take ℓ_old from its training
    forwards (see the module docstring)."""
    return (optimizer_steps_per_train_step(args, rows, ppo_epochs) == 1
            and not has_active_dropout(model))


def has_active_dropout(model: nn.Module) -> bool:
    """Randomness that train mode would apply: a dropout module with p > 0, or a positive
    dropout probability or router jitter anywhere in the model's Hugging Face config
    (nested configs too)."""
    if any(isinstance(m, DROPOUT_MODULES) and m.p > 0 for m in model.modules()):
        return True
    config = model.config.to_dict() if hasattr(model, "config") else {}
    return any(value > 0 for value in dropout_fields(config))


def dropout_fields(config: dict) -> Iterator[float]:
    for key, value in config.items():
        if isinstance(value, dict):
            yield from dropout_fields(value)
        elif (isinstance(key, str)
              and ("dropout" in key or key.endswith("pdrop") or "jitter" in key)
              and isinstance(value, int | float) and not isinstance(value, bool)):
            yield float(value)


@dataclass
class FusedOldLogProbs:
    """`objective` with ℓ_old (and the mismatch weights) taken from each micro-batch's own
    forward; `metrics()` afterwards gives the off-policy metrics over every row seen."""

    objective: Objective
    correction: MismatchCorrection
    # per micro-batch: (ℓ_old, ℓ_infer, response mask), each [b, L_micro], on its device
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    @property
    def needs_entropy(self) -> bool:
        return self.objective.needs_entropy

    def __call__(self, log_probs: torch.Tensor, entropy: torch.Tensor | None,
                 micro: TokenBatch, counts: Counts) -> tuple[torch.Tensor, dict[str, float]]:
        old = log_probs.detach()  # [b, L]
        weights = None
        if self.correction.apply:
            weights, _ = self.correction(old, micro.infer_log_probs, micro.response_mask)
        self.seen.append((old, micro.infer_log_probs, micro.response_mask))
        micro = dataclasses.replace(micro, old_log_probs=old, is_weights=weights)
        return self.objective(log_probs, entropy, micro, counts)

    def metrics(self) -> dict[str, float]:
        """The correction's metrics over all micro-batches, padded to one width (padding
        is off the response mask, so it counts nowhere)."""
        if not self.seen:
            return {}
        width = max(old.shape[1] for old, _, _ in self.seen)
        old, infer, mask = (torch.cat([F.pad(part[i], (0, width - part[i].shape[1]))
                                       for part in self.seen]) for i in range(3))
        return self.correction(old, infer, mask)[1]
