"""On-policy distillation (OPD): the per-token advantage from one or more teachers.

The student samples y ~ π_S(· | x); every teacher scores the student's own tokens. The
per-token reward is the negative reverse-KL estimate on the sampled token (k1, Schulman
2020, http://joschu.net/blog/kl-approx.html):

    r_t = ℓ_T(y_t) − ℓ_S(y_t)          ℓ = log π(y_t | x, y_<t),  E_{y~π_S}[−r_t] = KL(π_S ‖ π_T)

Minimising the sequence-level reverse KL KL(π_S ‖ π_T) by policy gradient is MiniLLM's
objective (Gu et al. 2024, "MiniLLM: Knowledge Distillation of Large Language Models",
arXiv 2306.08543, eq. 2-5: per-token reward log π_T / π_S, its discounted sum as the
return). With discount γ the advantage of token t is that return,

    A_t = Σ_{t' ≥ t} γ^{t'−t} r_{t'}                                 (discounted_return)

and γ = 0, the default, gives A_t = r_t: each token is credited only its own log-ratio,
as in "On-Policy Distillation" (Lu and Thinking Machines Lab 2025,
https://thinkingmachines.ai/blog/on-policy-distillation/) and ROLL's OPD (its
`compute_advantage`, which never discounts the KL).

Several teachers (ROLL's multi-teacher OPD): teacher i takes the rows `routes[i]` (by the
record's tag, chosen by the caller) with its coefficient c_i; a row routed to several
teachers sums their terms, as ROLL does:

    r_t = Σ_i route_i · c_i · (ℓ_{T_i}(y_t) − ℓ_S(y_t))

Mixed with verifier rewards (ROLL's "mixed mode", `use_opd` with `opd_kl_coef`): the RL
advantage A^RL (GRPO / reinforce over the rewards, [B, L]) plus the OPD term,

    A_t = A^RL_t + Σ_{t'≥t} γ^{t'−t} r_{t'}

which for γ = 0 is ROLL's `advantages − Σ_i opd_kl_coef_i · kl_i`. Whitening and clipping
of the result are the caller's (rlvr/train_batch.py), after this, as in ROLL.

Which student log-probs: those of the distribution the student sampled from (actor_infer's
recorded log-probs, temperature applied), so −r_t is an unbiased estimate of the KL of the
policy that produced the tokens. A token the student's truncated sampler could not pick
(ℓ_S = OUTSIDE_LOGIT) adds nothing, as in `kl_estimate`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from flywheel.algorithms.aggregation import masked_mean
from flywheel.algorithms.kl import kl_estimate


def discounted_return(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """A_t = Σ_{t'≥t} γ^{t'−t} r_{t'} over the valid tokens of each row, [B, T] → [B, T].

    t' counts valid tokens only: an agentic row's observation tokens (mask 0 between
    turns) neither receive a return nor add a discount step. 0 off the mask."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"discount gamma must be in [0, 1], got {gamma}")
    valid = mask.bool()  # [B, T]
    r = torch.where(valid, rewards, torch.zeros_like(rewards))  # [B, T]
    if gamma == 0.0:
        return r
    out = torch.zeros_like(r)  # [B, T]
    running = torch.zeros_like(r[:, 0])  # [B] return from the next valid token on
    for t in range(r.shape[1] - 1, -1, -1):
        running = torch.where(valid[:, t], r[:, t] + gamma * running, running)
        out[:, t] = torch.where(valid[:, t], running, torch.zeros_like(running))
    return out


@torch.no_grad()
def opd_advantages(
    student_log_probs: Tensor,
    teacher_log_probs: Mapping[str, Tensor],
    mask: Tensor,
    *,
    coefs: Mapping[str, float],
    routes: Mapping[str, Tensor] | None = None,
    gamma: float = 0.0,
    estimator: str = "k1",
    rl_advantages: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Per-token OPD advantages [B, T] and metrics; see the module docstring.

    student_log_probs  ℓ_S of the sampled tokens [B, T]
    teacher_log_probs  per teacher name, ℓ_T of the same tokens [B, T] (any value on rows
                       the teacher does not take)
    mask               [B, T], nonzero on the student's generated tokens
    coefs              per teacher, c_i ≥ 0 (`opd_kl_coef`)
    routes             per teacher, bool [B]: the rows it takes; None: every teacher every row
    estimator          the KL estimate of ℓ_S − ℓ_T per token (kl.py); "k1" is the paper's
    rl_advantages      [B, T] advantages of the verifier rewards (mixed mode), or None

    Metrics: distill/reverse_kl (token mean of each row's teachers' KL estimates, summed
    over a row's teachers), distill/reverse_kl/<teacher> (over that teacher's rows),
    distill/rows/<teacher> (fraction of the batch's rows it took), distill/advantage_mean.
    """
    if set(teacher_log_probs) != set(coefs):
        raise ValueError(f"teachers {sorted(teacher_log_probs)} and coefficients "
                         f"{sorted(coefs)} name different teachers")
    valid = mask.bool()  # [B, T]
    rows = valid.shape[0]
    weighted = torch.zeros_like(student_log_probs, dtype=torch.float32)  # [B, T] Σ c_i·kl_i
    unweighted = torch.zeros_like(weighted)  # [B, T] Σ kl_i
    metrics: dict[str, float] = {}
    for name, teacher in teacher_log_probs.items():
        taken = (torch.ones(rows, dtype=torch.bool, device=valid.device) if routes is None
                 else routes[name].bool())  # [B]
        on = valid & taken[:, None]  # [B, T]
        kl = kl_estimate(student_log_probs.float(), teacher.float(), estimator)  # [B, T]
        kl = torch.where(on, kl, torch.zeros_like(kl))  # rows it does not take: 0
        weighted += coefs[name] * kl
        unweighted += kl
        metrics[f"distill/reverse_kl/{name}"] = float(masked_mean(kl, on))
        metrics[f"distill/rows/{name}"] = float(taken.float().mean()) if rows else 0.0
    advantages = discounted_return(-weighted, valid, gamma)  # [B, T]
    if rl_advantages is not None:
        advantages = advantages + torch.where(valid, rl_advantages.float(),
                                              torch.zeros_like(advantages))
    metrics["distill/reverse_kl"] = float(masked_mean(unweighted, valid))
    metrics["distill/advantage_mean"] = float(masked_mean(advantages, valid))
    return advantages, metrics


def route_by_tag(tags: list[str], teacher_tags: Mapping[str, tuple[str, ...]]
                 ) -> dict[str, Tensor]:
    """Per teacher, the rows [B] whose tag it takes: `teacher_tags[name]` lists its tags
    (ROLL's `tag_included`); an empty list takes every tag. A row no teacher takes is an
    error here (the config checks refuse such a tag at start, so reaching it is a bug)."""
    routes = {name: torch.tensor([not included or tag in included for tag in tags],
                                 dtype=torch.bool)
              for name, included in teacher_tags.items()}
    taken = torch.zeros(len(tags), dtype=torch.bool)
    for r in routes.values():
        taken |= r
    if not bool(taken.all()):
        missing = sorted({t for t, ok in zip(tags, taken.tolist()) if not ok})
        raise ValueError(f"no teacher takes tag(s) {missing}; teachers' tag_included: "
                         f"{dict(teacher_tags)}")
    return routes
