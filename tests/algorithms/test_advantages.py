"""Advantage estimators, whitening, clipping, token rewards, GAE and the value loss, by hand."""

import math

import pytest
import torch

from flywheel.algorithms import (
    advantage_clip,
    compute_advantages,
    compute_gae,
    reward_clip,
    scores_to_token_rewards,
    value_loss,
    whiten_advantages,
)

EPS = 1e-6


def test_grpo_group_normalisation_and_zero_std_group():
    scores = torch.tensor([0.0, 1.0, 2.0, 1.0, 1.0, 1.0])  # two groups of 3
    adv = compute_advantages("grpo", scores, 3, eps=EPS)
    # group 0: mean 1, population std sqrt(2/3); group 1: all equal → exactly 0
    s = math.sqrt(2 / 3) + EPS
    assert adv[:3].tolist() == pytest.approx([-1 / s, 0.0, 1 / s])
    assert adv[3:].tolist() == [0.0, 0.0, 0.0]


def test_grpo_zero_std_with_inexact_floats_is_exactly_zero():
    adv = compute_advantages("grpo", torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7, 0.7]), 3)
    assert adv.tolist() == [0.0] * 6
    assert torch.isfinite(adv).all()


def test_grpo_ignores_norm_types():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0])
    a = compute_advantages("grpo", scores, 2, norm_mean_type="batch", norm_std_type="none")
    assert a.tolist() == pytest.approx([0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0.0, 0.0])


def test_reinforce_plus_plus_batch_normalisation():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    adv = compute_advantages("reinforce", scores, 4, norm_mean_type="batch",
                             norm_std_type="batch", eps=EPS)
    # batch mean 0.5, population std 0.5 → ±0.5 / 0.5
    expected = [(s - 0.5) / (0.5 + EPS) for s in scores.tolist()]
    assert adv.tolist() == pytest.approx(expected)


def test_reinforce_group_mean_baseline_only():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    adv = compute_advantages("reinforce", scores, 4, norm_mean_type="group",
                             norm_std_type="none")
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25])


def test_reinforce_group_mean_batch_std():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    adv = compute_advantages("reinforce", scores, 4, norm_mean_type="group",
                             norm_std_type="batch", eps=EPS)
    centred = [0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25]
    assert adv.tolist() == pytest.approx([c / (0.5 + EPS) for c in centred])


def test_reinforce_no_normalisation_is_raw_scores():
    scores = torch.tensor([3.0, -1.0])
    adv = compute_advantages("reinforce", scores, 2, norm_mean_type="none", norm_std_type="none")
    assert adv.tolist() == [3.0, -1.0]


def test_reinforce_constant_batch_gives_zero():
    adv = compute_advantages("reinforce", torch.full((4,), 2.0), 2, norm_mean_type="batch",
                             norm_std_type="batch")
    assert adv.tolist() == [0.0] * 4


def test_advantage_errors():
    with pytest.raises(ValueError, match="adv_estimator"):
        compute_advantages("ppo", torch.zeros(4), 2)
    with pytest.raises(ValueError, match="norm_std_type"):
        compute_advantages("reinforce", torch.zeros(4), 2, norm_std_type="token")
    with pytest.raises(ValueError, match="multiple of group_size"):
        compute_advantages("grpo", torch.zeros(5), 2)


def test_whiten_advantages_masked():
    adv = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, -100.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    # valid values 1, 2, 3, 4: mean 2.5, population var (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    out = whiten_advantages(adv, mask, eps=0.0)
    sd = math.sqrt(1.25)
    assert out[0].tolist() == pytest.approx([-1.5 / sd, -0.5 / sd, 0.5 / sd])
    assert out[1].tolist() == pytest.approx([1.5 / sd, 0.0, 0.0])
    scaled = whiten_advantages(adv, mask, shift_mean=False, eps=0.0)
    assert scaled[0, 0].item() == pytest.approx(-1.5 / sd + 2.5)
    assert scaled[1, 1].item() == 0.0


def test_clips():
    x = torch.tensor([-5.0, -0.5, 0.5, 5.0])
    assert reward_clip(x, 1.0).tolist() == [-1.0, -0.5, 0.5, 1.0]
    assert advantage_clip(x, 2.0).tolist() == [-2.0, -0.5, 0.5, 2.0]
    with pytest.raises(ValueError):
        reward_clip(x, 0.0)


def test_scores_to_token_rewards_last_valid_token():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]])
    rewards = scores_to_token_rewards(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert rewards.tolist() == [[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 4.0]]


def test_gae_three_steps_by_hand():
    gamma, lam = 0.9, 0.8  # γλ = 0.72
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [0.5, 0.6, 9.9], [0.5, 9.9, 0.7]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 1]])
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    # row 0: δ2 = 1 - 0.7 = 0.3;            Â2 = 0.3
    #        δ1 = 0.9·0.7 - 0.6 = 0.03;     Â1 = 0.03 + 0.72·0.3 = 0.246
    #        δ0 = 0.9·0.6 - 0.5 = 0.04;     Â0 = 0.04 + 0.72·0.246 = 0.21712
    assert adv[0].tolist() == pytest.approx([0.21712, 0.246, 0.3])
    assert ret[0].tolist() == pytest.approx([0.71712, 0.846, 1.0])
    # row 1 (trailing pad; V after the last valid token is 0):
    #        δ1 = 1 - 0.6 = 0.4; Â0 = 0.04 + 0.72·0.4 = 0.328
    assert adv[1].tolist() == pytest.approx([0.328, 0.4, 0.0])
    assert ret[1].tolist() == pytest.approx([0.828, 1.0, 0.0])
    # row 2 (interior masked token is skipped): Â2 = 0.3; δ0 = 0.9·0.7 - 0.5 = 0.13,
    #        Â0 = 0.13 + 0.72·0.3 = 0.346
    assert adv[2].tolist() == pytest.approx([0.346, 0.0, 0.3])


def test_value_loss_clipped_by_hand():
    values = torch.tensor([[0.0, 2.0]], requires_grad=True)
    old_values = torch.tensor([[1.0, 1.5]])
    returns = torch.tensor([[0.1, 0.0]])
    mask = torch.ones(1, 2)
    # token 0: (0 - 0.1)² = 0.01 vs clipped V = 0.8 → 0.49 → clipped branch, ½·0.49
    # token 1: (2 - 0)² = 4 vs clipped V = 1.7 → 2.89 → unclipped, ½·4
    loss, metrics = value_loss(values, old_values, returns, mask, value_clip=0.2)
    assert loss.item() == pytest.approx((0.245 + 2.0) / 2)
    assert metrics["vf/clipfrac"] == pytest.approx(0.5)
    loss.backward()
    assert values.grad[0].tolist() == pytest.approx([0.0, (2.0 - 0.0) / 2])
    plain, _ = value_loss(values, old_values, returns, mask)
    assert plain.item() == pytest.approx(0.5 * (0.01 + 4.0) / 2)
