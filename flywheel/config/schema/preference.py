"""Preference learning (pipeline_type: dpo): the pairwise loss and where the pairs are.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition. Top-level, as ROLL writes
its DPO keys (`roll/pipeline/dpo/dpo_config.py`: ipo, beta, label_smoothing, chosen_key,
rejected_key). The losses and their papers: algorithms/preference/pair_losses.py. The keys
act in DPO runs only; elsewhere a value other than the default is refused
(config/checks/preference.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flywheel.platform.config.field_bounds import bounded


@dataclass
class PreferenceKeys:
    """The pairwise loss and the pair columns of a DPO run."""

    # The pairwise loss. sigmoid: DPO (Rafailov et al. 2023), -log sigma(beta h), h the
    # policy's log-ratio of chosen over rejected minus the reference's; with
    # label_smoothing it is cDPO. ipo: IPO (Azar et al. 2023), (h - 1/(2 beta))^2 on summed
    # log-probs (ROLL's and the paper's form; TRL averages over tokens): pick it when
    # preferences are near-deterministic and DPO would drive h without bound. simpo: SimPO
    # (Meng et al. 2024), no reference role, each response's log-prob averaged over its
    # tokens, target margin simpo_gamma. TRL's names (DPOConfig.loss_type, CPOConfig).
    dpo_loss_type: Literal["sigmoid", "ipo", "simpo"] = "sigmoid"
    # ROLL's switch for IPO: true is dpo_loss_type: ipo (written beside another
    # dpo_loss_type it is refused).
    ipo: bool = False
    # > 0. sigmoid: the strength of the implicit KL to the reference (TRL and ROLL: 0.1);
    # ipo: the target h is 1/(2 beta); simpo: the reward scale (its paper uses 2-10).
    beta: float = bounded(0.1, 0.0, low_open=True)
    # cDPO (Mitchell 2023): the probability that a pair's preference is flipped, in
    # [0, 0.5] (TRL's range; 0.5: no preference left); sigmoid and simpo only (refused
    # with ipo, whose loss has no such term).
    label_smoothing: float = bounded(0.0, 0.0, 0.5)
    # SimPO's target reward margin gamma (>= 0; its paper: 0.5-1.5); simpo only.
    simpo_gamma: float = bounded(0.5, 0.0)
    # The columns holding each record's preferred and dispreferred responses: text, or
    # chat messages ending with the assistant's reply (the prompt: data_args' prompt
    # column). ROLL's keys.
    chosen_key: str = "chosen"
    # The column of the dispreferred response, as chosen_key's.
    rejected_key: str = "rejected"
    # Reward-model training only: the column of each pair's margin m (a number >= 0: how
    # much better chosen is, e.g. a rating gap), trained as -log sigma(r_w - r_l - m)
    # (Llama 2's margin; TRL's `margin` column). Unset: no margin (m = 0).
    margin_key: str | None = None
    # A pair whose prompt + response + eos is over sequence_length tokens (unset:
    # prompt_length + response_length): drop it and count it (ROLL drops such pairs, without
    # a count), truncate: cut the responses' ends to fit (counted; a prompt that leaves no
    # room is dropped), error: refuse the data, naming file:line.
    overlong_pairs: Literal["drop", "truncate", "error"] = "drop"
    # A pair whose chosen and rejected responses are the same tokens (nothing to prefer):
    # error names its file:line; drop skips it and counts it.
    equal_pairs: Literal["drop", "error"] = "error"
