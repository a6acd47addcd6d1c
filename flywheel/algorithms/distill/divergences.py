"""Offline distillation: token-level divergences between the teacher's and the student's
next-token distributions, over the teacher's top-k tokens, chosen by name.

p is the teacher's distribution, q the student's (q_θ, the one trained). Per position:

    forward_kl         KL(p ‖ q) = Σ p (log p − log q)
                       (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network",
                       arXiv 1503.02531; word-level KD, Kim and Rush 2016, arXiv 1606.07947)
    reverse_kl         KL(q ‖ p) = Σ q (log q − log p)
                       (Gu et al. 2024, MiniLLM, arXiv 2306.08543)
    adaptive_kl        AKL = g_head/(g_head+g_tail)·KL(p‖q) + g_tail/(g_head+g_tail)·KL(q‖p),
                       g_S = Σ_{j∈S} |p_j − q_j| (no gradient); head: the teacher's most
                       likely tokens, in descending order, up to and including the one at
                       which their mass reaches μ = 1 − α; tail: the rest
                       (Wu et al. 2024, "Rethinking Kullback-Leibler Divergence in Knowledge
                       Distillation for Large Language Models", arXiv 2404.02657, eq. 9-11).
                       α is ROLL's `adaptive_kl_alpha` (ROLL: tail = the least likely tokens,
                       ascending, while their mass stays ≤ α): the same partition.
    skewed_forward_kl  SKL(λ) = KL(p ‖ λp + (1−λ)q)
    skewed_reverse_kl  SRKL(λ) = KL(q ‖ (1−λ)p + λq)
                       (Ko et al. 2024, DistiLLM, arXiv 2402.03898, eq. 4-5; λ = `skew_lambda`)
    js_divergence      JSD = ½ KL(p ‖ m) + ½ KL(q ‖ m),  m = ½(p + q)
                       (Lin 1991, IEEE Trans. Inf. Theory 37(1); the β = ½ generalised JSD of
                       GKD, Agarwal et al. 2024, arXiv 2306.13649)

The support: only the teacher's top-k log-probs are kept (cached or computed on the fly),
so the divergence is taken over one of two finite distributions, chosen by `support`:

    tail           (default) the k tokens plus one "every other token" outcome holding the
                   remaining mass, 1 − Σ_k p and 1 − Σ_k q. Both are then true distributions
                   (the coarsening of p and q), the divergence is exact when k = vocab (up to
                   float rounding: the remainder is floored at TAIL_FLOOR), and by the
                   data-processing inequality never above the full one.
    renormalized   ROLL's form (its `op_compute_topk_probs_and_indices` and
                   `various_divergence.py`): p and q are each renormalised over the teacher's
                   k tokens (softmax of the top-k logits; the student's logits gathered at
                   those indices), the rest of the vocabulary dropped.

Inputs are full-vocabulary log-probs at the teacher's top-k indices (`topk_log_probs`,
`log_probs_at`), so both supports follow from one cache. A slot whose teacher log-prob is
−inf (vocabulary padding; k larger than the vocabulary) is no outcome of either.
Temperatures are the caller's: ROLL divides the student's logits by `kd_temperature` and
the teacher's by kd_temperature · teacher_temperature, with no T² factor on the loss.
JS differs from ROLL's only numerically: log m is a logaddexp here, ROLL adds 1e-9 inside
each log.

To add a divergence: a function of (log_p, log_q, valid, params) → [...] below and its name
in `DIVERGENCES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

DivergenceName = Literal["forward_kl", "reverse_kl", "adaptive_kl", "skewed_forward_kl",
                         "skewed_reverse_kl", "js_divergence"]
TopKSupport = Literal["tail", "renormalized"]
TOPK_SUPPORTS: tuple[str, ...] = get_args(TopKSupport)


@dataclass(frozen=True)
class DivergenceParams:
    """The knobs some divergences read (ROLL's names and defaults)."""

    adaptive_kl_alpha: float = 0.5  # adaptive_kl: the tail's mass bound α (head: μ = 1 − α)
    skew_lambda: float = 0.1  # skewed_*: the mixing weight λ of the skewed side


DEFAULT_PARAMS = DivergenceParams()


# ---- the two finite distributions ------------------------------------------------------

def _fp32_or_wider(x: Tensor) -> Tensor:
    """bf16 / fp16 logits to fp32; fp64 kept (the tests' reference runs in fp64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def topk_log_probs(logits: Tensor, k: int, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """The teacher's k most likely tokens: (full-vocabulary log-probs [B, T, k], indices
    [B, T, k]) of softmax(logits / temperature). k ≥ vocabulary keeps every token."""
    log_probs = torch.log_softmax(_fp32_or_wider(logits) / temperature, dim=-1)  # [B, T, V]
    return torch.topk(log_probs, min(k, log_probs.shape[-1]), dim=-1)


def log_probs_at(logits: Tensor, indices: Tensor, temperature: float = 1.0) -> Tensor:
    """The student's full-vocabulary log-probs at `indices` [B, T, k], with gradient."""
    log_probs = torch.log_softmax(_fp32_or_wider(logits) / temperature, dim=-1)  # [B, T, V]
    return log_probs.gather(-1, indices)  # [B, T, k]


