"""Pairwise preference losses: the DPO family, by name.

Every loss reads a pair's *sequence* log-probs, the sum over the response tokens of
log pi(y_t | x, y_<t) (`PairLogps`), and returns one loss per pair, plus the pair's implicit
rewards r(x, y) of the chosen and the rejected response, from which the metrics follow:

    dpo/reward_margin    mean over pairs of r_chosen - r_rejected
    dpo/reward_accuracy  share of pairs with r_chosen > r_rejected (ties count as wrong)

With h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)) (w: chosen, l:
rejected):

    sigmoid  DPO, Rafailov et al. 2023, eq. 7:  -log sigma(beta h); with cDPO's
             label_smoothing eps (Mitchell 2023, "A note on DPO with noisy preferences",
             eq. 3): -(1 - eps) log sigma(beta h) - eps log sigma(-beta h).
             r(x, y) = beta (log pi(y) - log pi_ref(y)).
    ipo      IPO, Azar et al. 2023 ("A General Theoretical Paradigm to Understand Learning
             from Human Preferences"), eq. 17: (h - 1 / (2 beta))^2, h on summed log-probs
             as in the paper and ROLL (`roll/pipeline/dpo/actor_worker.py`); TRL's
             `loss_type="ipo"` averages the log-probs over each response's tokens first.
             r as for sigmoid.
    simpo    SimPO, Meng et al. 2024, eq. 6: -log sigma(beta/|y_w| log pi(y_w)
             - beta/|y_l| log pi(y_l) - gamma): no reference; each response's log-prob is
             averaged over its tokens (the length normalisation) and gamma is the target
             reward margin. label_smoothing as cDPO's (the SimPO authors' trainer has it).
             r(x, y) = beta / |y| log pi(y).

Names follow TRL (`DPOConfig.loss_type`: "sigmoid", "ipo"; `CPOConfig.loss_type="simpo"`
with `simpo_gamma`). ROLL spells IPO as the switch `ipo: true`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PairLogps:
    """Sequence log-probs of P pairs, all [P]; the reference's None without one."""

    chosen: torch.Tensor  # policy, sum over the chosen response's tokens
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor  # response tokens of each (float), SimPO's |y|
    rejected_tokens: torch.Tensor
    ref_chosen: torch.Tensor | None = None
    ref_rejected: torch.Tensor | None = None


@dataclass(frozen=True)
class PairLossArgs:
    beta: float = 0.1  # DPO's KL strength / IPO's 1/(2 beta) target / SimPO's scale
    label_smoothing: float = 0.0  # cDPO: the probability a pair's label is flipped
    simpo_gamma: float = 0.5  # SimPO's target reward margin (its paper's gamma)


@dataclass(frozen=True)
class PairLosses:
    losses: torch.Tensor  # [P] one loss per pair (with gradient)
    chosen_rewards: torch.Tensor  # [P] implicit rewards, no gradient
    rejected_rewards: torch.Tensor  # [P]


def _reference_margin(p: PairLogps) -> torch.Tensor:
    if p.ref_chosen is None or p.ref_rejected is None:
        raise ValueError("this pairwise loss needs the reference's log-probs")
    return (p.chosen - p.ref_chosen) - (p.rejected - p.ref_rejected)  # [P] h


def _dpo_rewards(p: PairLogps, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    return ((beta * (p.chosen - p.ref_chosen)).detach(),
            (beta * (p.rejected - p.ref_rejected)).detach())


def _smoothed_sigmoid(logits: torch.Tensor, eps: float) -> torch.Tensor:
    """cDPO's eq. 3 on beta*h (or SimPO's logit): eps = 0 is the plain -log sigma."""
    return -(1.0 - eps) * F.logsigmoid(logits) - eps * F.logsigmoid(-logits)


def sigmoid_loss(p: PairLogps, args: PairLossArgs) -> PairLosses:
    """DPO (Rafailov et al. 2023, eq. 7) with cDPO label smoothing (module docstring)."""
    h = _reference_margin(p)  # [P]
    return PairLosses(_smoothed_sigmoid(args.beta * h, args.label_smoothing),
                      *_dpo_rewards(p, args.beta))


def ipo_loss(p: PairLogps, args: PairLossArgs) -> PairLosses:
    """IPO (Azar et al. 2023, eq. 17): the squared distance of h to 1 / (2 beta)."""
    h = _reference_margin(p)  # [P]
    return PairLosses((h - 1.0 / (2.0 * args.beta)) ** 2, *_dpo_rewards(p, args.beta))


def simpo_loss(p: PairLogps, args: PairLossArgs) -> PairLosses:
    """SimPO (Meng et al. 2024, eq. 6): length-normalised, reference-free, margin gamma."""
    chosen = args.beta * p.chosen / p.chosen_tokens.clamp(min=1.0)  # [P]
    rejected = args.beta * p.rejected / p.rejected_tokens.clamp(min=1.0)  # [P]
    logits = chosen - rejected - args.simpo_gamma
    return PairLosses(_smoothed_sigmoid(logits, args.label_smoothing), chosen.detach(),
                      rejected.detach())


PairLossFn = Callable[[PairLogps, PairLossArgs], PairLosses]
# `dpo_loss_type` -> its function; the names and whether each needs a reference are
# preference/__init__.py's LOSS_NAMES (read by the config checks without torch)
PAIR_LOSSES: dict[str, PairLossFn] = {
    "sigmoid": sigmoid_loss,
    "ipo": ipo_loss,
    "simpo": simpo_loss,
}


def pair_metrics(p: PairLogps, out: PairLosses, prefix: str = "dpo") -> dict[str, float]:
    """The pairs' means: loss, reward margin and accuracy, chosen / rejected log-probs."""
    margin = out.chosen_rewards - out.rejected_rewards  # [P]
    return {
        f"{prefix}/loss": float(out.losses.detach().mean()),
        f"{prefix}/reward_margin": float(margin.mean()),
        f"{prefix}/reward_accuracy": float((margin > 0).float().mean()),
        f"{prefix}/chosen_rewards": float(out.chosen_rewards.mean()),
        f"{prefix}/rejected_rewards": float(out.rejected_rewards.mean()),
        f"{prefix}/chosen_logps": float(p.chosen.detach().mean()),
        f"{prefix}/rejected_logps": float(p.rejected.detach().mean()),
    }
