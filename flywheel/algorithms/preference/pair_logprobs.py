"""A pair's sequence log-probs from one forward over both of its responses.

The pair layout: a batch of P pairs is 2P rows, the chosen response of pair i at row 2i and
its rejected one at row 2i + 1, each row `prompt | response` (ROLL's DPO collator
interleaves them the same way). Both rows go through the same forward; with
`shared_prefix_packing` the prompt is laid once for the two (sequence_packing.py), so a
pair never costs two passes of its prompt. Micro-batches of an even number of rows keep a
pair together (the DPO checks refuse an odd per_device_train_batch_size and token-budget
micro-batching, which reorders rows).
"""

from __future__ import annotations

import torch

from flywheel.algorithms.preference.pair_losses import PairLogps


def sequence_sums(per_token: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] sum over each row's response tokens of [B, L] per-token log-probs."""
    return (per_token * response_mask).sum(dim=-1)


def split_pairs(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([P] chosen, [P] rejected) from [2P] per-row values in the pair layout."""
    if rows.shape[0] % 2:
        raise ValueError(f"{rows.shape[0]} rows do not form pairs (chosen, rejected)")
    return rows[0::2], rows[1::2]


def pair_logps(logprobs: torch.Tensor, response_mask: torch.Tensor,
               ref_logprobs: torch.Tensor | None = None) -> PairLogps:
    """The pairs' `PairLogps` from [2P, L] per-token log-probs of the policy (and of the
    reference) under the [2P, L] response mask."""
    chosen, rejected = split_pairs(sequence_sums(logprobs, response_mask))
    chosen_n, rejected_n = split_pairs(response_mask.sum(dim=-1).float())
    ref_chosen = ref_rejected = None
    if ref_logprobs is not None:
        ref_chosen, ref_rejected = split_pairs(sequence_sums(ref_logprobs, response_mask))
    return PairLogps(chosen, rejected, chosen_n, rejected_n, ref_chosen, ref_rejected)
