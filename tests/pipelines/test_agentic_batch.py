"""Agentic batches without Ray: trajectories → rows whose loss mask covers model tokens only,
GRPO / per-turn advantages worked out by hand, job planning and seeding, hung envs."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch

from flywheel.config.schema import ValidationGeneratingArgs
from flywheel.envs import EnvManager, Trajectory
from flywheel.pipelines.agentic import env_jobs
from flywheel.pipelines.agentic.batch import (
    agentic_advantages,
    env_metrics,
    fit_rows,
    pack_steps,
    pack_trajectories,
)
from flywheel.pipelines.agentic.env_jobs import (
    EnvFailureLimit,
    EnvSource,
    EpisodeGroup,
    env_manager_config,
    episode_group_from_dict,
    episode_group_to_dict,
    episode_groups,
    group_tags,
    train_jobs,
    val_jobs,
)
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.loop.async_window import AsyncWindow
from flywheel.pipelines.loop.prefetch import PrefetchGenerator, PrefetchSettings
from flywheel.pipelines.loop.replay_buffer import ReplayBuffer
from flywheel.workers.env_worker import EnvJobResult


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


def per_episode(replies: list[list[str]]):
    """A generate_fn replying to the i-th running episode with replies[i][turn]."""
    turn = iter(range(100))

    def generate(prompts, max_tokens):
        t = next(turn)
        out = [[ord(c) for c in f"<answer>{replies[i][t]}</answer>"]
               for i in range(len(prompts))]
        return [(ids, [-0.5] * len(ids)) for ids in out]
    return generate


@pytest.mark.parametrize("lake_config", [{"env_instruction": ""}, {}])
def test_gigpo_anchors_one_state_reached_at_two_turns(lake_config):
    """Under the default turn template ("Turn {turn_idx} ({actions_left} actions left)"),
    the start reached again at turn 2 (Right, Left) shares turn 0's anchor group, as does
    the other episode's turn 0; an invalid action keeps the state (and the group), though
    its observation text differs. With the env's instruction in the first observation
    (the default), the env's state_key still names the state alone."""
    cfg = agentic_cfg(step_level_samples=True, adv_estimator="gigpo")
    lake = cfg.custom_envs["FrozenLake"]
    lake.agent_template = None  # the env manager's default turn template
    lake.env_config = {"size": 3, **lake_config}
    spec = env_manager_config("FrozenLake", lake, cfg.train_env_manager, num_groups=1)
    assert "{turn_idx}" in spec.turn_template and "{actions_left}" in spec.turn_template
    # map P__ / _O_ / __G: Right then Left is back at the start; B falls in the hole (O)
    # at its turn 2, so A plays turn 3 alone
    episodes = EnvManager(spec).rollout(per_episode([["Right", "Left", "Down", "Up"],
                                                     ["Nonsense", "Down", "Right"]]),
                                        CharCodec(), seed=3)
    group = EpisodeGroup(0, "FrozenLake", episodes, version=0, turn_versions=[0] * 4,
                         scores=[t.score for t in episodes])
    batch = pack_steps([group], pad_id=0, gamma=1.0, turn_level=True, multiple_of=1)
    # rows: A's turns 0-3 (start, right of it, start, below it), B's 0-2 (start, start
    # after the invalid action, below it)
    assert batch.anchor.tolist() == [0, 1, 0, 2, 0, 0, 2]
    # the prompts A and B saw at the start differ (turn number, actions left, the note)
    starts = [CharCodec().decode(t.input_ids[end:start]) for t, end, start in (
        (episodes[0], episodes[0].turn_spans[1][1], episodes[0].turn_spans[2][0]),
        (episodes[1], episodes[1].turn_spans[0][1], episodes[1].turn_spans[1][0]))]
    assert starts[0].startswith("Turn 2 (2 actions left)") and "Invalid" in starts[1]


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


class AlwaysRaises:
    """An env whose step always raises (the probe's case)."""

    def reset(self, seed=None, options=None):
        return "start", {}

    def step(self, action_text):
        raise RuntimeError("step is broken")

    def close(self):
        pass


def test_groups_failing_in_a_row_stop_the_run_naming_the_env_and_a_good_group_resets():
    cfg = agentic_cfg(train_env_manager={"num_env_groups": 2, "group_size": 2,
                                         "max_consecutive_env_failures": 5})
    source = EnvSource(pool=None, cfg=cfg, infer_workers=1)
    [job] = train_jobs(cfg, batch_index=0, infer_workers=1)  # 2 groups of 2
    broken = EnvManager(job.manager, make_env=AlwaysRaises)

    def result(manager):
        return EnvJobResult(manager.rollout(scripted(["Up"] * 4), CharCodec(), job.seed),
                            [0] * 4, [])

    for _ in range(2):  # 4 groups dropped in a row
        done = source.complete(job, 0, result(broken))
        assert len(done.dropped["env_error"]) == 2
    good = EnvManager(job.manager)
    assert not source.complete(job, 0, result(good)).dropped  # a complete group: count 0
    start = time.monotonic()
    source.complete(job, 0, result(broken))
    source.complete(job, 0, result(broken))
    with pytest.raises(EnvFailureLimit) as info:
        source.complete(job, 0, result(broken))
    assert time.monotonic() - start < 5
    said = str(info.value)
    assert said.startswith("train_env_manager: 6 env groups in a row failed with env errors")
    assert "max_consecutive_env_failures=5" in said and "\n" not in said
    assert "tag FrozenLake: env 2 (frozen_lake" in said
    assert "RuntimeError: step is broken" in said


