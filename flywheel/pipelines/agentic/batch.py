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
"""

from __future__ import annotations

import torch

from flywheel.algorithms import advantage_clip, whiten_advantages
from flywheel.envs import aggregate_metrics, discounted_returns, to_step_samples
from flywheel.pipelines.agentic.env_jobs import EpisodeGroup
from flywheel.pipelines.rlvr.train_batch import add_advantages
from flywheel.platform.config.schema import PipelineConfig
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
    for b, t in enumerate(episodes):
        n = len(t.input_ids)
        input_ids[b, :n] = torch.tensor(t.input_ids)
        attention_mask[b, :n] = 1
        response_mask[b, :n] = torch.tensor(t.response_mask, dtype=torch.float32)
        infer_lp[b, :n] = torch.tensor(t.behaviour_logprobs, dtype=torch.float32)
        for (start, end), g_t in zip(t.turn_spans, discounted_returns(t.rewards, gamma)):
            returns[b, start:end] = g_t
    batch = TokenBatch(input_ids, attention_mask, response_mask,
                       infer_log_probs=infer_lp, returns=returns)
    batch.scores = torch.tensor([t.score for t in episodes])
    batch.version = torch.tensor([g.version for g in groups for _ in g.trajectories])
    batch.episode_return = _episode_returns(groups, gamma)
    return batch


def pack_steps(groups: list[EpisodeGroup], pad_id: int, gamma: float, turn_level: bool,
               multiple_of: int) -> TokenBatch:
    """One row per turn, padded with loss-free rows to a multiple of `multiple_of`."""
    prompts, responses, logprobs, scores, episode, versions = [], [], [], [], [], []
    index = 0
    for g in groups:
        for t in g.trajectories:
            steps = to_step_samples(t, gamma)
            for step in steps:
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
    batch.episode_return = _episode_returns(groups, gamma)[
        batch.episode.clamp(min=0)]
    return batch


def _episode_returns(groups: list[EpisodeGroup], gamma: float) -> torch.Tensor:
    """G_0 of every episode, in row order of pack_trajectories."""
    return torch.tensor([discounted_returns(t.rewards, gamma)[0] if t.rewards else 0.0
                         for g in groups for t in g.trajectories])


def agentic_advantages(batch: TokenBatch, cfg: PipelineConfig, group_size: int,
                       kl_coef: float) -> dict[str, float]:
    """Fill batch.advantages [B, L] (see the module docstring); metrics out."""
    if not cfg.turn_level_returns and not cfg.step_level_samples:
        return add_advantages(batch, cfg, group_size, kl_coef)
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
    if cfg.whiten_advantages:
        advantages = whiten_advantages(advantages, mask)
    if cfg.advantage_clip is not None:
        advantages = advantage_clip(advantages, cfg.advantage_clip)
    batch.advantages = advantages * mask  # [B, L]
    valid = mask.bool()
    return {"advantages/mean": float(batch.advantages[valid].mean()),
            "advantages/abs_mean": float(batch.advantages[valid].abs().mean())}


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
