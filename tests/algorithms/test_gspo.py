"""gspo against the hand batch (conftest.py): one ratio per response, the geometric mean of
its token ratios, clipped as a whole; the gradient worked out by hand."""

import math

import pytest
import torch

from flywheel.algorithms import compute_policy_loss

N = 5  # valid tokens
S0 = (1.5 * 0.7 * 1.0) ** (1 / 3)  # row 0: exp(mean log r) over its 3 tokens = 1.0164
S1 = (0.95 * 1.3) ** (1 / 2)  # row 1: over its 2 valid tokens (the padding excluded) = 1.1113


def gspo(hand, **hparams):
    return compute_policy_loss("gspo", hand.log_probs, hand.old_log_probs, hand.advantages,
                               hand.mask, loss_agg_mode="token-mean", **hparams)


def test_sequence_ratio_is_the_exp_of_the_mean_log_ratio(hand):
    _, metrics = gspo(hand, pg_clip=0.2)
    assert metrics["pg/seq_ratio_mean"] == pytest.approx((3 * S0 + 2 * S1) / N)
    # the token ratios are reported as ever; ppo would use them, gspo does not
    assert metrics["pg/ratio_mean"] == pytest.approx((1.5 + 0.7 + 1.0 + 0.95 + 1.3) / N)


def test_loss_and_gradient_by_hand(hand):
    # Both s inside [0.8, 1.2]: L_t = -s_i·A_t. Row 0 ΣA = 2, row 1 ΣA = -1.5.
    loss, metrics = gspo(hand, pg_clip=0.2)
    assert loss.item() == pytest.approx((-S0 * 2.0 + S1 * 1.5) / N)
    assert metrics["pg/clipfrac"] == 0.0
    loss.backward()
    # dL/dℓ_i,k = (1/N)·(-ΣA_i)·s_i/|y_i|, the same for every token of a row; 0 on padding
    row0, row1 = -2.0 * S0 / 3 / N, 1.5 * S1 / 2 / N
    expected = torch.tensor([[row0] * 3, [row1, row1, 0.0], [0.0] * 3], dtype=torch.float64)
    torch.testing.assert_close(hand.log_probs.grad, expected, rtol=0, atol=1e-12)


def test_the_clip_acts_on_the_whole_response(hand):
    # pg_clip 0.05: s1 = 1.111 > 1.05. Its A=-2 token keeps the unclipped 2·s1 (the larger
    # loss); its A=0.5 token takes -0.5·1.05 (clipped, no gradient). Row 0 (s0=1.016) is
    # untouched although two of its token ratios (1.5, 0.7) lie far outside the range.
    loss, metrics = gspo(hand, pg_clip=0.05)
    assert loss.item() == pytest.approx((-S0 * 2.0 + 2.0 * S1 - 0.5 * 1.05) / N)
    assert metrics["pg/clipfrac"] == pytest.approx(1 / N)
    loss.backward()
    row0 = -2.0 * S0 / 3 / N
    expected = [[row0] * 3, [2.0 * S1 / 2 / N] * 2 + [0.0], [0.0] * 3]
    torch.testing.assert_close(hand.log_probs.grad, torch.tensor(expected, dtype=torch.float64),
                               rtol=0, atol=1e-12)


def test_differs_from_token_level_ppo(hand):
    # guards the tests above: the same batch under ppo's token ratios gives another loss
    ppo, _ = compute_policy_loss("ppo", hand.log_probs, hand.old_log_probs, hand.advantages,
                                 hand.mask, loss_agg_mode="token-mean", pg_clip=0.2)
    loss, _ = gspo(hand, pg_clip=0.2)
    assert not math.isclose(ppo.item(), loss.item(), abs_tol=1e-3)
