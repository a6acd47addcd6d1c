"""Train/infer mismatch correction: truncate and mask, token and sequence level, by hand."""

import math

import pytest
import torch

from flywheel.algorithms import compute_policy_loss, train_infer_mismatch_weights

# Trainer/sampler ratios w per token; row 1's last token is padding (ratio 9 must be ignored).
W = [[1.0, 3.0, 0.4], [1.5, 0.25, 9.0]]
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def logps():
    train = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -0.9]], dtype=torch.float64)
    infer = train - torch.tensor(W, dtype=torch.float64).log()
    return train.requires_grad_(True), infer


def weights_of(**kwargs):
    train, infer = logps()
    return train_infer_mismatch_weights(train, infer, MASK, **kwargs)


def assert_rows(weights, rows):
    for actual, expected in zip(weights.tolist(), rows, strict=True):
        assert actual == pytest.approx(expected)


def test_token_truncate():
    weights, m = weights_of(level="token", mode="truncate", upper=2.0)
    assert not weights.requires_grad
    assert_rows(weights, [[1.0, 2.0, 0.4], [1.5, 0.25, 0.0]])  # min(w, 2); padding 0
    assert m["offpolicy/truncated_frac"] == pytest.approx(1 / 5)
    assert m["offpolicy/masked_frac"] == 0.0
    assert m["offpolicy/ratio_mean"] == pytest.approx((1.0 + 3.0 + 0.4 + 1.5 + 0.25) / 5)
    assert m["offpolicy/ratio_max"] == pytest.approx(3.0)
    assert m["offpolicy/ratio_min"] == pytest.approx(0.25)
    k3 = sum(w - 1 - math.log(w) for w in (1.0, 3.0, 0.4, 1.5, 0.25)) / 5
    assert m["offpolicy/k3_kl"] == pytest.approx(k3)


def test_token_mask():
    weights, m = weights_of(level="token", mode="mask", lower=0.5, upper=2.0)
    assert_rows(weights, [[1.0, 0.0, 0.0], [1.5, 0.0, 0.0]])  # 3 and 0.4 and 0.25 outside
    assert m["offpolicy/masked_frac"] == pytest.approx(3 / 5)


def test_sequence_truncate():
    # row 0: 1·3·0.4 = 1.2; row 1: 1.5·0.25 = 0.375 (padding excluded)
    weights, m = weights_of(level="sequence", mode="truncate", upper=2.0)
    assert_rows(weights, [[1.2, 1.2, 1.2], [0.375, 0.375, 0.0]])
    assert m["offpolicy/ratio_mean"] == pytest.approx((1.2 + 0.375) / 2)
    assert m["offpolicy/ratio_max"] == pytest.approx(1.2)
    weights, m = weights_of(level="sequence", mode="truncate", upper=1.0)
    assert_rows(weights, [[1.0, 1.0, 1.0], [0.375, 0.375, 0.0]])
    assert m["offpolicy/truncated_frac"] == pytest.approx(3 / 5)


def test_sequence_mask():
    weights, m = weights_of(level="sequence", mode="mask", lower=0.5, upper=2.0)
    assert_rows(weights, [[1.2, 1.2, 1.2], [0.0, 0.0, 0.0]])
    assert m["offpolicy/masked_frac"] == pytest.approx(2 / 5)


def test_long_sequence_does_not_overflow():
    train = torch.zeros(1, 400)
    infer = torch.full((1, 400), -1.0)  # Σ log w = 400 → w = e^400
    weights, m = train_infer_mismatch_weights(train, infer, torch.ones(1, 400),
                                              level="sequence", mode="truncate", upper=2.0)
    assert torch.equal(weights, torch.full((1, 400), 2.0))
    assert all(math.isfinite(v) for v in m.values())


def test_empty_rows_and_errors():
    train, infer = logps()
    weights, m = train_infer_mismatch_weights(train, infer, torch.zeros(2, 3), level="sequence")
    assert weights.abs().sum() == 0 and m["offpolicy/ratio_mean"] == 0.0
    with pytest.raises(ValueError, match="level"):
        train_infer_mismatch_weights(train, infer, MASK, level="batch")
    with pytest.raises(ValueError, match="mode"):
        train_infer_mismatch_weights(train, infer, MASK, mode="clip")


def test_weights_feed_the_policy_loss():
    train, infer = logps()
    weights, _ = train_infer_mismatch_weights(train, infer, MASK, mode="truncate", upper=2.0)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, _ = compute_policy_loss("vanilla", train, train.detach(), adv, MASK,
                                  loss_agg_mode="token-mean", token_weights=weights)
    # -w·A·ℓ: row 0 (A=1): 1·1 + 2·2 + 0.4·0.5; row 1 (A=-1): -(1.5·0.3 + 0.25·1.1)
    assert loss.item() == pytest.approx((1.0 + 4.0 + 0.2 - 0.45 - 0.275) / 5)