TAIL_FLOOR = 1e-12  # the smallest mass the "every other token" outcome is given


def _tail_log_mass(log_topk_mass: Tensor) -> Tensor:
    """log(1 − Σ_k), floored at TAIL_FLOOR: with k = vocabulary the remainder is float
    rounding (±1e-7 in fp32), which must not become log 0 or log of a negative number."""
    return torch.log((-torch.expm1(log_topk_mass)).clamp_min(TAIL_FLOOR))


def support_distributions(teacher_log_probs: Tensor, student_log_probs: Tensor,
                          support: str) -> tuple[Tensor, Tensor, Tensor]:
    """(log p, log q, valid) over the outcomes of `support`, each [B, T, n]: n = k + 1 for
    "tail" (the last outcome is every other token), k for "renormalized"."""
    if support not in TOPK_SUPPORTS:
        raise ValueError(f"unknown top-k support {support!r}; known: {TOPK_SUPPORTS}")
    valid = torch.isfinite(teacher_log_probs)  # [B, T, k]
    neg_inf = torch.full_like(_fp32_or_wider(student_log_probs), -math.inf)
    log_p = torch.where(valid, _fp32_or_wider(teacher_log_probs), neg_inf)  # [B, T, k]
    log_q = torch.where(valid, _fp32_or_wider(student_log_probs), neg_inf)  # [B, T, k]
    if support == "renormalized":
        return (torch.log_softmax(log_p, dim=-1), torch.log_softmax(log_q, dim=-1), valid)
    tail_p = _tail_log_mass(torch.logsumexp(log_p, dim=-1, keepdim=True))  # [B, T, 1]
    tail_q = _tail_log_mass(torch.logsumexp(log_q, dim=-1, keepdim=True))  # [B, T, 1]
    tail_valid = torch.ones_like(valid[..., :1])
    return (torch.cat([log_p, tail_p], -1), torch.cat([log_q, tail_q], -1),
            torch.cat([valid, tail_valid], -1))


# ---- the divergences, over the last dimension ------------------------------------------

def _kl(log_a: Tensor, log_b: Tensor, valid: Tensor) -> Tensor:
    """KL(a ‖ b) = Σ a (log a − log b), 0·log 0 = 0 (an outcome a gives no mass adds 0)."""
    has_mass = valid & (log_a > -math.inf)
    diff = torch.where(has_mass, log_a - log_b, torch.zeros_like(log_a))
    return torch.where(has_mass, log_a.exp() * diff, torch.zeros_like(log_a)).sum(-1)


def _mix(log_a: Tensor, log_b: Tensor, weight_a: float) -> Tensor:
    """log(w·a + (1 − w)·b), in log space. (An outcome of neither is −inf in both, whose
    logaddexp gradient is nan; it never reaches the student: support_distributions put
    the −inf there with a `where`, which passes no gradient back from that branch.)"""
    if weight_a <= 0.0:
        return log_b
    if weight_a >= 1.0:
        return log_a
    return torch.logaddexp(log_a + math.log(weight_a), log_b + math.log1p(-weight_a))


