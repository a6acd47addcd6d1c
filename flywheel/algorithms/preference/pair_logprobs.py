"""A pair's sequence log-probs from one forward over both of its responses.

The pair layout: a batch of P pairs is 2P rows, each `prompt | response`, laid chosen at
row 2i and rejected at 2i + 1 (ROLL's DPO collator interleaves them the same way), and
said by a per-sample batch extra `pair` ([2P, 2] long: the pair's id, and 1 on the chosen
row, 0 on the rejected one; workers/batch.py `TokenBatch.attach`), so the loss never
infers it from row order: a micro-batch that holds half a pair is an error, not a wrong
pairing. Both rows go through the same forward; with `shared_prefix_packing` the prompt is
laid once for the two (sequence_packing.py), so a pair never costs two passes of its
prompt. The pipelines cut micro-batches of whole pairs (per_device_train_batch_size counts
pairs) and refuse token-budget micro-batching, which reorders rows.
"""

from __future__ import annotations

import torch

from flywheel.algorithms.preference.pair_losses import PairLogps


def sequence_sums(per_token: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] sum over each row's response tokens of [B, L] per-token log-probs."""
    return (per_token * response_mask).sum(dim=-1)


PAIR_EXTRA = "pair"  # the batch extra's name


def pair_layout(pair_ids: list[int]) -> torch.Tensor:
    """[2P, 2] the `pair` extra of pairs laid chosen, rejected, chosen, ... in this order."""
    return torch.tensor([[i, side] for i in pair_ids for side in (1, 0)], dtype=torch.long)


def split_pairs(rows: torch.Tensor, pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([P] chosen, [P] rejected) from [2P] per-row values, matched by the [2P, 2] `pair`
    extra; ValueError when a pair's other row is not among them."""
    chosen = pair[:, 1] == 1  # [2P]
    ids_c, ids_r = pair[chosen, 0], pair[~chosen, 0]
    order_c, order_r = torch.argsort(ids_c), torch.argsort(ids_r)
    if ids_c.shape != ids_r.shape or not torch.equal(ids_c[order_c], ids_r[order_r]):
        raise ValueError(f"these {len(pair)} rows do not hold whole pairs (chosen ids "
                         f"{ids_c.tolist()[:8]}, rejected ids {ids_r.tolist()[:8]}): a "
                         f"micro-batch split a pair")
    return rows[chosen][order_c], rows[~chosen][order_r]


def pair_logps(logprobs: torch.Tensor, response_mask: torch.Tensor, pair: torch.Tensor,
               ref_logprobs: torch.Tensor | None = None) -> PairLogps:
    """The pairs' `PairLogps` from [2P, L] per-token log-probs of the policy (and of the
    reference) under the [2P, L] response mask, paired by the [2P, 2] `pair` extra."""
    chosen, rejected = split_pairs(sequence_sums(logprobs, response_mask), pair)
    chosen_n, rejected_n = split_pairs(response_mask.sum(dim=-1).float(), pair)
    ref_chosen = ref_rejected = None
    if ref_logprobs is not None:
        ref_chosen, ref_rejected = split_pairs(sequence_sums(ref_logprobs, response_mask),
                                               pair)
    return PairLogps(chosen, rejected, chosen_n, rejected_n, ref_chosen, ref_rejected)
