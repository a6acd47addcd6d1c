"""The pairwise losses against numbers worked out by hand (value and gradient).

One pair throughout: policy log-probs chosen -1.0, rejected -3.0; reference -2.0, -2.5, so
h = (-1 + 2) - (-3 + 2.5) = 1.5, and with beta = 0.1, beta h = 0.15. sigma(0.15) =
0.5374298, sigma(-0.15) = 0.4625702.
"""

from __future__ import annotations

import pytest
import torch

from flywheel.algorithms.preference import LOSS_NAMES
from flywheel.algorithms.preference.bradley_terry import (
    bradley_terry_loss,
    bradley_terry_metrics,
)
from flywheel.algorithms.preference.pair_logprobs import pair_layout, pair_logps
from flywheel.algorithms.preference.pair_losses import (
    PAIR_LOSSES,
    PairLogps,
    PairLossArgs,
    pair_metrics,
)


def one_pair(chosen=-1.0, rejected=-3.0, ref=(-2.0, -2.5), tokens=(4.0, 3.0)):
    c = torch.tensor([chosen], requires_grad=True)
    r = torch.tensor([rejected], requires_grad=True)
    logps = PairLogps(c, r, torch.tensor([tokens[0]]), torch.tensor([tokens[1]]),
                      torch.tensor([ref[0]]), torch.tensor([ref[1]]))
    return logps, c, r


def value_and_grads(name, args, **pair):
    logps, c, r = one_pair(**pair)
    out = PAIR_LOSSES[name](logps, args)
    out.losses.sum().backward()
    return float(out.losses.detach()), float(c.grad), float(r.grad), out, logps


def test_the_catalog_names_are_the_functions():
    assert list(LOSS_NAMES) == list(PAIR_LOSSES)


def test_sigmoid_dpo():
    # -log sigma(0.15) = log(1 + e^-0.15); d/d chosen = -beta sigma(-beta h)
    loss, gc, gr, out, logps = value_and_grads("sigmoid", PairLossArgs(beta=0.1))
    assert loss == pytest.approx(0.6209570478, abs=1e-6)
    assert gc == pytest.approx(-0.0462570155, abs=1e-7)
    assert gr == pytest.approx(0.0462570155, abs=1e-7)
    # rewards beta (pi - ref): 0.1 * 1.0 and 0.1 * -0.5
    assert float(out.chosen_rewards) == pytest.approx(0.1)
    assert float(out.rejected_rewards) == pytest.approx(-0.05)
    m = pair_metrics(logps, out)
    assert m["dpo/reward_margin"] == pytest.approx(0.15)
    assert m["dpo/reward_accuracy"] == 1.0
    assert m["dpo/chosen_logps"] == -1.0 and m["dpo/rejected_logps"] == -3.0
    assert m["dpo/loss"] == pytest.approx(0.6209570478, abs=1e-6)


def test_cdpo_label_smoothing():
    # -(1 - eps) log sigma(x) - eps log sigma(-x), and -log sigma(-x) = -log sigma(x) + x:
    # 0.6209570 + 0.2 * 0.15 = 0.6509570; d/d chosen = -beta((1-eps) sigma(-x) - eps sigma(x))
    loss, gc, gr, *_ = value_and_grads("sigmoid", PairLossArgs(beta=0.1, label_smoothing=0.2))
    assert loss == pytest.approx(0.6509570478, abs=1e-6)
    assert gc == pytest.approx(-0.1 * (0.8 * 0.4625701547 - 0.2 * 0.5374298453), abs=1e-7)
    assert gc == pytest.approx(-0.0262570155, abs=1e-7)
    assert gr == pytest.approx(-gc, abs=1e-7)


def test_ipo_target():
    # (h - 1/(2 beta))^2 = (1.5 - 5)^2 = 12.25; d/d chosen = 2 (h - 5) = -7
    loss, gc, gr, *_ = value_and_grads("ipo", PairLossArgs(beta=0.1))
    assert loss == pytest.approx(12.25)
    assert gc == pytest.approx(-7.0) and gr == pytest.approx(7.0)
    # at its target the loss and gradient vanish: h = 5 (chosen -1 + 3.5)
    loss, gc, *_ = value_and_grads("ipo", PairLossArgs(beta=0.1), chosen=2.5)
    assert loss == pytest.approx(0.0, abs=1e-10) and gc == pytest.approx(0.0, abs=1e-6)


