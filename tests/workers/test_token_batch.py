"""pack_sequences: the layout every backend trusts (right padding, masks, value columns)."""

from __future__ import annotations

import random

import pytest
import torch

from flywheel.workers.batch import pack_sequences


def packed_row_by_row(prompts, responses, pad_id, values):
    """The layout written out one row at a time, as the docstring of batch.py states it."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.full((len(prompts), width), pad_id)
    attn, resp = torch.zeros_like(ids), torch.zeros(ids.shape)
    vals = torch.zeros(ids.shape)
    for b, (p, r) in enumerate(zip(prompts, responses)):
        ids[b, :len(p) + len(r)] = torch.tensor(p + r)
        attn[b, :len(p) + len(r)] = 1
        resp[b, len(p):len(p) + len(r)] = 1
        vals[b, len(p):len(p) + len(r)] = torch.tensor(values[b], dtype=torch.float32)
    return ids, attn, resp, vals


@pytest.mark.parametrize("seed", range(5))
def test_layout_matches_the_row_by_row_definition(seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, 50) for _ in range(rng.randrange(1, 9))] for _ in range(7)]
    responses = [[rng.randrange(1, 50) for _ in range(rng.randrange(0, 6))] for _ in range(7)]
    responses[0] = [3, 4, 5, 6, 7, 8]  # at least one non-empty response
    values = [[rng.uniform(-5, 0) for _ in r] for r in responses]
    batch = pack_sequences(prompts, responses, pad_id=0, infer_log_probs=values)
    ids, attn, resp, vals = packed_row_by_row(prompts, responses, 0, values)
    assert torch.equal(batch.input_ids, ids)
    assert torch.equal(batch.attention_mask, attn)
    assert torch.equal(batch.response_mask, resp)
    assert torch.equal(batch.infer_log_probs, vals)
    assert batch.input_ids.dtype == torch.long and batch.response_mask.dtype == torch.float32


def test_values_must_cover_every_response_token():
    with pytest.raises(ValueError, match="infer_log_probs: need one value per response token"):
        pack_sequences([[1, 2]], [[3, 4]], pad_id=0, infer_log_probs=[[-0.1]])
