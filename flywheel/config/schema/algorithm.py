"""The algorithm's keys: sample filters and masks, advantages, policy-loss clipping, KL and
importance corrections.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LossAggMode = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]


KlEstimator = Literal["k1", "k2", "k3", "abs"]


NormType = Literal["batch", "group", "none"]


@dataclass
class AlgorithmKeys:
    """Which samples train, and the advantages, losses, KL and importance corrections they
    train with. The PPO clip keys (pg_clip, ...) are declared beside the losses that read
    them (algorithms/policy_loss/params.py `PPOClipKnobs`, a key group of its own)."""

    # Drop groups whose responses all scored the same (no GRPO signal; DAPO's dynamic
    # sampling) as they are scored, and generate more prompts to refill the batch, at any
    # async_generation_ratio. Dropped groups are counted in rollout/dropped_filtered and in
    # samples.jsonl (fate "filtered"). See pipelines/loop/group_filter.py.
    drop_uniform_groups: bool = False
    # Dynamic sampling band, [lo, hi]: also drop groups whose mean score lies outside it
    # (e.g. [0.1, 0.9] keeps prompts solved sometimes). Unset: no band.
    group_filter_mean_range: list[float] | None = None
    # Also drop groups whose score standard deviation is at most this (0: off).
    group_filter_min_std: float = 0.0
    # Cap on the refilling: groups generated for one trained batch, in batches, at most
    # (verl's max_num_gen_batches). Past it the batch is filled with unfiltered groups,
    # counted in rollout/filter_cap_kept, so a run never loops forever. 0: no cap.
    max_num_gen_batches: int = 10

    # RLVR loss masks (ROLL's): a masked sample stays in the batch (its score still counts
    # in its group's GRPO mean and std) but carries no loss and no token of the loss's
    # counts, for the policy and the critic; nothing is refilled, unlike the group filter
    # above, which drops groups and generates others. Counted per step in
    # rollout/masked_truncated and rollout/masked_difficulty (samples).
    # max_len_mask: mask every response the length limit cut off (finish reason "length":
    # max_new_tokens, or sequence_length), whose score judges an unfinished answer (TRL's
    # mask_truncated_completions; DAPO's overlong filtering).
    max_len_mask: bool = False
    # Mask every sample of a group whose mean score is outside the open interval
    # (difficulty_low_threshold, difficulty_high_threshold): kept only when low < mean <
    # high, both bounds exclusive as in ROLL (the defaults 0 and 1 mask the groups that all
    # failed or all passed; ROLL's examples use 0.1 and 0.95). Needs
    # num_return_sequences_in_group > 1.
    difficulty_mask: bool = False
    # difficulty_low_threshold and difficulty_high_threshold: the bounds of difficulty_mask,
    # in score units, low < high.
    difficulty_low_threshold: float = 0.0
    difficulty_high_threshold: float = 1.0

    # Samples per prompt (GRPO group size).
    num_return_sequences_in_group: int = 1
    # ROLL key: send each prompt num_return_sequences_in_group times with n=1 instead of
    # once with n samples (infer_worker.py); same distribution, another request layout.
    is_num_return_sequences_expand: bool = False
    # Passes over each rollout batch (each pass = its mini-batches' optimizer steps).
    ppo_epochs: int = 1

    # Advantages: grpo (group mean/std), reinforce (REINFORCE/REINFORCE++ with the
    # normalisation below) or gae (needs a critic). Agentic with step_level_samples only
    # (algorithms/step_credit.py): step_reinforce (each turn's discounted return G_t,
    # normalised as reinforce's scores) and gigpo (GiGPO: the episode's normalised reward
    # plus G_t normalised among the group's turns that saw the same observation, weighted
    # by episode_reward_weight / step_reward_weight). A name in the estimator catalog
    # (flywheel/algorithms/estimators.py; an unknown name is refused, listing the known ones).
    adv_estimator: str = "grpo"
    # reinforce: subtract the batch or group mean score (norm_mean_type) and divide by the
    # batch or group std (norm_std_type), or skip either with none; batch/batch is
    # REINFORCE++, group/none Dr. GRPO. grpo always uses group/group: other values
    # under grpo are refused (use reinforce).
    norm_mean_type: NormType = "group"
    norm_std_type: NormType = "group"
    # Normalise advantages to zero mean and unit variance over the batch's response tokens.
    whiten_advantages: bool = False
    # Clip scores (reward_clip) / advantages (advantage_clip) to [-x, x]; unset disables.
    reward_clip: float | None = None
    advantage_clip: float | None = None
    # Discount factor (gae; agentic turn_level_returns).
    gamma: float = 1.0
    # GAE lambda (gae only).
    lambd: float = 1.0

    # Critic value clip (gae only); unset disables.
    value_clip: float | None = None

    # KL to the reference policy, either as a loss term (use_kl_loss) with weight
    # kl_loss_coef and estimator kl_loss_type (k1 log-ratio, k2 half squared, k3
    # Schulman's unbiased, abs) ...
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: KlEstimator = "k3"
    # ... or as a token-level reward penalty (init_kl_coef > 0), fixed or adaptive.
    init_kl_coef: float = 0.0
    # Estimator of the reward-penalty KL (as kl_loss_type).
    kl_penalty: KlEstimator = "k1"
    # Set: the penalty coefficient adapts toward this KL (Ziegler et al. 2019) over
    # kl_horizon samples; unset: it stays init_kl_coef.
    target_kl: float | None = None
    kl_horizon: int = 10000
    # Entropy bonus: entropy_loss_coef * entropy is subtracted from the loss (0 disables).
    entropy_loss_coef: float = 0.0

    # Weight each token (or sequence) by pi_old / pi_behaviour, the proximal policy
    # (actor_train before the update) over the one that sampled it, as in decoupled PPO
    # (Hilton et al. 2022): it corrects for staleness (generation ahead of training) and
    # for train/infer kernel mismatch together. truncate caps the weight, mask zeroes what
    # is out of bounds. auto: token-truncate when generation runs ahead
    # (async_generation_ratio > 0 or partial_rollout), none in the synchronous pipeline;
    # `platform show-config` prints what auto became.
    infer_is_correction: Literal["auto", "none", "token-truncate", "seq-truncate",
                                 "token-mask", "seq-mask"] = "auto"
    # Bounds of that weight: truncate caps it at infer_is_upper_bound; mask zeroes tokens
    # (or sequences) whose weight is outside [infer_is_lower_bound, infer_is_upper_bound].
    infer_is_lower_bound: float = 0.5
    infer_is_upper_bound: float = 2.0
    # ROLL's train_infer_correction filter (algorithms/infer_filter.py): a token whose
    # train/infer disagreement, aggregated at this level, leaves a band below gets weight 0
    # in the loss, on top of infer_is_correction's weight (1 when that is none). token;
    # sequence (summed over the response); geometric (mean over the response); segment
    # (mean over each run of consecutive model tokens: a turn of a multi-turn episode).
    # none: no filter; any other level needs at least one band.
    infer_filter_level: Literal["none", "token", "sequence", "geometric", "segment"] = "none"
    # [low, high] on the ratio pi_old / pi_infer at infer_filter_level (exp of the summed
    # or mean log-ratio), e.g. [0.8, 1.2]; unset: no ratio band.
    infer_filter_ratio_band: list[float] | None = None
    # [low, high] on the probability difference pi_old - pi_infer at infer_filter_level
    # (summed or averaged like the log-ratio), e.g. [-0.1, 0.1]; unset: no difference band.
    infer_filter_diff_band: list[float] | None = None
