"""Each pg_variant against numbers worked out by hand from its formula (see conftest.py for
the batch: ratios r, advantages A, log-probs ℓ; 5 valid tokens, one all-masked row)."""

import dataclasses
import math

import pytest
import torch

from flywheel.algorithms import POLICY_LOSSES, PolicyLossParams, compute_policy_loss

N = 5  # valid tokens in the hand batch


def loss_of(variant, hand, mode="token-mean", **hparams):
    loss, metrics = compute_policy_loss(
        variant, hand.log_probs, hand.old_log_probs, hand.advantages, hand.mask,
        scores=hand.scores, loss_agg_mode=mode, norm_length=3, **hparams,
    )
    return loss.item(), metrics


def test_vanilla_is_minus_a_times_logprob(hand):
    # -A·ℓ per valid token: (-1·-1) + (1·-0.5) + (-2·-2) + (2·-0.3) + (-0.5·-1.2)
    loss, metrics = loss_of("vanilla", hand)
    assert loss == pytest.approx((1.0 - 0.5 + 4.0 - 0.6 + 0.6) / N)
    assert metrics["pg/clipfrac"] == 0.0


def test_ppo_symmetric_clip(hand):
    # max(-r·A, -clip(r, 0.8, 1.2)·A):
    #   r=1.5,A=1 → max(-1.5, -1.2) = -1.2 (clipped)   r=0.7,A=-1 → max(0.7, 0.8) = 0.8 (clipped)
    #   r=1,A=2 → -2                                    r=0.95,A=-2 → 1.9
    #   r=1.3,A=0.5 → max(-0.65, -0.6) = -0.6 (clipped)
    loss, metrics = loss_of("ppo", hand, pg_clip=0.2)
    assert loss == pytest.approx((-1.2 + 0.8 - 2.0 + 1.9 - 0.6) / N)
    assert metrics["pg/clipfrac"] == pytest.approx(3 / N)


def test_ppo_clip_range_uses_low_and_high(hand):
    # range [0.8, 1.28]: r=1.5 → -1.28, r=1.3 → max(-0.65, -0.64) = -0.64; others as above.
    loss, _ = loss_of("ppo", hand, use_pg_clip_range=True, pg_clip_low=0.2, pg_clip_high=0.28,
                      pg_clip=0.5)
    assert loss == pytest.approx((-1.28 + 0.8 - 2.0 + 1.9 - 0.64) / N)


