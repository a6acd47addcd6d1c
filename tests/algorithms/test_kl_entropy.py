"""KL estimators, KL loss / penalty, KL controllers and entropy, by hand."""

import math

import pytest
import torch

from flywheel.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    entropy_from_logits,
    entropy_loss,
    kl_estimate,
    kl_loss,
)

LP = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
REF = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)  # Δ = ℓ - ℓ_ref = [0.5, -1.0]


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        ("k1", [0.5, -1.0]),
        ("abs", [0.5, 1.0]),
        ("k2", [0.5 * 0.25, 0.5 * 1.0]),
        # exp(ℓ_ref - ℓ) - (ℓ_ref - ℓ) - 1
        ("k3", [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]),
    ],
)
def test_kl_estimators(estimator, expected):
    assert kl_estimate(LP, REF, estimator)[0].tolist() == pytest.approx(expected)


@pytest.mark.parametrize("estimator", ["k1", "abs", "k2", "k3"])
def test_a_token_outside_the_policys_kept_set_adds_no_kl(estimator):
    """ℓ = OUTSIDE_LOGIT (- log Z): probability 0 under the truncated policy, so no KL and
    a finite gradient (k3 was exp(1e4) = inf, k1 -1e4)."""
    log_probs = torch.tensor([[-1.0e4 - 2.3, -0.5]], requires_grad=True)
    ref = torch.tensor([[-3.0, -0.7]])
    kl = kl_estimate(log_probs, ref, estimator)
    assert kl[0, 0].item() == 0.0
    assert kl[0, 1].item() == pytest.approx(
        kl_estimate(torch.tensor([[-0.5]]), ref[:, 1:], estimator).item())
    kl.sum().backward()
    assert torch.isfinite(log_probs.grad).all() and log_probs.grad[0, 0] == 0


def test_unknown_estimator():
    with pytest.raises(ValueError, match="k3"):
        kl_estimate(LP, REF, "k4")


def test_kl_loss_value_and_gradient():
    lp = torch.tensor([[-1.0, -2.0, 7.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -1e4]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    loss, metrics = kl_loss(lp, ref, mask, 0.1, estimator="k3", loss_agg_mode="token-mean")
    k3 = [math.exp(-0.5) - 0.5, math.exp(1.0) - 2.0]
    assert loss.item() == pytest.approx(0.1 * sum(k3) / 2)
    assert metrics["kl/loss_mean"] == pytest.approx(sum(k3) / 2)
    loss.backward()
    assert ref.grad is None
    # d k3 / dℓ = 1 - exp(-Δ)
    assert lp.grad[0].tolist() == pytest.approx(
        [0.1 * (1 - math.exp(-0.5)) / 2, 0.1 * (1 - math.exp(1.0)) / 2, 0.0])


def test_apply_kl_penalty():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    lp = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, 5.0]])
    ref = torch.tensor([[-1.5, -0.5, -1.0], [-2.0, -1.0, -9.0]])  # k1 Δ: [.5, -.5, 0], [1, 0, pad]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards, metrics = apply_kl_penalty(scores, lp, ref, mask, kl_coef=0.5, estimator="k1")
    assert rewards[0].tolist() == pytest.approx([-0.25, 0.25, 1.0])
    assert rewards[1].tolist() == pytest.approx([-0.5, 2.0, 0.0])  # padding not penalised
    # per-sequence mean KL: row 0 → 0, row 1 → 0.5; batch mean 0.25
    assert metrics["kl/penalty_mean"] == pytest.approx(0.25)
    assert metrics["kl/coef"] == 0.5


def test_fixed_controller():
    ctl = FixedKLController(0.2)
    ctl.update(100.0, 256)
    assert ctl.value == 0.2


def test_adaptive_controller_moves_towards_target():
    # β ← β·(1 + clip(KL/target - 1, ±0.2)·n_steps/horizon)
    high = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    high.update(current_kl=12.0, n_steps=256)  # error 1 → clipped to 0.2
    assert high.value == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000))
    low = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    low.update(current_kl=5.4, n_steps=100)  # error -0.1
    assert low.value == pytest.approx(0.1 * (1 - 0.1 * 100 / 10000))
    on_target = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    on_target.update(current_kl=6.0, n_steps=100)
    assert on_target.value == pytest.approx(0.1)
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target_kl=0.0, horizon=10)


def test_entropy_from_logits():
    probs = torch.tensor([0.5, 0.25, 0.25])
    logits = torch.stack([torch.zeros(3), probs.log() + 7.0])  # shift-invariant
    logits = logits.unsqueeze(0).requires_grad_(True)  # [1, 2, 3]
    h = entropy_from_logits(logits)
    assert h[0].tolist() == pytest.approx([math.log(3), 1.5 * math.log(2)])
    masked_vocab = torch.tensor([[[0.0, 0.0, float("-inf")]]], requires_grad=True)
    h2 = entropy_from_logits(masked_vocab)
    assert h2.item() == pytest.approx(math.log(2))
    h2.sum().backward()
    assert torch.isfinite(masked_vocab.grad).all()


def test_entropy_loss_is_negative_bonus():
    entropy = torch.tensor([[1.0, 2.0], [3.0, 99.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, metrics = entropy_loss(entropy, mask, 0.01, loss_agg_mode="seq-mean-token-mean")
    assert loss.item() == pytest.approx(-0.01 * (1.5 + 3.0) / 2)
    assert metrics["entropy/mean"] == pytest.approx(2.0)


def test_entropy_of_a_truncated_distribution_has_a_finite_gradient():
    """Top-k / top-p leave -inf logits; the entropy bonus's gradient must stay finite
    (it was nan everywhere: 0 * -inf inside a `where`), and reach only kept tokens."""
    from flywheel.algorithms.sampled_distribution import SampledDistribution, entropy_of_logits

    raw = torch.randn(3, 5, 20, requires_grad=True)
    logits = SampledDistribution(temperature=0.7, top_k=6, top_p=0.9).logits(raw)
    entropy = entropy_of_logits(logits, torch.logsumexp(logits, dim=-1))
    kept = logits.softmax(-1)
    expected = -(kept * torch.log(kept.clamp_min(1e-30))).sum(-1)
    assert torch.allclose(entropy, expected, atol=1e-5)
    entropy.sum().backward()
    assert torch.isfinite(raw.grad).all()
    assert (raw.grad[torch.isinf(logits)] == 0).all() and raw.grad.abs().sum() > 0
