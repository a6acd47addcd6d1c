"""Offline distillation's divergences (algorithms/distill/divergences.py, offline_loss.py):
hand-computed numbers, an independent reference (value and gradient), ROLL's top-k form."""

import math

import pytest
import torch
import torch.nn.functional as F

from flywheel.algorithms.distill import (
    DIVERGENCE_NAMES,
    DivergenceParams,
    distill_loss,
    log_probs_at,
    token_divergence,
    topk_log_probs,
)

P = [0.5, 0.3, 0.2]  # teacher
Q = [0.2, 0.5, 0.3]  # student


def div(name: str, p=P, q=Q, support="tail", **params) -> float:
    lp = torch.tensor([[p]], dtype=torch.float64).log()
    lq = torch.tensor([[q]], dtype=torch.float64).log()
    return token_divergence(lp, lq, name, support=support,
                            params=DivergenceParams(**params)).item()


def kl(a, b) -> float:
    return sum(x * math.log(x / y) for x, y in zip(a, b) if x > 0)


FKL = 0.5 * math.log(0.5 / 0.2) + 0.3 * math.log(0.3 / 0.5) + 0.2 * math.log(0.2 / 0.3)
RKL = 0.2 * math.log(0.2 / 0.5) + 0.5 * math.log(0.5 / 0.3) + 0.3 * math.log(0.3 / 0.2)


def test_forward_and_reverse_kl_by_hand():
    assert div("forward_kl") == pytest.approx(FKL, abs=1e-9)
    assert div("reverse_kl") == pytest.approx(RKL, abs=1e-9)


def test_adaptive_kl_by_hand():
    """α = 0.5 (μ = 0.5): head {0.5}, g_head = |0.5−0.2| = 0.3, g_tail = 0.2 + 0.1 = 0.3.
    α = 0.3 (μ = 0.7): head {0.5, 0.3}, g_head = 0.3 + 0.2, g_tail = 0.1: weights 5/6, 1/6.
    (ROLL's ascending form, tail = cumsum(0.2, 0.5, 1.0) ≤ α: {0.2, 0.3} and {0.2}: the same.)"""
    assert div("adaptive_kl", adaptive_kl_alpha=0.5) == pytest.approx(0.5 * FKL + 0.5 * RKL)
    assert div("adaptive_kl", adaptive_kl_alpha=0.3) == pytest.approx(
        5 / 6 * FKL + 1 / 6 * RKL)


def test_skewed_kls_and_js_by_hand():
    lam = 0.1
    m_fwd = [lam * p + (1 - lam) * q for p, q in zip(P, Q)]
    m_rev = [(1 - lam) * p + lam * q for p, q in zip(P, Q)]
    m = [(p + q) / 2 for p, q in zip(P, Q)]
    assert div("skewed_forward_kl", skew_lambda=lam) == pytest.approx(kl(P, m_fwd))
    assert div("skewed_reverse_kl", skew_lambda=lam) == pytest.approx(kl(Q, m_rev))
    assert div("js_divergence") == pytest.approx(0.5 * kl(P, m) + 0.5 * kl(Q, m))


def test_the_two_top_k_supports_by_hand():
    """p = (.4, .3, .2, .1), q = (.1, .2, .3, .4), the teacher's top 2 = tokens 0 and 1.
    tail: outcomes {0, 1, rest}: p = (.4, .3, .3), q = (.1, .2, .7).
    renormalized (ROLL): p = (4/7, 3/7), q = (1/3, 2/3)."""
    lp = torch.tensor([[[0.4, 0.3]]]).log()
    lq = torch.tensor([[[0.1, 0.2]]]).log()
    tail = token_divergence(lp, lq, "forward_kl", support="tail").item()
    renorm = token_divergence(lp, lq, "forward_kl", support="renormalized").item()
    assert tail == pytest.approx(kl([0.4, 0.3, 0.3], [0.1, 0.2, 0.7]), abs=1e-6)
    assert renorm == pytest.approx(kl([4 / 7, 3 / 7], [1 / 3, 2 / 3]), abs=1e-6)


# ---- an independent reference over the full vocabulary ---------------------------------

def reference(name: str, teacher_logits, student_logits, alpha=0.5, lam=0.1):
    """Each divergence written from its paper's formula over the full softmax, per
    position, with a Python loop for AKL's head (no code shared with the module)."""
    p = torch.softmax(teacher_logits, -1)
    q = torch.softmax(student_logits, -1)

    def kl_(a, b):
        return (a * (a.log() - b.log())).sum(-1)

    if name == "forward_kl":
        return kl_(p, q)
    if name == "reverse_kl":
        return kl_(q, p)
    if name == "skewed_forward_kl":
        return kl_(p, lam * p + (1 - lam) * q)
    if name == "skewed_reverse_kl":
        return kl_(q, (1 - lam) * p + lam * q)
    if name == "js_divergence":
        m = (p + q) / 2
        return 0.5 * kl_(p, m) + 0.5 * kl_(q, m)
    assert name == "adaptive_kl"
    out = []
    for pi, qi in zip(p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1])):
        order = sorted(range(len(pi)), key=lambda j: -float(pi[j]))
        head, mass = set(), 0.0
        for j in order:  # the most likely tokens until their mass reaches μ = 1 − α
            head.add(j)
            mass += float(pi[j])
            if mass >= 1 - alpha:
                break
        gap = (pi - qi).abs().detach()
        g_head = sum(gap[j] for j in head)
        g_tail = gap.sum() - g_head
        out.append((g_head * kl_(pi, qi) + g_tail * kl_(qi, pi)) / (g_head + g_tail))
    return torch.stack(out).reshape(p.shape[:-1])