def test_ppo_dual_clip_caps_negative_advantage_loss():
    # r = [5, 2, 5], A = [-1, -1, 1]. PPO: max(5, 1.2)=5, max(2, 1.2)=2, max(-5, -1.2)=-1.2.
    # Dual clip c=3 caps A<0 tokens at -c·A = 3: 5 → 3, 2 stays, the A>0 token is untouched.
    log_probs = torch.tensor([[-1.0, -1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    old = log_probs.detach() - torch.log(torch.tensor([[5.0, 2.0, 5.0]], dtype=torch.float64))
    adv = torch.tensor([[-1.0, -1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3)
    plain, _ = compute_policy_loss("ppo", log_probs, old, adv, mask, loss_agg_mode="token-mean")
    assert plain.item() == pytest.approx((5.0 + 2.0 - 1.2) / 3)
    dual, metrics = compute_policy_loss("ppo", log_probs, old, adv, mask,
                                        loss_agg_mode="token-mean", dual_clip_loss=True,
                                        dual_clip_c=3.0)
    assert dual.item() == pytest.approx((3.0 + 2.0 - 1.2) / 3)
    assert metrics["pg/dual_clipfrac"] == pytest.approx(1 / 3)
    dual.backward()
    # capped token: constant → 0; token 1: d(-r·A)/dℓ = -A·r = 2, /3; token 2 clipped → 0
    assert log_probs.grad[0].tolist() == pytest.approx([0.0, 2.0 / 3, 0.0])


def test_tis_default_bounds(hand):
    # w = clip(r, 0, 1) = [1, 0.7, 1 | 0.95, 1];  -w·A·ℓ
    loss, metrics = loss_of("tis", hand)
    assert loss == pytest.approx((1.0 - 0.35 + 4.0 - 0.57 + 0.6) / N)
    assert metrics["pg/clipfrac"] == pytest.approx(2 / N)  # r=1.5 and r=1.3 truncated


def test_tis_custom_bounds(hand):
    # w = clip(r, 0.8, 1.2) = [1.2, 0.8, 1 | 0.95, 1.2]
    loss, metrics = loss_of("tis", hand, tis_lower_bound=0.8, tis_upper_bound=1.2)
    assert loss == pytest.approx((1.2 - 0.4 + 4.0 - 0.57 + 0.72) / N)
    assert metrics["pg/clipfrac"] == pytest.approx(3 / N)


def test_topr_splits_by_score(hand):
    # row 0 (score 1 > 0): -A·ℓ = 1, -0.5, 4. row 1 (score 0): -clip(r,0,1)·A·ℓ = -0.57, 0.6
    loss, metrics = loss_of("topr", hand)
    assert loss == pytest.approx((1.0 - 0.5 + 4.0 - 0.57 + 0.6) / N)
    assert metrics["pg/clipfrac"] == pytest.approx(1 / N)  # row 1's r=1.3 truncated to 1
    assert metrics["pg/topr_positive_frac"] == pytest.approx(3 / N)


def test_topr_weights(hand):
    loss, _ = loss_of("topr", hand, topr_positive_weight=0.5, topr_negative_weight=2.0)
    assert loss == pytest.approx((0.5 * (1.0 - 0.5 + 4.0) + 2.0 * (-0.57 + 0.6)) / N)


def test_topr_needs_scores(hand):
    with pytest.raises(ValueError, match="scores"):
        compute_policy_loss("topr", hand.log_probs, hand.old_log_probs, hand.advantages,
                            hand.mask)


def test_cispo(hand):
    # w = clip(r, 0.9, 1.1) = [1.1, 0.9, 1 | 0.95, 1.1]; -w·A·ℓ
    loss, metrics = loss_of("cispo", hand)
    assert loss == pytest.approx((1.1 - 0.45 + 4.0 - 0.57 + 0.66) / N)
    assert metrics["pg/clipfrac"] == pytest.approx(3 / N)


def test_cispo_unified_mask(hand):
    # dropped: A>0 & r>1.1 (r=1.5, r=1.3), A<0 & r<0.9 (r=0.7). Kept: 4 and -0.57.
    # Dropped tokens still count in the token-mean denominator.
    loss, metrics = loss_of("cispo", hand, cispo_use_unified_mask=True)
    assert loss == pytest.approx((4.0 - 0.57) / N)
    assert metrics["pg/cispo_masked_frac"] == pytest.approx(3 / N)


def test_kimi15(hand):
    # -A·ℓ + (τ/2)·(log r)², τ = 0.1
    sq = sum(math.log(r) ** 2 for r in (1.5, 0.7, 1.0, 0.95, 1.3))
    loss, _ = loss_of("kimi15", hand, kimi15_tau=0.1)
    assert loss == pytest.approx((1.0 - 0.5 + 4.0 - 0.6 + 0.6 + 0.05 * sq) / N)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # PPO per-token losses: row 0 = [-1.2, 0.8, -2], row 1 = [1.9, -0.6], row 2 empty.
        ("token-mean", (-1.2 + 0.8 - 2.0 + 1.9 - 0.6) / 5),
        ("seq-mean-token-mean", ((-1.2 + 0.8 - 2.0) / 3 + (1.9 - 0.6) / 2) / 2),
        ("seq-mean-token-sum", ((-1.2 + 0.8 - 2.0) + (1.9 - 0.6)) / 2),
        ("seq-mean-token-sum-norm", ((-1.2 + 0.8 - 2.0) / 3 + (1.9 - 0.6) / 3) / 2),
    ],
)
def test_aggregation_modes_through_ppo(hand, mode, expected):
    loss, _ = loss_of("ppo", hand, mode=mode)
    assert loss == pytest.approx(expected)


def test_ratio_metrics(hand):
    _, metrics = loss_of("vanilla", hand)
    ratios = [1.5, 0.7, 1.0, 0.95, 1.3]  # valid tokens only; padding ratios never counted
    assert metrics["pg/ratio_mean"] == pytest.approx(sum(ratios) / 5)
    assert metrics["pg/ratio_max"] == pytest.approx(1.5)
    assert metrics["pg/ratio_min"] == pytest.approx(0.7)
    assert metrics["pg/approx_kl"] == pytest.approx(sum(r - 1 - math.log(r) for r in ratios) / 5)
    assert all(name.startswith("pg/") for name in metrics)
    assert all(isinstance(value, float) for value in metrics.values())


def test_sequence_advantages_broadcast(hand):
    adv_b = torch.tensor([0.5, -2.0, 0.0], dtype=torch.float64)
    loss_b, _ = compute_policy_loss("vanilla", hand.log_probs, hand.old_log_probs, adv_b,
                                    hand.mask, loss_agg_mode="token-mean")
    # -A·ℓ with A broadcast per row: row 0 → 0.5·(1 + 0.5 + 2), row 1 → -2·(0.3 + 1.2)
    assert loss_b.item() == pytest.approx((0.5 * 3.5 - 2.0 * 1.5) / 5)


def test_token_weights_scale_per_token_loss(hand):
    weights = torch.tensor([[2.0, 0.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    loss, _ = compute_policy_loss("vanilla", hand.log_probs, hand.old_log_probs,
                                  hand.advantages, hand.mask, loss_agg_mode="token-mean",
                                  token_weights=weights)
    assert loss.item() == pytest.approx((2.0 * 1.0 + 0.0 + 4.0 - 0.6 + 0.6) / 5)


def test_all_masked_batch_is_zero_not_nan(hand):
    for variant in POLICY_LOSSES:
        loss, metrics = compute_policy_loss(
            variant, hand.log_probs, hand.old_log_probs, hand.advantages,
            torch.zeros(3, 3), scores=hand.scores,
        )
        assert loss.item() == 0.0
        assert all(math.isfinite(value) for value in metrics.values())


def test_unknown_variant_lists_known_ones(hand):
    with pytest.raises(ValueError, match=r"unknown pg_variant 'grpo'.*cispo"):
        compute_policy_loss("grpo", hand.log_probs, hand.old_log_probs, hand.advantages,
                            hand.mask)


def test_unknown_hparam_is_named(hand):
    with pytest.raises(TypeError, match="pg_clip_hi"):
        compute_policy_loss("ppo", hand.log_probs, hand.old_log_probs, hand.advantages,
                            hand.mask, pg_clip_hi=0.3)


def test_bad_shapes_raise(hand):
    with pytest.raises(ValueError, match="advantages"):
        compute_policy_loss("ppo", hand.log_probs, hand.old_log_probs, torch.zeros(3, 2),
                            hand.mask)
    with pytest.raises(ValueError, match="must all be"):
        compute_policy_loss("ppo", hand.log_probs, hand.old_log_probs[:, :2],
                            hand.advantages, hand.mask)


def test_params_defaults_and_overrides(hand):
    p = PolicyLossParams()
    expected = {
        "pg_clip": 0.2, "use_pg_clip_range": False, "pg_clip_low": 0.2, "pg_clip_high": 0.28,
        "dual_clip_loss": False, "dual_clip_c": 3.0, "tis_lower_bound": 0.0, "tis_upper_bound": 1.0,
        "topr_positive_weight": 1.0, "topr_negative_weight": 1.0, "cispo_epsilon_low": 0.1,
        "cispo_epsilon_high": 0.1, "cispo_use_unified_mask": False, "kimi15_tau": 0.1,
    }
    assert dataclasses.asdict(p) == expected
    # params object, then a keyword override on top of it
    params = PolicyLossParams(pg_clip=0.5)
    loose, _ = compute_policy_loss("ppo", hand.log_probs, hand.old_log_probs, hand.advantages,
                                   hand.mask, loss_agg_mode="token-mean", params=params)
    # clip(r, 0.5, 1.5): r=1.5 → -1.5, r=0.7 → 0.7, r=1.3 → -0.65
    assert loose.item() == pytest.approx((-1.5 + 0.7 - 2.0 + 1.9 - 0.65) / 5)
    tight, _ = compute_policy_loss("ppo", hand.log_probs, hand.old_log_probs, hand.advantages,
                                   hand.mask, loss_agg_mode="token-mean", params=params,
                                   pg_clip=0.2)
    assert tight.item() == pytest.approx((-1.2 + 0.8 - 2.0 + 1.9 - 0.6) / 5)


@pytest.mark.parametrize(
    "bad", [{"pg_clip": -0.1}, {"dual_clip_c": 1.0}, {"tis_lower_bound": 2.0},
            {"kimi15_tau": -1.0}],
)
def test_params_validation(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        PolicyLossParams(**bad)


@pytest.mark.parametrize("variant", sorted(POLICY_LOSSES))
def test_a_token_outside_the_old_policys_kept_set_takes_no_part_and_is_counted(variant):
    """ℓ_old = OUTSIDE_LOGIT at a sampled token (a bf16 old-log-prob pass that puts an edge
    token of the top-p set outside it): r would be exp(1e4) = inf. The token adds nothing
    to the loss or its gradient, the others train as before, and the fraction is reported."""
    from flywheel.algorithms.policy_loss.compute import takes_response_mask
    from flywheel.algorithms.policy_loss.registry import get_policy_loss
    from flywheel.algorithms.sampled_distribution import OUTSIDE_LOGIT

    torch.manual_seed(0)
    log_probs = (-torch.rand(2, 4) - 0.1).requires_grad_()
    old = log_probs.detach() + 0.05 * torch.randn(2, 4)
    advantages = torch.tensor([[1.0, -1.0, 0.5, -2.0], [-1.0, 2.0, -0.5, 1.0]])
    mask = torch.ones(2, 4)
    scores = torch.tensor([1.0, -1.0])
    outside_old = old.clone()
    outside_old[0, 1] = OUTSIDE_LOGIT  # a negative-advantage token: PPO's loss would be inf
    loss, metrics = compute_policy_loss(variant, log_probs, outside_old, advantages, mask,
                                        scores=scores, loss_agg_mode="seq-mean-token-sum")
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(log_probs.grad).all()
    assert log_probs.grad[0, 1] == 0
    assert metrics["pg/outside_old_support"] == pytest.approx(1 / 8)
    if takes_response_mask(get_policy_loss(variant)):
        return  # a sequence ratio's length still counts the token (with log-ratio 0)
    # the other tokens: the loss of the batch with that token masked out
    kept = mask.clone()
    kept[0, 1] = 0
    expected, _ = compute_policy_loss(variant, log_probs, old, advantages, kept,
                                      scores=scores, loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