def forward_kl(log_p: Tensor, log_q: Tensor, valid: Tensor, params: DivergenceParams
               ) -> Tensor:
    return _kl(log_p, log_q, valid)


def reverse_kl(log_p: Tensor, log_q: Tensor, valid: Tensor, params: DivergenceParams
               ) -> Tensor:
    return _kl(log_q, log_p, valid)


def adaptive_kl(log_p: Tensor, log_q: Tensor, valid: Tensor, params: DivergenceParams
                ) -> Tensor:
    p = torch.where(valid, log_p.exp(), torch.zeros_like(log_p))  # [..., n]
    q = torch.where(valid, log_q.exp(), torch.zeros_like(log_q)).detach()
    p_sorted, order = torch.sort(p, dim=-1, descending=True)
    above = torch.cumsum(p_sorted, -1) - p_sorted  # mass strictly above each token
    head = above < 1.0 - params.adaptive_kl_alpha  # [..., n] in sorted order
    gap = (p_sorted - q.gather(-1, order)).abs()
    g_head = torch.where(head, gap, torch.zeros_like(gap)).sum(-1)
    g_tail = torch.where(head, torch.zeros_like(gap), gap).sum(-1)
    total = g_head + g_tail
    # p = q: both KLs are 0, any weights do; ½ each keeps 0/0 out
    w_head = torch.where(total > 0, g_head / total.clamp_min(1e-30), torch.full_like(total, 0.5))
    return (w_head * _kl(log_p, log_q, valid)
            + (1.0 - w_head) * _kl(log_q, log_p, valid))


def skewed_forward_kl(log_p: Tensor, log_q: Tensor, valid: Tensor,
                      params: DivergenceParams) -> Tensor:
    return _kl(log_p, _mix(log_p, log_q, params.skew_lambda), valid)


def skewed_reverse_kl(log_p: Tensor, log_q: Tensor, valid: Tensor,
                      params: DivergenceParams) -> Tensor:
    return _kl(log_q, _mix(log_p, log_q, 1.0 - params.skew_lambda), valid)


def js_divergence(log_p: Tensor, log_q: Tensor, valid: Tensor, params: DivergenceParams
                  ) -> Tensor:
    log_m = _mix(log_p, log_q, 0.5)
    return 0.5 * _kl(log_p, log_m, valid) + 0.5 * _kl(log_q, log_m, valid)


Divergence = Callable[[Tensor, Tensor, Tensor, DivergenceParams], Tensor]
DIVERGENCES: dict[str, Divergence] = {
    "forward_kl": forward_kl,
    "reverse_kl": reverse_kl,
    "adaptive_kl": adaptive_kl,
    "skewed_forward_kl": skewed_forward_kl,
    "skewed_reverse_kl": skewed_reverse_kl,
    "js_divergence": js_divergence,
}
DIVERGENCE_NAMES: tuple[str, ...] = get_args(DivergenceName)
assert set(DIVERGENCE_NAMES) == set(DIVERGENCES)  # the Literal is the catalog's keys


def token_divergence(teacher_log_probs: Tensor, student_log_probs: Tensor, name: str, *,
                     support: str = "tail",
                     params: DivergenceParams = DEFAULT_PARAMS) -> Tensor:
    """Per-position divergence [B, T] from the teacher's top-k log-probs and the student's
    log-probs at the same indices (both [B, T, k]); see the module docstring."""
    if name not in DIVERGENCES:
        raise ValueError(f"unknown divergence {name!r}; known: {DIVERGENCE_NAMES}")
    if teacher_log_probs.shape != student_log_probs.shape:
        raise ValueError(f"teacher {tuple(teacher_log_probs.shape)} and student "
                         f"{tuple(student_log_probs.shape)} top-k log-probs differ in shape")
    log_p, log_q, valid = support_distributions(teacher_log_probs, student_log_probs, support)
    return DIVERGENCES[name](log_p, log_q, valid, params)