def test_simpo_length_normalisation_and_margin():
    # chosen -2 over 4 tokens, rejected -6 over 3, beta 2, gamma 0.5:
    # 2 (-0.5) - 2 (-2) - 0.5 = 2.5; loss -log sigma(2.5) = 0.0788897
    # d/d chosen = -sigma(-2.5) beta / 4, d/d rejected = +sigma(-2.5) beta / 3
    args = PairLossArgs(beta=2.0, simpo_gamma=0.5)
    loss, gc, gr, out, _ = value_and_grads("simpo", args, chosen=-2.0, rejected=-6.0,
                                           ref=(float("nan"), float("nan")))
    assert loss == pytest.approx(0.0788897343, abs=1e-7)
    assert gc == pytest.approx(-0.0379290900, abs=1e-7)
    assert gr == pytest.approx(0.0505721200, abs=1e-7)
    assert float(out.chosen_rewards) == pytest.approx(-1.0)  # beta / |y| log pi
    # the same sums over twice the tokens: logit 2 (-0.25) - 2 (-1) - 0.5 = 1.0
    loss2, *_ = value_and_grads("simpo", args, chosen=-2.0, rejected=-6.0,
                                tokens=(8.0, 6.0), ref=(0.0, 0.0))
    assert loss2 == pytest.approx(0.3132616875, abs=1e-7)  # -log sigma(1)


def test_simpo_needs_no_reference_and_dpo_refuses_without_one():
    c, r = torch.tensor([-2.0]), torch.tensor([-6.0])
    no_ref = PairLogps(c, r, torch.tensor([4.0]), torch.tensor([3.0]))
    assert LOSS_NAMES["simpo"] is False
    PAIR_LOSSES["simpo"](no_ref, PairLossArgs(beta=2.0))
    with pytest.raises(ValueError, match="reference"):
        PAIR_LOSSES["sigmoid"](no_ref, PairLossArgs())


def test_bradley_terry_with_and_without_margin():
    # -log sigma(1.0 - 0.5) = 0.4740770; with margin 1: -log sigma(-0.5) = 0.9740770
    c = torch.tensor([1.0], requires_grad=True)
    r = torch.tensor([0.5], requires_grad=True)
    loss = bradley_terry_loss(c, r)
    loss.sum().backward()
    assert float(loss.detach()) == pytest.approx(0.4740769842, abs=1e-7)
    assert float(c.grad) == pytest.approx(-0.3775406688, abs=1e-7)  # -sigma(-0.5)
    assert float(r.grad) == pytest.approx(0.3775406688, abs=1e-7)
    c.grad = r.grad = None
    with_margin = bradley_terry_loss(c, r, torch.tensor([1.0]))
    with_margin.sum().backward()
    assert float(with_margin.detach()) == pytest.approx(0.9740769842, abs=1e-7)
    assert float(c.grad) == pytest.approx(-0.6224593312, abs=1e-7)  # -sigma(0.5)
    m = bradley_terry_metrics(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.0]),
                              torch.tensor([0.2, 0.4]))
    assert m["rm/accuracy"] == 0.5  # a tie is not ordered right
    assert m["rm/loss"] == pytest.approx(0.3)


def test_pair_logps_reads_the_interleaved_layout():
    # rows: chosen 0, rejected 0, chosen 1, rejected 1; response on columns 2..
    logprobs = torch.tensor([[0.0, 0.0, -1.0, -2.0],
                             [0.0, 0.0, -3.0, 0.0],
                             [0.0, -0.5, -0.5, 0.0],
                             [0.0, -4.0, -1.0, -1.0]])
    mask = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 0], [0, 1, 1, 0], [0, 1, 1, 1]]).float()
    p = pair_logps(logprobs, mask, pair_layout([0, 1]), ref_logprobs=logprobs * 2)
    assert p.chosen.tolist() == [-3.0, -1.0] and p.rejected.tolist() == [-3.0, -6.0]
    assert p.chosen_tokens.tolist() == [2.0, 2.0] and p.rejected_tokens.tolist() == [1.0, 3.0]
    assert p.ref_chosen.tolist() == [-6.0, -2.0]
    # the layout is read from the extra, not the row order: rejected first, pair 1 first
    swapped = pair_logps(logprobs[[3, 2, 1, 0]], mask[[3, 2, 1, 0]],
                         pair_layout([1, 0])[[1, 0, 3, 2]])
    assert swapped.chosen.tolist() == [-3.0, -1.0] and swapped.rejected.tolist() == [-3.0, -6.0]
    with pytest.raises(ValueError, match="split a pair"):  # half a pair in a micro-batch
        pair_logps(logprobs[:3], mask[:3], pair_layout([0, 1])[:3])


def test_online_pairs_are_a_groups_best_and_worst_and_ties_are_counted():
    from flywheel.algorithms.preference.online_pairs import best_worst_pairs

    # three groups of 4: a clear best and worst; all equal (no pair); two tied best
    scores = torch.tensor([0.2, 1.0, 0.0, 0.5,
                           1.0, 1.0, 1.0, 1.0,
                           0.0, 1.0, 1.0, 0.3])
    pairs = best_worst_pairs(scores, 4)
    assert pairs.chosen.tolist() == [1, 9] and pairs.rejected.tolist() == [2, 8]
    assert pairs.groups.tolist() == [0, 2] and pairs.dropped == 1
    assert pairs.layout().tolist() == [1, 2, 9, 8]
    with pytest.raises(ValueError, match="groups of 4"):
        best_worst_pairs(scores[:10], 4)
