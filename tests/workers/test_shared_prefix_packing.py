"""Shared-prefix packing (training_args.shared_prefix_packing, workers/strategies/
sequence_packing.py): rows that start with the same prompt carry it once.

It must change no number: each row's log-probs (and values) are those of the padded forward
within fp32 rounding, and one optimizer step takes the padded step's gradient (the
prompt's hidden states feed every row of its group, and backward sums into them). Checked
on hf_train with the tiny model on rows 2 to a prompt with uneven responses, under sdpa and
eager attention, so a mask that let one response see another would show.
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

SHARED = PackingPlan(0, share_prefix=True)  # each prompt's group in a pack of its own


def test_rows_with_one_prompt_carry_it_once_and_come_back():
    # rows 0 and 2 share the prompt [5, 6]; row 1's prompt [5, 7] differs
    ids = torch.tensor([[5, 6, 11, 12, 13], [5, 7, 21, 0, 0], [5, 6, 31, 32, 0]])
    mask = (ids > 0).long()
    response = torch.zeros_like(ids)
    response[:, 2:] = 1
    packing = SHARED.pack(ids, mask, response * mask)
    # the group: prompt once, then each row's response; positions go on from the prompt
    assert packing.input_ids.tolist() == [[5, 6, 11, 12, 13, 31, 32], [5, 7, 21, 0, 0, 0, 0]]
    assert packing.position_ids.tolist() == [[0, 1, 2, 3, 4, 2, 3], [0, 1, 2, 3, 4, 5, 6]]
    assert packing.source[2].tolist() == [0, 1, 5, 6, -1]  # row 2 reads the shared prompt
    back = packing.unpacked(packing.input_ids.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(back, ids)
    seen = packing.attention_mask("sdpa", torch.device("cpu"))[0, 0]
    assert seen[5].tolist() == [True, True, False, False, False, True, False]  # 31: prompt, self
    assert seen[3].tolist() == [True, True, True, True, False, False, False]
    # a width that cannot hold the group splits it, each part with the prompt again
    assert pack_rows(ids, mask, 5, prefix_ends=[2, 2, 2]).input_ids.tolist() == [
        [5, 6, 11, 12, 13], [5, 6, 31, 32, 0], [5, 7, 21, 0, 0]]


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(tiny_model_path, request):
    model = HFTrainStrategy(tiny_model_path, WorkerConfig(), seed=0, total_steps=1).model
    model.config._attn_implementation = request.param
    return model


def test_shared_prefix_logprobs_equal_the_padded_ones(model, rl_batch):
    batch = uneven(rl_batch)
    packs = SHARED.pack(batch.input_ids, batch.attention_mask, batch.response_mask)
    assert packs.input_ids.ne(0).sum() < 0.75 * batch.attention_mask.sum()  # prompts shared
    with torch.no_grad():
        padded, ent = sequence_logprobs(model, batch, with_entropy=True)
        shared, shared_ent = sequence_logprobs(model, batch, with_entropy=True,
                                               positions=batch.response_mask,
                                               packing=SHARED)
    on = batch.response_mask.bool()
    assert torch.allclose(shared[on], padded[on], atol=1e-5)
    assert torch.allclose(shared_ent[on], ent[on], atol=1e-5)


def test_shared_prefix_values_equal_the_padded_ones(tiny_model_path, rl_batch):
    critic = HFTrainStrategy(tiny_model_path, WorkerConfig(), seed=0, total_steps=1,
                             head=VALUE).model
    batch = uneven(rl_batch)
    with torch.no_grad():
        padded = VALUE.hf_outputs(critic, batch, False)[0]
        shared = VALUE.hf_outputs(critic, batch, False, packing=SHARED)[0]
    real = batch.attention_mask.bool()
    assert torch.allclose(shared[real], padded[real], atol=1e-5)


def trainer(model_path: str, share: bool) -> HFTrainStrategy:
    args = training_args(per_device=8, accum=2)  # the 16-row batch: one mini-batch
    args.sequence_packing = args.shared_prefix_packing = share
    return HFTrainStrategy(model_path, WorkerConfig(training_args=args), seed=0,
                           total_steps=10)


def test_a_shared_prefix_train_step_takes_the_padded_step(tiny_model_path, rl_batch):
    batch = uneven(rl_batch).select(slice(8, 24))  # 8 rows cut short, 8 whole
    padded, shared = trainer(tiny_model_path, False), trainer(tiny_model_path, True)
    padded_grads, shared_grads = stepped_grads(padded), stepped_grads(shared)
    tokens_in = []  # tokens of each forward of the shared trainer's transformer
    shared.model.model.register_forward_pre_hook(
        lambda _, args, kwargs: tokens_in.append(kwargs["input_ids"].ne(0).sum()),
        with_kwargs=True)
    loss = actor_loss(entropy_coef=0.01)
    a = padded.train_step(dataclasses.replace(batch), loss)
    b = shared.train_step(dataclasses.replace(batch), loss)
    assert sum(tokens_in) < 0.75 * batch.attention_mask.sum()  # each prompt went in once
    assert_same_step(a, b, padded_grads[0], shared_grads[0])


class IgnoresMask(torch.nn.Module):
    """A model whose attention drops a 4-D mask (as flash attention kernels do)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None):
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = None
        return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=use_cache)


def test_a_model_that_ignores_the_mask_is_refused(model):
    check_model_packs(model, SHARED)
    check_model_packs(IgnoresMask(model), PackingPlan())  # plain packing needs no mask
    with pytest.raises(ValueError, match="shared_prefix_packing: .* 4-D mask"):
        check_model_packs(IgnoresMask(model), SHARED)


def test_shared_prefix_packing_without_packing_is_refused():
    from flywheel.pipelines.config import load_config_dict
    from flywheel.platform.config.errors import ConfigError

    with pytest.raises(ConfigError, match="shared_prefix_packing.*sequence_packing: true"):
        load_config_dict({"actor_train": {"training_args": {"shared_prefix_packing": True}}},
                         source="f.yaml")
