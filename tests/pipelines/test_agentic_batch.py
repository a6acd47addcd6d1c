"""Agentic batches without Ray: trajectories → rows whose loss mask covers model tokens only,
GRPO / per-turn advantages worked out by hand, job planning and seeding, hung envs."""

from __future__ import annotations

import time

import pytest
import torch

from flywheel.config.schema import ValidationGeneratingArgs
from flywheel.envs import EnvManager, Trajectory
from flywheel.pipelines.agentic.batch import (
    agentic_advantages,
    env_metrics,
    fit_rows,
    pack_steps,
    pack_trajectories,
)
from flywheel.pipelines.agentic.env_jobs import (
    EpisodeGroup,
    env_manager_config,
    episode_group_from_dict,
    episode_group_to_dict,
    group_tags,
    train_jobs,
    val_jobs,
)
from flywheel.pipelines.config import load_config_dict
from flywheel.workers.env_worker import TimedEnv


class CharCodec:
    """One token per character (ids are code points); enough for the env manager."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids) -> str:
        return "".join(chr(i) for i in ids)


def scripted(actions: list[str]):
    """A generate_fn replying with the next action of `actions` to every prompt."""
    turn = iter(actions)

    def generate(prompts, max_tokens):
        reply = [ord(c) for c in f"<answer>{next(turn)}</answer>"]
        return [(reply, [-0.5] * len(reply)) for _ in prompts]
    return generate


def agentic_cfg(**top) -> object:
    cfg = {"pipeline_type": "agentic", "rollout_batch_size": 4, "val_batch_size": 2,
           "actor_train": {"training_args": {"per_device_train_batch_size": 4}},
           "train_env_manager": {"num_env_groups": 2, "group_size": 2},
           "val_env_manager": {"num_env_groups": 2, "group_size": 1},
           "custom_envs": {"FrozenLake": {"env_type": "frozen_lake", "max_steps": 4,
                                          "max_tokens_per_step": 32,
                                          "agent_system_template": "",
                                          "agent_template": "{observation}\n",
                                          "env_config": {"size": 3, "env_instruction": ""}}}}
    return load_config_dict({**cfg, **top})


def played_groups(cfg, actions: list[str]) -> list[EpisodeGroup]:
    spec = env_manager_config("FrozenLake", cfg.custom_envs["FrozenLake"],
                              cfg.train_env_manager, num_groups=2)
    episodes = EnvManager(spec).rollout(scripted(actions), CharCodec(), seed=3)
    return [EpisodeGroup(g, "FrozenLake", episodes[2 * g:2 * g + 2], version=0,
                         turn_versions=[0, 0, 1, 1], scores=[t.score for t in
                                                             episodes[2 * g:2 * g + 2]])
            for g in range(2)]


def test_trajectory_rows_train_on_model_tokens_only():
    cfg = agentic_cfg()
    groups = played_groups(cfg, ["Nonsense", "Right", "Down", "Down"])
    batch = pack_trajectories(groups, pad_id=0, gamma=1.0)
    episodes = [t for g in groups for t in g.trajectories]
    assert len(batch) == 4
    for b, t in enumerate(episodes):
        model_tokens = {i for start, end in t.turn_spans for i in range(start, end)}
        mask = batch.response_mask[b]
        assert {i for i in range(mask.shape[0]) if mask[i] == 1} == model_tokens
        # the model's replies, verbatim, and nothing the env wrote
        replies = "".join(chr(int(batch.input_ids[b, i])) for i in sorted(model_tokens))
        assert replies.startswith("<answer>Nonsense</answer><answer>Right</answer>")
        assert "P" not in replies and "_" not in replies
        lp = batch.infer_log_probs[b]
        assert torch.all(lp[mask == 1] == -0.5) and torch.all(lp[mask == 0] == 0)
        assert batch.attention_mask[b].sum() == len(t.input_ids)
        assert batch.scores[b] == pytest.approx(t.score)
    # episodes of one group started on one map, so they played the same game
    assert groups[0].trajectories[0].input_ids == groups[0].trajectories[1].input_ids


def test_grpo_over_a_group_of_episodes_by_hand():
    cfg = agentic_cfg()
    groups = played_groups(cfg, ["Right", "Right", "Down", "Down"])
    for g, scores in zip(groups, ([1.0, 0.0], [0.5, 0.5])):  # set returns to check maths
        for t, s in zip(g.trajectories, scores):
            t.rewards = [0.0] * (len(t.turn_spans) - 1) + [s]
    batch = pack_trajectories(groups, pad_id=0, gamma=1.0)
    agentic_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    adv = batch.advantages
    # group 0: scores 1, 0 -> mean 0.5, std 0.5 -> +1 / -1 on every model token; group 1: 0
    for b, expected in enumerate([1.0, -1.0, 0.0, 0.0]):
        on = adv[b][batch.response_mask[b] == 1]
        assert torch.allclose(on, torch.full_like(on, expected), atol=1e-4), (b, on)
        assert torch.all(adv[b][batch.response_mask[b] == 0] == 0)


def test_turn_level_returns_credit_each_turn_with_its_discounted_return():
    cfg = agentic_cfg(turn_level_returns=True, gamma=0.5)
    groups = played_groups(cfg, ["Right", "Right", "Down", "Down"])
    rewards = [[-0.1, 0.0, 1.0], [0.0, 0.0, 0.0]]  # episode returns G_0: 0.15, 0
    for t, r in zip(groups[0].trajectories, rewards):
        t.rewards, t.turn_spans = r, t.turn_spans[:3]
    batch = pack_trajectories(groups[:1], pad_id=0, gamma=0.5)
    agentic_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    # G_t of episode 0: 0.15, 0.5, 1.0; group mean 0.075, std 0.075
    t0 = groups[0].trajectories[0]
    for (start, _), g_t in zip(t0.turn_spans, [0.15, 0.5, 1.0]):
        assert batch.advantages[0, start] == pytest.approx((g_t - 0.075) / 0.075,
                                                                   rel=1e-4)


def test_step_level_rows_are_history_then_turn_padded_to_the_dp_size():
    cfg = agentic_cfg(step_level_samples=True)
    groups = played_groups(cfg, ["Right", "Right", "Down", "Down"])
    turns = sum(len(t.turn_spans) for g in groups for t in g.trajectories)
    batch = pack_steps(groups, pad_id=0, gamma=1.0, turn_level=False, multiple_of=3)
    assert len(batch) % 3 == 0 and len(batch) >= turns
    assert batch.response_mask[turns:].sum() == 0  # padding rows carry no loss
    first = groups[0].trajectories[0]
    start, end = first.turn_spans[1]
    row = batch.input_ids[1, :end]  # turn 1 of episode 0: prompt = everything before it
    assert row.tolist() == first.input_ids[:end]
    assert batch.response_mask[1].nonzero().flatten().tolist() == list(range(start, end))
    agentic_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    assert torch.isfinite(batch.advantages).all()


def test_env_metrics_per_tag_and_checkpoint_round_trip():
    cfg = agentic_cfg()
    groups = played_groups(cfg, ["Right", "Right", "Down", "Down"])
    metrics = env_metrics(groups, "val/env/")
    for key in ("success", "episode_reward", "episode_length", "action_is_valid"):
        assert f"val/env/{key}" in metrics and f"val/env/FrozenLake/{key}" in metrics
    restored = episode_group_from_dict(episode_group_to_dict(groups[0]))
    assert restored == groups[0]
    assert restored.token_versions(0)[first_turn_start(restored)] == 0


def first_turn_start(group: EpisodeGroup) -> int:
    return group.trajectories[0].turn_spans[0][0]


def test_jobs_follow_the_partition_and_seeds_are_fixed():
    cfg = agentic_cfg(rollout_batch_size=12,
                      train_env_manager={"num_env_groups": 3, "group_size": 2,
                                         "max_env_num_per_worker": 2,
                                         "tags": ["FrozenLake", "GuessNumber"],
                                         "num_groups_partition": [2, 1]},
                      custom_envs={"FrozenLake": {}, "GuessNumber": {"env_type": "guess_number"}})
    assert group_tags(cfg.train_env_manager, 6) == ["FrozenLake", "FrozenLake", "GuessNumber"] * 2
    jobs = train_jobs(cfg, batch_index=1, infer_workers=2)
    assert [j.tag for j in jobs] == ["FrozenLake", "FrozenLake", "GuessNumber"] * 2
    assert [j.first_seq for j in jobs] == list(range(6, 12))  # batch 1 of 6 groups each
    assert {j.infer_rank for j in jobs} == {0, 1}
    assert [j.seed for j in jobs] == [j.seed for j in train_jobs(cfg, 1, 2)]  # replayable
    assert len({j.seed for j in jobs + train_jobs(cfg, 2, 2)}) == 12  # distinct batches
    greedy = ValidationGeneratingArgs()
    val = val_jobs(cfg, greedy, 1)
    other_run = val_jobs(agentic_cfg(seed=7), greedy, 1)
    assert [j.seed for j in val] == [j.seed for j in other_run]  # fixed held-out maps
    assert not {j.seed for j in val} & {j.seed for j in jobs}
    assert all(not j.sampling.do_sample for j in val)


class HangingEnv:
    def __init__(self):
        self.calls = 0

    def reset(self, seed=None, options=None):
        return "start", {}

    def step(self, action_text):
        time.sleep(30)

    def close(self):
        pass


def test_timed_env_reports_a_hung_step_and_replaces_the_env():
    built = []

    def make_env():
        built.append(HangingEnv())
        return built[-1]

    env = TimedEnv(make_env, timeout_s=0.2)
    assert env.reset(seed=1) == ("start", {})
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="step gave no answer within 0.2s"):
        env.step("<answer>Up</answer>")
    assert time.monotonic() - start < 2
    assert len(built) == 2 and env.env is built[1]  # the hung one was abandoned


def test_trajectory_defaults_keep_failed_episodes_out():
    t = Trajectory(env_id=0, group_id=0, seed=1, env_type="frozen_lake", tag="FrozenLake",
                   error="env 0 raised")
    assert t.failed


def test_gigpo_anchors_and_advantages_on_played_episodes():
    cfg = agentic_cfg(step_level_samples=True, adv_estimator="gigpo", gamma=0.5,
                      norm_mean_type="group", norm_std_type="none", step_reward_weight=0.5)
    groups = played_groups(cfg, ["Right", "Right", "Down", "Down"])
    group = groups[0]
    a, b = group.trajectories
    # same seed, same replies: both episodes saw the same observations turn by turn;
    # give them different rewards and let B stop a turn early
    a.rewards, b.rewards = [0.0, 1.0], [0.0]
    a.turn_spans, b.turn_spans = a.turn_spans[:2], b.turn_spans[:1]
    batch = pack_steps([group], pad_id=0, gamma=0.5, turn_level=True, multiple_of=4,
                       episode_gamma=1.0)
    assert batch.anchor.tolist() == [0, 1, 0, -1]  # turn 0s share the start; one pad row
    # an anchor never spans two groups, even where they saw the same observation
    both = pack_steps([group, group], pad_id=0, gamma=0.5, turn_level=True, multiple_of=1)
    assert both.anchor.tolist() == [0, 1, 0, 2, 3, 2]
    agentic_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    # episode part (mean only): scores 1, 0 -> +.5, -.5. G: A (.5, 1), B (0).
    # anchor 0: (.5, 0) -> +.25, -.25; anchor 1: A alone -> 0. A = ep + .5 * step
    first = [batch.advantages[r][batch.response_mask[r] == 1][0].item() for r in range(3)]
    assert first == pytest.approx([0.5 + 0.125, 0.5, -0.5 - 0.125], abs=1e-5)
    assert batch.advantages[3].abs().sum() == 0
    clipped = pack_steps([group], pad_id=0, gamma=0.5, turn_level=True, multiple_of=4,
                         episode_gamma=1.0)
    agentic_advantages(clipped, agentic_cfg(step_level_samples=True, adv_estimator="gigpo",
                                            norm_mean_type="group", norm_std_type="none",
                                            step_reward_weight=0.5, reward_clip=0.55),
                       group_size=2, kl_coef=0.0)
    first = [clipped.advantages[r][clipped.response_mask[r] == 1][0].item() for r in range(3)]
    assert first == pytest.approx([0.55, 0.5, -0.55], abs=1e-5)  # reward_clip acts here too


def test_fit_rows_drops_padding_then_fills_whole_optimizer_steps():
    cfg = agentic_cfg(step_level_samples=True, adv_estimator="step_reinforce")
    groups = played_groups(cfg, ["Right", "Right", "Down", "Down"])
    turns = sum(len(t.turn_spans) for g in groups for t in g.trajectories)
    batch = pack_steps(groups, pad_id=0, gamma=1.0, turn_level=True, multiple_of=5)
    agentic_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    metrics = fit_rows(batch, "copy", 3, seed=0)
    assert len(batch) == turns + (-turns % 3) and (batch.episode >= 0).all()
    assert metrics["rollout/batch_rows_added"] == -turns % 3
    assert len(batch.advantages) == len(batch.scores) == len(batch)


@pytest.mark.parametrize("groups, group_size, cap, per_job, workers", [
    (1, 1, 16, 1, 1),   # ROLL's FrozenLake node demos: a cap above the pool is one worker
    (5, 2, 8, 4, 2),    # 4 whole groups fit under 8 envs: 4 + 1 groups
    (3, 4, 6, 1, 3),    # 6 is not a multiple of 4: one group (4 envs) per worker
    (4, 2, 0, 4, 1),    # 0: every env in one worker
])
def test_max_env_num_per_worker_is_a_cap(groups, group_size, cap, per_job, workers):
    from flywheel.pipelines.agentic.env_jobs import groups_per_job, num_env_workers
    cfg = agentic_cfg(rollout_batch_size=groups * group_size, val_batch_size=1,
                      train_env_manager={"num_env_groups": groups, "group_size": group_size,
                                         "max_env_num_per_worker": cap},
                      val_env_manager={"num_env_groups": 1, "group_size": 1},
                      actor_train={"training_args": {"per_device_train_batch_size": 1}})
    assert groups_per_job(cfg.train_env_manager) == per_job
    assert num_env_workers(cfg) == workers
    jobs = train_jobs(cfg, batch_index=0, infer_workers=1)
    assert sum(j.num_groups for j in jobs) == groups
    assert max(j.num_groups * group_size for j in jobs) <= (cap or groups * group_size)
