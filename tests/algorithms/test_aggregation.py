"""aggregate_loss against hand-computed values, with a fully masked row and padding garbage."""

import pytest
import torch

from flywheel.algorithms import aggregate_loss, count_seqs, count_tokens, masked_mean

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2 fully masked
# valid entries: row 0 → 1, 2; row 1 → 4; two non-empty sequences, three tokens


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("seq-mean-token-mean", ((1 + 2) / 2 + 4 / 1) / 2),
        ("seq-mean-token-sum", ((1 + 2) + 4) / 2),
        ("seq-mean-token-sum-norm", ((1 + 2) / 3 + 4 / 3) / 2),  # T = 3
    ],
)
def test_modes_by_hand(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode, norm_length=3).item() == pytest.approx(expected)


def test_sum_norm_uses_norm_length():
    loss = aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=10)
    assert loss.item() == pytest.approx((3 / 10 + 4 / 10) / 2)
    # the same rows trimmed to their longest valid token: the constant, not the width
    trimmed = aggregate_loss(LOSS[:, :2], MASK[:, :2], "seq-mean-token-sum-norm", norm_length=10)
    assert trimmed.item() == pytest.approx(loss.item())
    with pytest.raises(ValueError, match="norm_length"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected"),
    [
        ("token-mean", {"global_num_tokens": 14}, 7 / 14),
        ("seq-mean-token-mean", {"global_num_seqs": 11}, 5.5 / 11),
        ("seq-mean-token-sum", {"global_num_seqs": 7, "global_num_tokens": 99}, 7 / 7),
        ("seq-mean-token-sum-norm", {"global_num_seqs": torch.tensor(2)}, (7 / 3) / 2),
    ],
)
def test_global_counts_replace_local_denominator(mode, kwargs, expected):
    assert aggregate_loss(LOSS, MASK, mode, norm_length=3, **kwargs).item() == pytest.approx(
        expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_garbage_under_mask_does_not_leak(mode):
    loss_mat = LOSS.clone().requires_grad_(True)
    poisoned = loss_mat + torch.tensor([[0, 0, float("nan")], [0, float("inf"), 0],
                                        [float("nan"), float("-inf"), 1e30]])
    loss = aggregate_loss(poisoned, MASK, mode, norm_length=3)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(loss_mat.grad).all()
    assert (loss_mat.grad[MASK == 0] == 0).all()


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_all_masked_is_zero(mode):
    loss = aggregate_loss(LOSS, torch.zeros(3, 3), mode, norm_length=3)
    assert loss.item() == 0.0


def test_counts_and_masked_mean():
    assert count_tokens(MASK).item() == 3
    assert count_seqs(MASK).item() == 2
    assert masked_mean(LOSS, MASK).item() == pytest.approx(7 / 3)
    assert masked_mean(LOSS, torch.zeros(3, 3)).item() == 0.0


def test_errors():
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'mean'"):
        aggregate_loss(LOSS, MASK, "mean")
    with pytest.raises(ValueError, match="global_num_tokens"):
        aggregate_loss(LOSS, MASK, "token-mean", global_num_seqs=4)
    with pytest.raises(ValueError, match="global_num_seqs"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-mean", global_num_tokens=4)
    with pytest.raises(ValueError, match="differ"):
        aggregate_loss(LOSS, MASK[:, :2], "token-mean")
