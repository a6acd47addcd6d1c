"""Step credit (GiGPO, step_reinforce) and batch_adjust_mode against numbers worked out by
hand (algorithms/step_credit.py)."""

from __future__ import annotations

import pytest
import torch

from flywheel.algorithms.step_credit import (
    anchor_ids,
    fitted_rows,
    gigpo_advantages,
    normalize_within,
)

# One group of two episodes. A: rewards [0, 1], B: rewards [0, 0, 0]; gamma 0.5 gives the
# turn returns G = A [0.5, 1], B [0, 0, 0]. Anchors: both turn 0s saw the start (0), A's
# and B's turn 1 saw the same observation (1), B's turn 2 another (2).
SCORES = torch.tensor([1.0, 0.0])  # R(tau) per episode
GROUPS = (torch.tensor([0, 0]), torch.tensor([0, 0]))
RETURNS = torch.tensor([0.5, 1.0, 0.0, 0.0, 0.0])
EPISODE = torch.tensor([0, 0, 1, 1, 1])
ANCHOR = torch.tensor(anchor_ids([(0, "start"), (0, "x"), (0, "start"), (0, "x"), (0, "y")]))


def test_anchor_ids_number_distinct_states_in_order():
    assert ANCHOR.tolist() == [0, 1, 0, 1, 2]


def test_gigpo_mean_std_by_hand():
    # episode part: (1 - .5)/.5 = +1, -1. anchor 0: (.5, 0) -> +1, -1; anchor 1: (1, 0) ->
    # +1, -1; anchor 2 is one turn: 0. A = 1 * episode + 0.5 * step.
    adv = gigpo_advantages(SCORES, GROUPS, RETURNS, EPISODE, ANCHOR, center=True,
                           scale=True, episode_weight=1.0, step_weight=0.5)
    assert adv.tolist() == pytest.approx([1.5, 1.5, -1.5, -1.5, -1.0], abs=1e-4)


def test_gigpo_mean_only_as_rolls_configs():
    # ROLL's GiGPO examples: reward_normalization method mean. episode: +.5, -.5;
    # anchor 0: +.25, -.25; anchor 1: +.5, -.5; anchor 2: 0.
    adv = gigpo_advantages(SCORES, GROUPS, RETURNS, EPISODE, ANCHOR, center=True,
                           scale=False, episode_weight=1.0, step_weight=1.0)
    assert adv.tolist() == pytest.approx([0.75, 1.0, -0.75, -1.0, -0.5], abs=1e-6)


def test_step_reinforce_over_the_batch_by_hand():
    # mean 0.3; deviations .2 .7 -.3 -.3 -.3; population var .8 / 5 = .16, std .4
    adv = normalize_within(RETURNS, torch.zeros(5, dtype=torch.long), True, True)
    assert adv.tolist() == pytest.approx([0.5, 1.75, -0.75, -0.75, -0.75], abs=1e-4)


def test_mean_and_std_over_different_sets():
    # mean over the batch (0.3), std over each episode: A's returns (.5, 1) std .25,
    # B's all 0 -> std 0 -> 0
    adv = normalize_within(RETURNS, torch.zeros(5, dtype=torch.long), True, True,
                           std_sets=EPISODE)
    assert adv.tolist() == pytest.approx([0.8, 2.8, 0.0, 0.0, 0.0], abs=1e-4)


def rows(n, multiple, mode, seed=0):
    return fitted_rows(n, multiple, mode, torch.Generator().manual_seed(seed))


def test_batch_adjust_modes_as_roll():
    assert rows(8, 4, "copy").tolist() == list(range(8))  # already whole: unchanged
    kept = rows(10, 4, "delete")
    assert len(kept) == 8 and len(set(kept.tolist())) == 8 and kept.tolist() == sorted(kept)
    copied = rows(10, 4, "copy")
    assert len(copied) == 12 and copied[:10].tolist() == list(range(10))
    assert len(rows(10, 4, "auto")) == 8  # remainder 2 < half of 10: delete
    assert len(rows(11, 4, "auto")) == 8  # 3 < 5.5: delete
    assert len(rows(10, 16, "auto")) == 16  # under one multiple: copy
    sample = rows(10, 4, "random_sample")
    assert len(sample) == 4 and len(set(sample.tolist())) == 4  # exactly one global batch
    assert len(rows(3, 4, "random_sample")) == 4 and len(rows(3, 4, "delete")) == 4
    assert len(rows(3, 16, "copy")) == 16  # more copies than rows: drawn with replacement
    assert rows(10, 4, "none").tolist() == list(range(10))
    with pytest.raises(ValueError, match="batch_adjust_mode"):
        rows(10, 4, "shuffle")
