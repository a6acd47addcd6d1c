"""Step-level credit for per-turn samples (agentic `step_level_samples`), and fitting a
batch's rows to whole optimizer steps.

Estimators over turn rows (R rows, one per turn of each episode), after ROLL's agentic
pipeline (roll/pipeline/agentic/utils.py compute_response_level_rewards):

    step_reinforce  A_t = norm_S(G_t), G_t = sum_k gamma^k r_(t+k) the turn's discounted
                    return, normalised over the set S of the row (its env group or the
                    whole batch, by norm_mean_type / norm_std_type).
    gigpo           A_t = w_e * norm_group(R(tau)) + w_s * norm_anchor(G_t)
                    (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent
                    Training", arXiv 2505.10978, eqs. 5-7): the episode part normalises
                    the episode's total reward R(tau) over the episodes of its group; the
                    step part normalises G_t over its *anchor-state group*, the turns of
                    that group's episodes played from the same env state, so two actions
                    taken from one state are compared with each other.

`norm`: subtract the set's mean when centring, divide by its std (+eps) when scaling; zero
where a scaled set's std is below eps (a single turn, or equal returns: no ranking signal),
as ROLL's agentic_reward_norm and flywheel's GRPO do. std is the population std (divide
by n), as everywhere in flywheel (algorithms/advantages.py); ROLL and verl-agent use
torch.std (n - 1), which scales a set of n by sqrt((n - 1) / n) more.

The episode part of gigpo counts each episode once (the paper's episode-level group);
ROLL's implementation normalises its per-turn copies, weighting long episodes more.

`fitted_rows` is ROLL's `batch_adjust_mode` (agentic_pipeline.py adjust_batch, after
verl-agent): which rows to keep (or repeat) so their count is a multiple of the global
train batch.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

BATCH_ADJUST_MODES = ("none", "copy", "delete", "auto", "random_sample")  # schema's Literal


def normalize_within(values: Tensor, sets: Tensor, center: bool, scale: bool,
                     eps: float = 1e-6, std_sets: Tensor | None = None) -> Tensor:
    """values [N] less the mean of their set (`sets` [N] long ids: rows with one id form a
    set) when centring, divided by the std of their `std_sets` set (default `sets`) when
    scaling; zero where that std is below eps."""
    values = values.float()
    out = values - _set_mean(values, sets) if center else values.clone()
    if not scale:
        return out
    std_sets = sets if std_sets is None else std_sets
    std = _set_mean((values - _set_mean(values, std_sets)) ** 2, std_sets).sqrt()  # [N]
    return torch.where(std < eps, torch.zeros_like(out), out / (std + eps))


def _set_mean(values: Tensor, sets: Tensor) -> Tensor:
    """Mean of `values` [N] over each row's set, broadcast back to [N]."""
    _, inverse = torch.unique(sets, return_inverse=True)  # [N]
    count = torch.bincount(inverse).float()  # [S]
    total = torch.zeros_like(count).index_add_(0, inverse, values)  # [S]
    return (total / count)[inverse]


def anchor_ids(keys: Sequence[Hashable]) -> list[int]:
    """One id per distinct key, numbered by first appearance (key = env group plus the
    env state a turn was played from)."""
    ids: dict[Hashable, int] = {}
    return [ids.setdefault(key, len(ids)) for key in keys]


def gigpo_advantages(episode_scores: Tensor, episode_sets: tuple[Tensor, Tensor],
                     step_returns: Tensor, row_episode: Tensor, row_anchor: Tensor,
                     center: bool, scale: bool, episode_weight: float,
                     step_weight: float) -> Tensor:
    """Per-row GiGPO advantage [R] (module docstring). episode_scores [E] and the sets its
    mean and std are taken over (each [E]: the episode's group, or one set for the batch);
    step_returns / row_episode / row_anchor [R]."""
    mean_sets, std_sets = episode_sets
    episode = normalize_within(episode_scores, mean_sets, center, scale,
                               std_sets=std_sets)  # [E]
    step = normalize_within(step_returns, row_anchor, center, scale)  # [R]
    return episode_weight * episode[row_episode] + step_weight * step


def fitted_rows(n: int, multiple: int, mode: str, generator: torch.Generator) -> Tensor:
    """Row indices making `n` rows a multiple of `multiple`, by ROLL's batch_adjust_mode:

    copy           append randomly chosen rows again (they train twice);
    delete         remove n % multiple random rows (copy when that would leave none);
    auto           copy when the remainder is at least half the batch or the batch is
                   under one multiple, else delete;
    random_sample  keep exactly `multiple` random rows (copy when n < multiple);
    none           keep every row.
    """
    keep = torch.arange(n)
    remainder = n % multiple
    if mode == "none" or remainder == 0:
        return keep
    if mode == "auto":
        mode = "copy" if remainder >= 0.5 * n or n < multiple else "delete"
    if mode in ("random_sample", "delete") and n < multiple:
        mode = "copy"
    if mode == "delete":
        drop = torch.randperm(n, generator=generator)[:remainder]
        return keep[~torch.isin(keep, drop)]
    if mode == "random_sample":
        return torch.randperm(n, generator=generator)[:multiple].sort().values
    if mode == "copy":
        extra = multiple - remainder
        if extra > n:
            copies = torch.randint(n, (extra,), generator=generator)
        else:
            copies = torch.randperm(n, generator=generator)[:extra]
        return torch.cat([keep, copies])
    raise ValueError(f"batch_adjust_mode must be one of {BATCH_ADJUST_MODES}, got {mode!r}")
