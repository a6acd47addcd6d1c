"""Episode groups → the token batch actor_train learns from, their advantages, env metrics.

Two views of an episode (both cut from the same token list, see envs/trajectory.py):

- trajectory (default): one row per episode, every turn's prompt and response ids exactly
  as played; `response_mask` is 1 on model tokens only (env text is context, never
  trained on); the behaviour log-probs sit on the model tokens; the score is the episode
  return. Rows of a group are contiguous, so GRPO's group baseline applies as in RLVR.
- step (`step_level_samples`): one row per turn, prompt = the history before it. Rows per
  episode vary, so padding rows (one real token, no loss) round the batch up to a multiple
  of the training data-parallel size.

Advantages:
- default: RLVR's `add_advantages` on the episode score, with the env group as the GRPO
  group (so KL penalty, whitening and clipping behave exactly as in RLVR);
- `turn_level_returns`: the tokens of turn t get A_t = (G_t − mean_g G_0) / (std_g G_0 + eps),
  G_t = Σ_k γ^k r_(t+k) (discounted return from turn t; `discounted_returns`) and mean/std
  over the episodes of the group; zero where the group's std is below eps, like GRPO.
  Step-level rows use the same formula with their own G_t (or the episode score when
  turn_level_returns is off).
- `step_reinforce` / `gigpo` (step rows only): algorithms/step_credit.py. A turn's anchor
  state (GiGPO) is its env group plus the env state it was played from (Trajectory
  `turn_states`: the env's `state_key` when it gives one, else the observation the env
  returned), as GiGPO and verl-agent group identical states; not the rendered prompt, whose
  turn template writes the turn number and actions left, so one state reached at two turns
  would never share a group.

`fit_rows` then applies `batch_adjust_mode`: rows dropped or repeated so a step's rows fill
whole optimizer steps; after the advantages, so their statistics see every episode played
(ROLL adjusts before, so a dropped row leaves its group's statistics there).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from flywheel.algorithms import advantage_clip, whiten_advantages
from flywheel.algorithms.estimators import estimator_spec
from flywheel.algorithms.step_credit import (
    anchor_ids,
    fitted_rows,
    gigpo_advantages,
    normalize_within,
)
from flywheel.config.derived import data_parallel_size
from flywheel.config.schema import PipelineConfig
from flywheel.envs import aggregate_metrics, discounted_returns, to_step_samples
from flywheel.pipelines.agentic.env_jobs import EpisodeGroup
from flywheel.pipelines.distill.opd_batch import teacher_scores
from flywheel.pipelines.rlvr.train_batch import add_advantages, place_turn_rewards
from flywheel.workers.batch import TokenBatch, pack_sequences

EPS = 1e-6


def pack_trajectories(groups: list[EpisodeGroup], pad_id: int, gamma: float) -> TokenBatch:
    """One row per episode; `returns` holds G_t on the tokens of turn t."""
    episodes = [t for g in groups for t in g.trajectories]
    width = max(len(t.input_ids) for t in episodes)
    rows = len(episodes)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)  # [B, L]
    attention_mask = torch.zeros((rows, width), dtype=torch.long)  # [B, L]
    response_mask = torch.zeros((rows, width))  # [B, L]
    infer_lp = torch.zeros((rows, width))  # [B, L]
    returns = torch.zeros((rows, width))  # [B, L]
    turn_rewards = torch.zeros((rows, width))  # [B, L]
    for b, t in enumerate(episodes):
        n = len(t.input_ids)
        input_ids[b, :n] = torch.tensor(t.input_ids)
        attention_mask[b, :n] = 1
        response_mask[b, :n] = torch.tensor(t.response_mask, dtype=torch.float32)
        infer_lp[b, :n] = torch.tensor(t.behaviour_logprobs, dtype=torch.float32)
        for (start, end), g_t in zip(t.turn_spans, discounted_returns(t.rewards, gamma)):
            returns[b, start:end] = g_t
        place_turn_rewards(turn_rewards[b], response_mask[b], t.turn_spans, t.rewards)
    batch = TokenBatch(input_ids, attention_mask, response_mask,
                       infer_log_probs=infer_lp, returns=returns, turn_rewards=turn_rewards)
    batch.scores = torch.tensor([t.score for t in episodes])
    batch.version = torch.tensor([g.version for g in groups for _ in g.trajectories])
    batch.episode_return = _episode_returns(groups, gamma)
    return batch


def pack_steps(groups: list[EpisodeGroup], pad_id: int, gamma: float, turn_level: bool,
               multiple_of: int, episode_gamma: float | None = None) -> TokenBatch:
    """One row per turn, padded with loss-free rows to a multiple of `multiple_of`.
    `episode_return` is G_0 discounted by `episode_gamma` (default `gamma`; 1.0 gives the
    episode's total reward, GiGPO's episode score)."""
    prompts, responses, logprobs, scores, episode, versions = [], [], [], [], [], []
    anchors: list[tuple] = []
    index = 0
    for g_index, g in enumerate(groups):
        for t in g.trajectories:
            steps = to_step_samples(t, gamma)
            if len(t.turn_states) < len(steps):
                raise ValueError(f"env {t.env_id}: {len(steps)} turns but the states of "
                                 f"{len(t.turn_states)} (Trajectory.turn_states)")
            for step in steps:
                anchors.append((g_index, t.turn_states[step.turn_idx]))
                prompts.append(step.prompt_ids)
                responses.append(step.response_ids)
                logprobs.append(step.response_logprobs)
                scores.append(step.discounted_return if turn_level else
                              steps[0].discounted_return)
                episode.append(index)
                versions.append(g.turn_versions[step.turn_idx])
            index += 1
    padding = -len(prompts) % multiple_of
    prompts += [prompts[0][:1]] * padding  # one real token, no response: no loss
    responses += [[]] * padding
    logprobs += [[]] * padding
    batch = pack_sequences(prompts, responses, pad_id, logprobs)
    batch.scores = torch.tensor(scores + [0.0] * padding)
    batch.version = torch.tensor(versions + [versions[0]] * padding)
    batch.episode = torch.tensor(episode + [-1] * padding)
    batch.episode_return = _episode_returns(
        groups, gamma if episode_gamma is None else episode_gamma)[batch.episode.clamp(min=0)]
    batch.anchor = torch.tensor(anchor_ids(anchors) + [-1] * padding)
    return batch


def _episode_returns(groups: list[EpisodeGroup], gamma: float) -> torch.Tensor:
    """G_0 of every episode, in row order of pack_trajectories."""
    return torch.tensor([discounted_returns(t.rewards, gamma)[0] if t.rewards else 0.0
                         for g in groups for t in g.trajectories])


def agentic_advantages(batch: TokenBatch, cfg: PipelineConfig, group_size: int,
                       kl_coef: float) -> dict[str, float]:
    """Fill batch.advantages [B, L] (see the module docstring); metrics out."""
    if estimator_spec(cfg.adv_estimator).per_turn:  # step_reinforce, gigpo
        return _finish(batch, cfg, _step_advantages(batch, cfg, group_size))
    if not cfg.turn_level_returns and not cfg.step_level_samples:
        teachers = teacher_scores(batch, list(cfg.teacher)) if cfg.teacher else None
        return add_advantages(batch, cfg, group_size, kl_coef, teachers)
    mask = batch.response_mask  # [B, L]
    g0 = _episode_returns_by_episode(batch)  # [E]
    grouped = g0.reshape(-1, group_size)  # [G, n]
    mean = grouped.mean(-1).repeat_interleave(group_size)  # [E]
    std = grouped.std(-1, correction=0).repeat_interleave(group_size)  # [E]
    if cfg.step_level_samples:
        episode = batch.episode.clamp(min=0)  # [B]
        value = batch.scores.float()[:, None].expand_as(mask)  # [B, L]
    else:
        episode = torch.arange(len(batch))  # [B]
        value = batch.returns  # [B, L]
    mu, sigma = mean[episode][:, None], std[episode][:, None]  # [B, 1]
    advantages = torch.where(sigma < EPS, torch.zeros_like(value), (value - mu) / (sigma + EPS))
    return _finish(batch, cfg, advantages)


def _step_advantages(batch: TokenBatch, cfg: PipelineConfig, group_size: int) -> torch.Tensor:
    """step_reinforce / gigpo advantages [B, L] of per-turn rows (algorithms/step_credit.py);
    0 on padding rows. batch.scores holds each row's G_t (pack_steps with turn_level)."""
    real = batch.episode >= 0  # [B]
    episode = batch.episode[real]  # [R]
    returns = batch.scores.float()[real]  # [R]
    center, scale = cfg.norm_mean_type != "none", cfg.norm_std_type != "none"
    if cfg.adv_estimator == "gigpo":
        scores = _episode_returns_by_episode(batch)  # [E] total reward (episode_gamma 1)
        sets = _scopes(torch.arange(len(scores)), cfg, group_size)
        row = gigpo_advantages(scores, sets, returns, episode, batch.anchor[real], center,
                               scale, cfg.episode_reward_weight, cfg.step_reward_weight)
    else:
        mean_sets, std_sets = _scopes(episode, cfg, group_size)
        row = normalize_within(returns, mean_sets, center, scale, EPS, std_sets)
    if cfg.reward_clip is not None:  # ROLL clips these response-level values (utils.py)
        row = row.clamp(-cfg.reward_clip, cfg.reward_clip)
    per_row = torch.zeros(len(batch))  # [B]
    per_row[real] = row
    return per_row[:, None].expand_as(batch.response_mask)  # [B, L]