@pytest.mark.parametrize("name", DIVERGENCE_NAMES)
@pytest.mark.parametrize("support", ["tail", "renormalized"])
def test_every_divergence_matches_the_reference_in_value_and_gradient(name, support):
    """k = vocabulary: both supports are the full distributions."""
    gen = torch.Generator().manual_seed(3)
    teacher = torch.randn(2, 3, 6, generator=gen, dtype=torch.float64) * 2
    student = torch.randn(2, 3, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    t_lp, idx = topk_log_probs(teacher, 6)
    ours = token_divergence(t_lp.double(), log_probs_at(student, idx).double(), name,
                            support=support)
    (g_ours,) = torch.autograd.grad(ours.sum(), student)
    ref = reference(name, teacher, student)
    (g_ref,) = torch.autograd.grad(ref.sum(), student)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-4, atol=1e-6)


def test_forward_kl_matches_torchs_kl_div():
    gen = torch.Generator().manual_seed(0)
    teacher, student = torch.randn(4, 5, 9, generator=gen), torch.randn(4, 5, 9, generator=gen)
    t_lp, idx = topk_log_probs(teacher, 9)
    ours = token_divergence(t_lp, log_probs_at(student, idx), "forward_kl")
    torch_kl = F.kl_div(torch.log_softmax(student, -1), torch.log_softmax(teacher, -1),
                        reduction="none", log_target=True).sum(-1)
    torch.testing.assert_close(ours, torch_kl, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", DIVERGENCE_NAMES)
def test_renormalized_is_rolls_top_k_form(name):
    """ROLL: softmax of the teacher's top-k logits; the student's logits gathered at the
    teacher's indices, then softmaxed over those k: the reference over the k logits."""
    gen = torch.Generator().manual_seed(1)
    teacher = torch.randn(2, 4, 10, generator=gen, dtype=torch.float64)
    student = torch.randn(2, 4, 10, generator=gen, dtype=torch.float64, requires_grad=True)
    t_lp, idx = topk_log_probs(teacher, 4)
    ours = token_divergence(t_lp.double(), log_probs_at(student, idx).double(), name,
                            support="renormalized")
    roll = reference(name, teacher.gather(-1, idx), student.gather(-1, idx))
    torch.testing.assert_close(ours, roll, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(set(DIVERGENCE_NAMES) - {"adaptive_kl"}))
def test_gradcheck_with_a_top_k_tail_and_a_padded_slot(name):
    """k < vocabulary (a tail outcome) and one −inf teacher slot: finite, correct gradient.
    (adaptive_kl's weights carry no gradient, as in ROLL, so finite differences, which move
    them, are not its gradient; the reference test holds it.)"""
    gen = torch.Generator().manual_seed(2)
    teacher = torch.randn(1, 2, 7, generator=gen, dtype=torch.float64)
    t_lp, idx = topk_log_probs(teacher, 3)
    t_lp = t_lp.clone()
    t_lp[0, 0, 2] = -math.inf
    student = torch.randn(1, 2, 7, generator=gen, dtype=torch.float64, requires_grad=True)

    def f(s):
        return token_divergence(t_lp, log_probs_at(s, idx).double(), name, support="tail")

    assert torch.isfinite(f(student)).all()
    assert torch.autograd.gradcheck(f, (student,))


def test_unknown_divergence_and_support_are_refused():
    with pytest.raises(ValueError, match="unknown divergence 'kl'.*forward_kl"):
        div("kl")
    with pytest.raises(ValueError, match="unknown top-k support"):
        div("forward_kl", support="full")


def test_distill_loss_mixes_sft_and_divergence_by_weight():
    """(1 − w)·token-mean(−log q(y)) + w·token-mean(D); the padded position carries nothing."""
    lp = torch.tensor([[P, P]]).log()  # [1, 2, 3]
    lq = torch.tensor([[Q, Q]]).log().requires_grad_()
    label = torch.tensor([[math.log(0.2), math.log(0.5)]])  # the dataset's tokens: 0, then 1
    mask = torch.tensor([[1, 0]])
    for w, expected in ((0.0, -math.log(0.2)), (1.0, FKL),
                        (0.25, 0.75 * -math.log(0.2) + 0.25 * FKL)):
        loss, metrics = distill_loss(lp, lq, label, mask, divergence="forward_kl",
                                     distill_loss_weight=w)
        assert loss.item() == pytest.approx(expected, rel=1e-5)
        assert metrics["distill/divergence"] == pytest.approx(FKL, rel=1e-5)
    with pytest.raises(ValueError, match="distill_loss_weight"):
        distill_loss(lp, lq, label, mask, divergence="forward_kl", distill_loss_weight=2.0)
