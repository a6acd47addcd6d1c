"""max_len_mask and difficulty_mask on a packed RLVR batch (pipelines/rlvr/sample_masks.py),
through advantages and the actor's loss: a masked sample keeps its place in its group's
GRPO baseline but gets no loss and no gradient, and the kept samples' loss is the one they
would have alone. Fast: tensors only, no Ray, no model."""

from __future__ import annotations

import pytest
import torch

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.prompt_data import PromptRecord
from flywheel.pipelines.loop.actor_loss_config import build_actor_loss
from flywheel.pipelines.rlvr.generation import Group
from flywheel.pipelines.rlvr.sample_masks import apply_sample_masks
from flywheel.pipelines.rlvr.train_batch import add_advantages, pack_groups
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.base import Generation
from flywheel.workers.strategies.train_loop import local_counts

G = 2  # samples per prompt


def response(tokens: list[int], finish: str = "stop") -> Generation:
    return Generation(0, tokens, [-0.5] * len(tokens), finish)


def groups() -> list[Group]:
    """Group 0: scores 1, 1 (mean 1: all solved). Group 1: 0 and 1, its first response cut
    by the length limit. Group 2: 1 and 0, both finished."""
    record = PromptRecord("p", "1+1=", "2", "")
    return [
        Group(0, record, [5, 6], [response([7, 8]), response([9, 8, 2])], 0, [1.0, 1.0]),
        Group(1, record, [5, 6], [response([7, 7, 7], "length"), response([8, 2])], 0,
              [0.0, 1.0]),
        Group(2, record, [5], [response([9, 2]), response([7, 7, 2])], 0, [1.0, 0.0]),
    ]


def config(**masks) -> PipelineConfig:
    return PipelineConfig(num_return_sequences_in_group=G, **masks)


def packed(cfg: PipelineConfig) -> tuple[TokenBatch, dict[str, float]]:
    """Step 3 of an RLVR step on `groups()`, as RLVRRollout.add_advantages runs it."""
    batch = pack_groups(groups(), pad_id=0)
    metrics = apply_sample_masks(batch, cfg, G)
    add_advantages(batch, cfg, G, kl_coef=0.0)
    return batch, metrics


def rows_with_loss(batch: TokenBatch) -> list[bool]:
    return batch.response_mask.sum(-1).gt(0).tolist()


def test_max_len_mask_zeroes_the_truncated_response():
    batch, metrics = packed(config(max_len_mask=True))
    assert batch.truncated.tolist() == [False, False, True, False, False, False]
    assert rows_with_loss(batch) == [True, True, False, True, True, True]
    assert metrics["rollout/masked_truncated"] == 1.0
    assert metrics["rollout/loss_samples_frac"] == pytest.approx(5 / 6)
    # the baseline still counts it: group 1's other sample keeps its GRPO advantage
    plain, _ = packed(config())
    torch.testing.assert_close(batch.advantages[3], plain.advantages[3])
    assert batch.advantages[2].abs().sum() == 0


def test_difficulty_mask_zeroes_groups_outside_the_bounds_in_place():
    batch, metrics = packed(config(difficulty_mask=True, difficulty_low_threshold=0.1,
                                   difficulty_high_threshold=0.95))
    assert len(batch) == 6  # nothing dropped, nothing refilled
    assert rows_with_loss(batch) == [False, False, True, True, True, True]
    assert metrics["rollout/masked_difficulty"] == 2.0
    plain, _ = packed(config())
    kept = torch.tensor([False, False, True, True, True, True])
    torch.testing.assert_close(batch.response_mask[kept], plain.response_mask[kept])
    torch.testing.assert_close(batch.advantages[kept], plain.advantages[kept])


def test_both_masks_together():
    _, metrics = packed(config(max_len_mask=True, difficulty_mask=True,
                               difficulty_high_threshold=0.95))
    assert metrics["rollout/loss_samples_frac"] == pytest.approx(3 / 6)


@pytest.mark.parametrize("pg_variant", ["ppo", "gspo"])
def test_masked_samples_get_no_loss_and_no_gradient(pg_variant):
    """The actor's loss over the masked batch equals its loss over the kept rows alone
    (ROLL's final_response_mask: masked tokens leave the denominators too)."""
    cfg = config(max_len_mask=True, difficulty_mask=True, difficulty_high_threshold=0.95)
    cfg.actor_train.pg_variant = pg_variant
    batch, _ = packed(cfg)
    off = torch.linspace(-0.3, 0.3, batch.response_mask.numel()).reshape_as(
        batch.response_mask)
    batch.old_log_probs = (-0.5 + off) * batch.response_mask
    loss_fn = build_actor_loss(cfg)
    log_probs = torch.full_like(batch.response_mask, -0.5, requires_grad=True)
    loss, _ = loss_fn(log_probs, None, batch, local_counts(batch))
    loss.backward()
    masked = torch.tensor(rows_with_loss(batch)).logical_not()
    assert masked.tolist() == [True, True, True, False, False, False]
    assert log_probs.grad[masked].abs().sum() == 0 and log_probs.grad[~masked].abs().sum() > 0

    kept = batch.select(~masked)
    alone = log_probs.detach()[~masked].requires_grad_(True)
    loss_alone, _ = loss_fn(alone, None, kept, local_counts(kept))
    assert loss.item() == pytest.approx(loss_alone.item())


def test_no_mask_keys_leave_the_batch_alone():
    batch = pack_groups(groups(), pad_id=0)
    before = batch.response_mask.clone()
    assert apply_sample_masks(batch, config(), G) == {}
    assert torch.equal(batch.response_mask, before)
