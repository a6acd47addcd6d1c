"""ROLL's sample masks by hand: difficulty_mask keeps a group only when low < mean < high
(both bounds exclusive), and a masked sample's rows of the response mask are zeroed."""

import torch

from flywheel.algorithms import difficulty_keep, mask_samples


def test_difficulty_keeps_groups_strictly_inside_the_bounds():
    scores = torch.tensor([1.0, 1.0, 1.0, 1.0,  # mean 1.0 >= 0.95: masked
                           0.0, 1.0, 0.0, 1.0,  # mean 0.5: kept
                           0.0, 0.0, 0.0, 0.0,  # mean 0.0 <= 0.1: masked
                           0.0, 0.0, 0.0, 1.0])  # mean 0.25: kept
    keep = difficulty_keep(scores, 4, low=0.1, high=0.95)
    assert keep.tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4


def test_a_mean_equal_to_a_bound_is_masked():
    scores = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # means 0.25 and 0.75
    assert difficulty_keep(scores, 4, low=0.25, high=0.75).tolist() == [False] * 8
    assert difficulty_keep(scores, 4, low=0.2, high=0.8).tolist() == [True] * 8


def test_one_sample_per_prompt_is_never_masked():
    assert difficulty_keep(torch.tensor([0.0, 1.0]), 1, low=0.1, high=0.9).all()


def test_mask_samples_zeroes_whole_rows():
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    out = mask_samples(mask, torch.tensor([True, False, True]))
    assert out.tolist() == [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
