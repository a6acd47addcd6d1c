"""Sequence packing (training_args.sequence_packing, workers/strategies/sequence_packing.py).

Packing must change no number: each row's log-probs (and values) are those of the padded
forward within fp32 rounding, and one optimizer step over the same rows gives the same
gradient. Checked on hf_train with the tiny model, on rows of uneven lengths packed several
to a row, so a mask that let tokens see the sequence before them would show.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from backend_cases import actor_loss, assert_same_step, stepped_grads, training_args, uneven

from flywheel.config.schema import WorkerConfig
from flywheel.workers.strategies.hf_model import sequence_logprobs
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import VALUE
from flywheel.workers.strategies.sequence_packing import (
    PackingPlan,
    check_model_packs,
    pack_rows,
)

WIDTH = 64  # several of the tiny batch's rows (10-20 tokens) to a packed row


def test_rows_go_first_fit_by_decreasing_length_and_come_back():
    lengths = [3, 5, 2, 4]
    ids = torch.zeros(4, 5, dtype=torch.long)
    mask = torch.zeros(4, 5, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.arange(n) + 10 * (row + 1)
        mask[row, :n] = 1
    packing = pack_rows(ids, mask, width=0)  # width of the longest row: 5
    # 5 | 4 | 3 + 2
    assert packing.input_ids.tolist() == [[20, 21, 22, 23, 24], [40, 41, 42, 43, 0],
                                          [10, 11, 12, 30, 31]]
    assert packing.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4],
                                             [0, 1, 2, 0, 1]]
    back = packing.unpacked(packing.input_ids.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(back, ids)  # every real token back in its place, padding 0
    assert pack_rows(ids, mask, width=9).input_ids.shape == (2, 9)  # 5 + 4 | 3 + 2


@pytest.fixture(scope="module")
def model(tiny_model_path):
    return HFTrainStrategy(tiny_model_path, WorkerConfig(), seed=0, total_steps=1).model


def test_packed_logprobs_equal_the_padded_ones(model, rl_batch):
    batch = uneven(rl_batch)
    assert len(pack_rows(batch.input_ids, batch.attention_mask, WIDTH).input_ids) < len(batch) / 2
    with torch.no_grad():
        padded, ent = sequence_logprobs(model, batch, with_entropy=True)
        packed, packed_ent = sequence_logprobs(model, batch, with_entropy=True,
                                               packing=PackingPlan(WIDTH))
        head, _ = sequence_logprobs(model, batch, positions=batch.response_mask,
                                    packing=PackingPlan(WIDTH))
    real = batch.attention_mask.bool()
    real[:, 0] = False  # column 0 has no log-prob
    assert torch.allclose(packed[real], padded[real], atol=1e-5)
    assert torch.allclose(packed_ent[real], ent[real], atol=1e-5)
    on = batch.response_mask.bool()
    assert torch.allclose(head[on], padded[on], atol=1e-5)
    assert float(head[~on].abs().max()) == 0.0


def test_packed_values_equal_the_padded_ones(tiny_model_path, rl_batch):
    critic = HFTrainStrategy(tiny_model_path, WorkerConfig(), seed=0, total_steps=1,
                             head=VALUE).model
    batch = uneven(rl_batch)
    with torch.no_grad():
        padded = VALUE.hf_outputs(critic, batch, False)[0]
        packed = VALUE.hf_outputs(critic, batch, False, packing=PackingPlan(WIDTH))[0]
    real = batch.attention_mask.bool()
    assert torch.allclose(packed[real], padded[real], atol=1e-5)


def trainer(model_path: str, packing: bool) -> HFTrainStrategy:
    args = training_args(per_device=8, accum=2)  # the 16-row batch: one mini-batch
    args.sequence_packing, args.max_packed_sequence_length = packing, WIDTH
    return HFTrainStrategy(model_path, WorkerConfig(training_args=args), seed=0,
                           total_steps=10)


def test_a_packed_train_step_takes_the_padded_step(tiny_model_path, rl_batch):
    batch = uneven(rl_batch).select(slice(8, 24))  # 8 rows cut short, 8 whole
    padded, packed = trainer(tiny_model_path, False), trainer(tiny_model_path, True)
    padded_grads, packed_grads = stepped_grads(padded), stepped_grads(packed)
    rows_seen = []  # rows of each forward of the packed trainer's transformer
    packed.model.model.register_forward_pre_hook(
        lambda _, args, kwargs: rows_seen.append(len(kwargs["input_ids"])), with_kwargs=True)
    loss = actor_loss(entropy_coef=0.01)
    a = padded.train_step(dataclasses.replace(batch), loss)
    b = packed.train_step(dataclasses.replace(batch), loss)
    assert rows_seen and max(rows_seen) < 8  # micro-batches of 8 rows went in packed
    assert_same_step(a, b, padded_grads[0], packed_grads[0])


class IgnoresPositions(torch.nn.Module):
    """A model whose attention sees a packed row as one sequence (position ids dropped)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)


def test_a_model_that_attends_across_sequences_is_refused(model):
    check_model_packs(model, PackingPlan())
    with pytest.raises(ValueError, match="attends across packed sequences"):
        check_model_packs(IgnoresPositions(model), PackingPlan())


@pytest.mark.parametrize("training, model, phrase", [
    ({"sequence_packing": True, "max_packed_sequence_length": -1}, {}, "must be >= 0"),
    ({"sequence_packing": True}, {"moe_aux_loss_coef": 0.01}, "reads the padded layout"),
])
def test_packing_values_that_cannot_act_are_refused(training, model, phrase):
    from flywheel.pipelines.config import load_config_dict
    from flywheel.platform.config.errors import ConfigError

    with pytest.raises(ConfigError, match=phrase):
        load_config_dict({"actor_train": {"training_args": training, "model_args": model}},
                         source="f.yaml")


@pytest.mark.long  # two DeepSpeed ranks (make test-long)
@pytest.mark.parametrize("stage", [1, 3])
@pytest.mark.parametrize("share", [False, True], ids=["packed", "shared_prefix"])
def test_packed_zero_ranks_take_the_padded_step(train_cluster, tiny_model_path, rl_batch, stage,
                                                share):
    """deepspeed_train packs too (and shares prompts: shared_prefix_packing), ZeRO-3 through
    the model's own forward (not chunked): two ranks' packed step is hf_train's padded
    step."""
    pytest.importorskip("deepspeed")
    batch = uneven(rl_batch).select(slice(8, 24))
    loss = actor_loss()
    ref = trainer(tiny_model_path, False).train_step(dataclasses.replace(batch), loss)
    cluster = train_cluster("deepspeed_train", tiny_model_path, 2, {"zero_stage": stage},
                            per_device=4, accum=2,
                            packing=PackingPlan(0 if share else WIDTH, share))
    got = cluster.scatter("train_step", batch.shard(2), loss_fn=loss, ppo_epochs=1)
    assert got[0]["actor/grad_norm"] == pytest.approx(ref["actor/grad_norm"], rel=1e-5)