def _scopes(episode: torch.Tensor, cfg: PipelineConfig,
            group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sets norm_mean_type and norm_std_type normalise over, as ids per row of
    `episode` (episode indices): its env group, or one set for the batch ("none": either)."""
    group = episode // group_size
    batch = torch.zeros_like(episode)
    return (group if cfg.norm_mean_type == "group" else batch,
            group if cfg.norm_std_type == "group" else batch)


def _finish(batch: TokenBatch, cfg: PipelineConfig, advantages: torch.Tensor) -> dict[str, float]:
    mask = batch.response_mask  # [B, L]
    if cfg.whiten_advantages:
        advantages = whiten_advantages(advantages, mask)
    if cfg.advantage_clip is not None:
        advantages = advantage_clip(advantages, cfg.advantage_clip)
    batch.advantages = advantages * mask  # [B, L]
    valid = mask.bool()
    return {"advantages/mean": float(batch.advantages[valid].mean()),
            "advantages/abs_mean": float(batch.advantages[valid].abs().mean())}


def fit_rows(batch: TokenBatch, mode: str, multiple: int, seed: int) -> dict[str, float]:
    """`batch_adjust_mode` (schema; algorithms/step_credit.py fitted_rows): the batch's
    rows replaced in place by a multiple of `multiple` of its real rows (the step view's
    loss-free padding rows go first). Metrics: rows added (copies) and removed."""
    if mode == "none":
        return {}
    real = (torch.arange(len(batch)) if batch.episode is None
            else (batch.episode >= 0).nonzero().flatten())  # [n]
    picked = real[fitted_rows(len(real), multiple, mode,
                              torch.Generator().manual_seed(seed))]
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if value is not None:
            setattr(batch, f.name, value[picked])
    return {"rollout/batch_rows_added": float(max(len(picked) - len(real), 0)),
            "rollout/batch_rows_removed": float(max(len(real) - len(picked), 0))}


def data_parallel_rows(roles) -> int:
    """Rows must split evenly over every role a batch is sharded to (pipelines/roles)."""
    parts = (roles.actor_train, roles.reference, roles.critic)
    return math.lcm(*(r.world_size for r in parts if r is not None))


def rows_per_optimizer_step(cfg: PipelineConfig, roles) -> int:
    """The global batch of every training role (per-device rows x accumulation x
    data-parallel size), and the data-parallel split of every role: `fit_rows`' multiple."""
    sizes = [data_parallel_rows(roles)]
    for key in ("actor_train", "critic"):
        worker = getattr(cfg, key)
        if worker is not None:
            args = worker.training_args
            sizes.append(args.per_device_train_batch_size * args.gradient_accumulation_steps
                         * data_parallel_size(worker, key))
    return math.lcm(*sizes)


def _episode_returns_by_episode(batch: TokenBatch) -> torch.Tensor:
    """G_0 per episode [E], whichever view the batch is in."""
    if batch.episode is None:
        return batch.episode_return.float()
    g0 = torch.zeros(int(batch.episode.max()) + 1)
    rows = batch.episode >= 0
    g0[batch.episode[rows]] = batch.episode_return[rows].float()
    return g0


def env_metrics(groups: list[EpisodeGroup], prefix: str) -> dict[str, float]:
    """`<prefix>success`, `episode_reward`, `episode_length`, `action_is_valid`, ... over
    all episodes, and the same per tag under `<prefix><tag>/`."""
    episodes = [t for g in groups for t in g.trajectories]
    metrics = aggregate_metrics(episodes, prefix)
    for tag in sorted({t.tag for t in episodes}):
        metrics.update(aggregate_metrics([t for t in episodes if t.tag == tag],
                                         f"{prefix}{tag}/"))
    return metrics