def test_a_cut_observation_and_a_truncated_episode_are_said_once_per_tag(caplog, monkeypatch):
    monkeypatch.setattr(env_jobs, "_SAID", set())  # said once per process: start afresh
    cfg = agentic_cfg(sequence_length=150, custom_envs={"Lake": {
        "env_type": "frozen_lake", "max_steps": 4, "max_tokens_per_step": 32,
        "agent_system_template": "", "agent_template": "{observation}\n",
        "max_observation_chars": 10, "env_config": {"size": 3, "env_instruction": ""}}},
        train_env_manager={"num_env_groups": 2, "group_size": 2, "tags": ["Lake"]},
        val_env_manager={"num_env_groups": 2, "group_size": 1, "tags": ["Lake"]})
    [job] = train_jobs(cfg, batch_index=0, infer_workers=1)
    assert job.manager.max_context_tokens == 150 and job.manager.max_observation_chars == 10
    manager = EnvManager(job.manager)
    with caplog.at_level(logging.WARNING, logger="flywheel.pipelines.agentic.env_jobs"):
        for _ in range(2):
            played = manager.rollout(scripted(["Left"] * 8), CharCodec(), job.seed)
            kept, _ = episode_groups(job, EnvJobResult(played, [0] * 4, []))
    said = [r.getMessage() for r in caplog.records if "custom_envs." in r.getMessage()]
    assert len(said) == 2, said
    assert said[0].startswith("custom_envs.Lake (env frozen_lake): an observation longer "
                              "than max_observation_chars=10")
    assert "truncated: its next turn would not fit the run's sequence_length 150" in said[1]
    metrics = env_metrics(kept, "env/")
    assert metrics["env/observation_cut"] >= 1 and metrics["env/context_truncated"] == 1.0


def test_take_gives_up_once_a_stop_is_asked_while_no_batch_can_complete():
    """SIGTERM while every env fails: no step completes, so the stop must land in take."""
    generator = PrefetchGenerator(None, None, ReplayBuffer(0),
                                  PrefetchSettings(AsyncWindow(0.0, 2)))
    asked = threading.Event()
    threading.Timer(0.3, asked.set).start()
    start = time.monotonic()
    assert generator.take(0, asked.is_set) is None
    assert time.monotonic() - start < 5


def test_gae_puts_each_turn_reward_on_that_turns_last_model_token():
    """gamma 0.5, lambda 1, values 0: a turn's reward is discounted by the tokens after it
    in the trajectory's model tokens, not deferred (summed) to the episode's last token."""
    cfg = agentic_cfg(adv_estimator="gae", gamma=0.5, lambd=1.0, critic={"training_args": {
                      "per_device_train_batch_size": 4}},
                      whiten_advantages=False)
    # prompt 2 | turn 1: 3 model tokens | env 2 | turn 2 (empty) | env 1 | turn 3: 2 tokens
    mask = [0, 0, 1, 1, 1, 0, 0, 0, 1, 1]
    episode = Trajectory(env_id=0, group_id=0, seed=0, env_type="frozen_lake", tag="F",
                         input_ids=list(range(10)), response_mask=mask,
                         behaviour_logprobs=[0.0] * 10, prompt_length=2,
                         turn_spans=[(2, 5), (7, 7), (8, 10)], rewards=[-0.1, 0.2, 1.0])
    other = Trajectory(**{**episode.__dict__, "env_id": 1, "rewards": [0.0, 0.0, 0.0]})
    batch = pack_trajectories([EpisodeGroup(0, "F", [episode, other], 0, [0, 0, 0])], 0, 0.5)
    batch.values = torch.zeros(batch.response_mask.shape)
    agentic_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    # model tokens in order: columns 2, 3, 4 | 8, 9; rewards -0.1 + 0.2 (the empty turn's,
    # on the closest model token before it) at column 4, 1.0 at column 9
    expected = {9: 1.0, 8: 0.5, 4: 0.1 + 0.25, 3: 0.05 + 0.125, 2: 0.025 + 0.0625}
    for column, value in expected.items():
        assert batch.advantages[0, column].item() == pytest.approx(value)
    assert batch.advantages[0, [0, 1, 5, 6, 7]].abs().sum() == 0
