"""Gradients of the policy losses, and exact invariance under gradient accumulation."""

import math

import pytest
import torch

from flywheel.algorithms import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    compute_policy_loss,
    count_seqs,
    count_tokens,
)

N = 5  # valid tokens in the hand batch (conftest.py)


def grads(variant, hand, **hparams):
    """(dL/dℓ, dL/dℓ_old, dL/dA) for token-mean, with ℓ_old and A marked as needing grad."""
    old = hand.old_log_probs.clone().requires_grad_(True)
    adv = hand.advantages.clone().requires_grad_(True)
    loss, _ = compute_policy_loss(variant, hand.log_probs, old, adv, hand.mask,
                                  scores=hand.scores, loss_agg_mode="token-mean", **hparams)
    loss.backward()
    return hand.log_probs.grad, old.grad, adv.grad


def assert_grad(actual, expected_rows):
    # rows 0-1 by hand; padding (row 1 token 2, row 2) must get exactly 0
    expected = torch.tensor(expected_rows + [[0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)


def test_tis_grad_only_through_logprob(hand):
    d_lp, d_old, d_adv = grads("tis", hand)
    assert d_old is None and d_adv is None
    # -sg(clip(r,0,1))·A/N with w = [1, 0.7, 1 | 0.95, 1]
    assert_grad(d_lp, [[-1.0 / N, 0.7 / N, -2.0 / N], [0.95 * 2.0 / N, -0.5 / N, 0.0]])


def test_cispo_grad_only_through_logprob(hand):
    d_lp, d_old, d_adv = grads("cispo", hand)
    assert d_old is None and d_adv is None
    # w = clip(r, 0.9, 1.1) = [1.1, 0.9, 1 | 0.95, 1.1]: clipped tokens keep a gradient
    assert_grad(d_lp, [[-1.1 / N, 0.9 / N, -2.0 / N], [0.95 * 2.0 / N, -1.1 * 0.5 / N, 0.0]])


def test_cispo_unified_mask_grad(hand):
    d_lp, _, _ = grads("cispo", hand, cispo_use_unified_mask=True)
    assert_grad(d_lp, [[0.0, 0.0, -2.0 / N], [0.95 * 2.0 / N, 0.0, 0.0]])


def test_topr_grad_only_through_logprob(hand):
    d_lp, d_old, d_adv = grads("topr", hand, topr_positive_weight=0.5,
                               topr_negative_weight=2.0)
    assert d_old is None and d_adv is None
    # row 0 positive: -0.5·A/N; row 1: -2·clip(r,0,1)·A/N with clip = [0.95, 1]
    assert_grad(d_lp, [[-0.5 / N, 0.5 / N, -1.0 / N], [2 * 0.95 * 2.0 / N, -2 * 0.5 / N, 0.0]])


def test_ppo_grad_zero_where_clipped(hand):
    d_lp, d_old, _ = grads("ppo", hand)
    assert d_old is None
    # unclipped: d(-r·A)/dℓ = -r·A; clipped tokens (r=1.5, 0.7, 1.3) → 0
    assert_grad(d_lp, [[0.0, 0.0, -2.0 / N], [0.95 * 2.0 / N, 0.0, 0.0]])


def test_kimi15_and_vanilla_grad(hand):
    d_lp, _, _ = grads("vanilla", hand)
    assert_grad(d_lp, [[-1.0 / N, 1.0 / N, -2.0 / N], [2.0 / N, -0.5 / N, 0.0]])
    hand.log_probs.grad = None
    d_lp, _, _ = grads("kimi15", hand, kimi15_tau=0.1)
    # -A + τ·log r
    log = math.log
    assert_grad(d_lp, [
        [(-1.0 + 0.1 * log(1.5)) / N, (1.0 + 0.1 * log(0.7)) / N, -2.0 / N],
        [(2.0 + 0.1 * log(0.95)) / N, (-0.5 + 0.1 * log(1.3)) / N, 0.0],
    ])


def test_kimi15_seq_pulls_every_token_back_by_the_whole_responses_drift(hand):
    # the paper's form: -A + τ·D, D = the response's summed log-ratio (kimi15: τ·δ_t)
    d_lp, d_old, d_adv = grads("kimi15_seq", hand, kimi15_tau=0.1)
    assert d_old is None and d_adv is None
    d0, d1 = math.log(1.5 * 0.7 * 1.0), math.log(0.95 * 1.3)
    assert_grad(d_lp, [
        [(-1.0 + 0.1 * d0) / N, (1.0 + 0.1 * d0) / N, (-2.0 + 0.1 * d0) / N],
        [(2.0 + 0.1 * d1) / N, (-0.5 + 0.1 * d1) / N, 0.0],
    ])
    # its value per response is -A·Σℓ + (τ/2)·D² (seq-mean-token-sum: the mean of the two)
    loss, _ = compute_policy_loss("kimi15_seq", hand.log_probs, hand.old_log_probs,
                                  hand.advantages, hand.mask, loss_agg_mode="seq-mean-token-sum",
                                  kimi15_tau=0.1)
    rows = [-(1.0 * -1.0 + -1.0 * -0.5 + 2.0 * -2.0) + 0.05 * d0**2,
            -(-2.0 * -0.3 + 0.5 * -1.2) + 0.05 * d1**2]
    assert loss.item() == pytest.approx(sum(rows) / 2, abs=1e-12)


def test_topr_seq_truncates_the_trajectory_ratio(hand):
    d_lp, d_old, d_adv = grads("topr_seq", hand, topr_positive_weight=0.5,
                               topr_negative_weight=2.0)
    assert d_old is None and d_adv is None
    # row 1 (not positive): R = 0.95·1.3 > 1 truncates to 1 on both tokens (topr: [0.95, 1])
    assert_grad(d_lp, [[-0.5 / N, 0.5 / N, -1.0 / N], [2 * 2.0 / N, -2 * 0.5 / N, 0.0]])
    hand.log_probs.grad = None
    hand.old_log_probs[1, 1] += math.log(1.3 / 0.5)  # now r = [0.95, 0.5]: R = 0.475
    d_lp, _, _ = grads("topr_seq", hand, topr_negative_weight=2.0)
    torch.testing.assert_close(d_lp[1, :2], torch.tensor(
        [2 * 0.475 * 2.0 / N, -2 * 0.475 * 0.5 / N], dtype=torch.float64), rtol=1e-12, atol=0)


# Micro-batch invariance ------------------------------------------------------------------

B, T = 8, 6
HPARAMS = {"dual_clip_loss": True, "cispo_use_unified_mask": True, "tis_upper_bound": 1.2,
               "topr_negative_weight": 0.7, "kimi15_tau": 0.3}


def random_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    log_probs = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = log_probs + 0.6 * torch.randn(B, T, generator=g, dtype=torch.float64)  # r far from 1
    adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    lengths = torch.tensor([6, 1, 3, 0, 5, 2, 6, 4])  # uneven, one empty row
    mask = torch.arange(T).expand(B, T) < lengths.unsqueeze(-1)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    return log_probs, old, adv, mask, scores


def accumulated_grad(variant, mode, n_micro, use_global=True):
    log_probs, old, adv, mask, scores = random_batch()
    log_probs.requires_grad_(True)
    counts = {"global_num_tokens": count_tokens(mask), "global_num_seqs": count_seqs(mask)}
    total = 0.0
    for idx in torch.arange(B).chunk(n_micro):
        # trimmed to the micro-batch's longest row, as the train backends do (batch.py)
        w = max(int(mask[idx].sum(-1).max()), 1)
        loss, _ = compute_policy_loss(
            variant, log_probs[idx, :w], old[idx, :w], adv[idx, :w], mask[idx, :w],
            scores=scores[idx], loss_agg_mode=mode, norm_length=T,
            **(counts if use_global else {}), **HPARAMS,
        )
        loss.backward()
        total += loss.item()
    return log_probs.grad, total


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("variant", sorted(POLICY_LOSSES))
def test_micro_batch_invariance(variant, mode):
    full_grad, full_loss = accumulated_grad(variant, mode, 1)
    assert full_grad.abs().sum() > 0
    for n_micro in (2, 4):
        grad, loss = accumulated_grad(variant, mode, n_micro)
        torch.testing.assert_close(grad, full_grad, rtol=0, atol=1e-6)
        assert loss == pytest.approx(full_loss, abs=1e-6)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_local_normalisation_is_not_invariant(mode):
    # Guards the test above against passing trivially: without the global counts, splitting
    # this uneven batch changes the gradient.
    full_grad, _ = accumulated_grad("ppo", mode, 1, use_global=False)
    split_grad, _ = accumulated_grad("ppo", mode, 4, use_global=False)
    assert (split_grad - full_grad).abs().max() > 1e-3
