"""The dynamic sampling filter and the replay buffer's handling of dropped groups, worked
out by hand on small groups."""

from __future__ import annotations

import pytest

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.prompt_data import PromptRecord
from flywheel.pipelines.loop.group_filter import GroupFilter, group_filter
from flywheel.pipelines.loop.replay_buffer import ReplayBuffer
from flywheel.pipelines.rlvr.generation import Group
from flywheel.pipelines.rlvr.metrics import reward_info_metrics
from flywheel.workers.strategies.base import Generation


def group(seq: int, scores: list[float], version: int = 0, infos=None) -> Group:
    responses = [Generation(0, [1], [0.0], "stop") for _ in scores]
    record = PromptRecord(id=f"p{seq}", prompt="q", answer="a", tag="math")
    return Group(seq, record, [1], responses, version, scores=scores,
                 reward_info=infos or [{} for _ in scores])


@pytest.mark.parametrize("filt, scores, kept", [
    (GroupFilter(), [1, 1, 1], True),                         # no filter: all kept
    (GroupFilter(drop_uniform=True), [1, 1, 1], False),       # DAPO: all right
    (GroupFilter(drop_uniform=True), [0, 0], False),          # all wrong
    (GroupFilter(drop_uniform=True), [0, 1], True),
    (GroupFilter(mean_range=(0.2, 0.8)), [0, 0, 0, 1], True),   # mean 0.25
    (GroupFilter(mean_range=(0.3, 0.8)), [0, 0, 0, 1], False),
    (GroupFilter(min_std=0.4), [0, 0, 0, 1], True),           # std = sqrt(3)/4 = 0.433
    (GroupFilter(min_std=0.45), [0, 0, 0, 1], False),
])
def test_filter_keeps(filt, scores, kept):
    assert filt.keeps(scores) is kept


def test_bad_band_is_refused():
    with pytest.raises(ValueError, match="group_filter_mean_range lo <= hi"):
        GroupFilter(mean_range=(0.9, 0.1))


def test_filter_from_config():
    cfg = PipelineConfig(drop_uniform_groups=True, group_filter_mean_range=[0.1, 0.9],
                         max_num_gen_batches=3)
    assert group_filter(cfg) == GroupFilter(True, (0.1, 0.9), 0.0, 3)


def test_filtered_groups_free_their_place_at_put_and_are_reported_by_the_next_take():
    buffer = ReplayBuffer(max_staleness=0, drop_uniform_groups=True)
    assert buffer.take(2, step=0) is None  # the trainer asks first: batches of 2
    dropped = buffer.put([group(0, [1, 1]), group(1, [0, 1])])
    assert [g.seq for g in dropped] == [0] and len(buffer) == 1
    assert buffer.take(2, step=0) is None
    buffer.put([group(2, [1, 0])])
    taken = buffer.take(2, step=0)
    assert [g.seq for g in taken.groups] == [1, 2] and [g.seq for g in taken.filtered] == [0]
    buffer.put([group(3, [0, 0])])
    assert [g.seq for g in buffer.snapshot()] == [3]  # dropped, not yet reported: kept


def test_stale_groups_leave_at_the_first_take_attempt():
    buffer = ReplayBuffer(max_staleness=0)
    buffer.put([group(0, [0, 1], version=0), group(1, [0, 1], version=1)])
    assert [g.seq for g in buffer.drop_stale(step=1)] == [0]
    assert buffer.take(2, step=1) is None and len(buffer) == 1
    buffer.put([group(2, [0, 1], version=1)])
    taken = buffer.take(2, step=1)
    assert [g.seq for g in taken.groups] == [1, 2] and [g.seq for g in taken.stale] == [0]


def test_cap_keeps_groups_past_max_gen_batches():
    # batches of 2, cap 2 batches: at most (2 - 1) * 2 = 2 groups filtered per batch
    buffer = ReplayBuffer(0, group_filter=GroupFilter(drop_uniform=True, max_gen_batches=2))
    assert buffer.take(2, step=0) is None
    dropped = buffer.put([group(s, [0, 0]) for s in range(4)])
    assert [g.seq for g in dropped] == [0, 1]
    taken = buffer.take(2, step=0)
    assert [g.seq for g in taken.groups] == [2, 3] and taken.filter_cap_kept == 4
    assert len(buffer.put([group(4, [0, 0])])) == 1  # the count starts again per batch


def test_reward_info_metrics_count_timeouts_crashes_and_parse_rate():
    infos = [{"timed_out": True}, {"parsed": True}, {"parsed": False}, {"crashed": True}]
    buffer = ReplayBuffer(0)
    buffer.put([group(0, [0, 1], infos=infos[:2]), group(1, [0, 0], infos=infos[2:])])
    metrics = reward_info_metrics(buffer.take(2, step=0))
    assert metrics == {"reward/timed_out": 1.0, "reward/crashed": 1.0, "reward/parse_rate": 0.5}


@pytest.mark.parametrize("batch_groups", [0, 2])  # 0: the size is not known yet
def test_groups_put_before_the_first_take_are_filtered(batch_groups):
    # a fresh run: the first groups arrive before the trainer first asks
    buffer = ReplayBuffer(0, group_filter=GroupFilter(drop_uniform=True, max_gen_batches=2),
                          batch_groups=batch_groups)
    dropped = buffer.put([group(0, [1, 1]), group(1, [0, 1])])
    assert [g.seq for g in dropped] == [0] and len(buffer) == 1
    buffer.put([group(2, [0, 1])])
    taken = buffer.take(2, step=0)
    assert [g.seq for g in taken.groups] == [1, 2] and taken.filter_cap_kept == 0
    assert [g.seq for g in taken.filtered] == [0]


def test_groups_restored_on_resume_are_filtered_again():
    # a resumed run puts its snapshot back before its first take (step_loop.load_checkpoint)
    filt = GroupFilter(drop_uniform=True, max_gen_batches=2)
    before = ReplayBuffer(0, group_filter=filt, batch_groups=2)
    before.put([group(0, [0, 0]), group(1, [0, 1])])
    after = ReplayBuffer(0, group_filter=filt, batch_groups=2)
    dropped = after.put(before.snapshot())
    assert [g.seq for g in dropped] == [0] and len(after) == 1
    after.put([group(2, [1, 0])])
    taken = after.take(2, step=0)
    assert [g.seq for g in taken.groups] == [1, 2] and taken.filter_cap_kept == 0
