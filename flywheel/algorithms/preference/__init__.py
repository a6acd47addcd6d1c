"""Preference learning's maths: pairwise losses on (chosen, rejected) responses.

What this package owns
    pair_losses.py     the DPO family by name (`PAIR_LOSSES`): sigmoid DPO with cDPO label
                       smoothing, IPO, SimPO (reference-free); their rewards and metrics.
    bradley_terry.py   the reward-model loss on a scalar head's two scores (optional margin).
    pair_logprobs.py   a pair's sequence log-probs from per-token ones of one forward over
                       both responses (the pair layout, a batch extra saying which rows pair).
    online_pairs.py    online DPO's pairs: a group's best and worst sample, ties counted.

What it deliberately does not own
    No data files, no models, no config objects: the pipeline (pipelines/dpo/) reads the
    pairs, the train worker runs the forward, the config maps its keys onto these floats.
    Like the rest of `flywheel.algorithms`, torch is imported by the modules, not by this
    package: `LOSS_NAMES` below is what the config checks read without it.

How to extend
    A new pairwise loss: a function in pair_losses.py (cite its paper and equation beside
    it) and one line in `PAIR_LOSSES`, and its name here.
"""

from __future__ import annotations

# `dpo_loss_type` values, in the order of pair_losses.PAIR_LOSSES; whether each needs the
# reference policy's log-probs (SimPO does not, Meng et al. 2024)
LOSS_NAMES: dict[str, bool] = {"sigmoid": True, "ipo": True, "simpo": False}
