"""The policy head on response positions only (hf_model.sequence_logprobs `positions`).

The training forward computes the vocabulary-wide head and log-softmax only where the
response mask is 1; at those positions the numbers must be the full computation's, and
everywhere else 0. Checked on the tiny model with entropy and a truncated sampled
distribution (top-k, top-p), in the chunked path, the model's-own-logits path (ZeRO-3)
and with gradients (the loss and every parameter gradient of a train micro-batch).
"""

from __future__ import annotations

import pytest
import torch

from flywheel.algorithms.sampled_distribution import SampledDistribution
from flywheel.config.schema import ModelArgs
from flywheel.workers.strategies.hf_model import load_causal_lm, sequence_logprobs

TRUNCATED = SampledDistribution(0.7, 5, 0.9)


@pytest.fixture(scope="module")
def model(tiny_model_path):
    return load_causal_lm(tiny_model_path, ModelArgs(), torch.device("cpu"))


@pytest.mark.parametrize("chunked", [True, False])
def test_response_positions_equal_the_full_computation(model, rl_batch, chunked):
    mask = rl_batch.response_mask.bool()
    with torch.no_grad():
        full, full_ent = sequence_logprobs(model, rl_batch, True, TRUNCATED, chunked)
        part, part_ent = sequence_logprobs(model, rl_batch, True, TRUNCATED, chunked,
                                           positions=rl_batch.response_mask)
    assert torch.allclose(part[mask], full[mask], atol=1e-6)
    assert torch.allclose(part_ent[mask], full_ent[mask], atol=1e-6)
    assert not part[~mask].any() and not part_ent[~mask].any()
    assert full[~mask & rl_batch.attention_mask.bool()].ne(0).any()  # computed there


def test_gradients_equal_the_full_computation(model, rl_batch):
    """The masked loss and its gradients: a scatter to the wrong positions, or a mask
    shifted by one column, changes both."""
    mask = rl_batch.response_mask
    model.train()

    def loss_and_grads(positions):
        model.zero_grad(set_to_none=True)
        lp, ent = sequence_logprobs(model, rl_batch, True, TRUNCATED, positions=positions)
        loss = -((lp * rl_batch.advantages) * mask).sum() / mask.sum() - 0.01 * (ent * mask).sum()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                               if p.grad is not None}

    try:
        full_loss, full_grads = loss_and_grads(None)
        part_loss, part_grads = loss_and_grads(mask)
    finally:
        model.eval()
    assert torch.allclose(part_loss, full_loss, atol=1e-6)
    assert full_grads.keys() == part_grads.keys()
    for name, grad in full_grads.items():
        assert torch.allclose(part_grads[name], grad, atol=1e-6, rtol=1e-4), name


def test_a_micro_batch_without_response_tokens_still_back_propagates(model, rl_batch):
    rows = rl_batch.select(slice(0, 2))
    lp, _ = sequence_logprobs(model, rows, positions=torch.zeros_like(rows.response_mask))
    assert not lp.any()
    lp.sum().backward()  # no "does not require grad": the graph is there, gradients 0
    model.zero_grad(set_to_none=True)
