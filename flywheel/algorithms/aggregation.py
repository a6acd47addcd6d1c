"""Loss aggregation: turn a per-token loss matrix [B, T] into one scalar.

Every loss in this package (policy, value, KL, entropy) goes through `aggregate_loss`, so
the four `loss_agg_mode`s mean the same thing everywhere:

    token-mean               Σ_i Σ_t m_it·L_it / N_tok             (DAPO, arXiv 2503.14476)
    seq-mean-token-mean      Σ_i [Σ_t m_it·L_it / Σ_t m_it] / N_seq (GRPO, arXiv 2402.03300)
    seq-mean-token-sum       Σ_i [Σ_t m_it·L_it] / N_seq
    seq-mean-token-sum-norm  Σ_i [Σ_t m_it·L_it / T_norm] / N_seq   (Dr. GRPO, arXiv 2503.20783)

Gradient accumulation. With `global_num_tokens` (token-mean) or `global_num_seqs` (seq-*)
set to the count over the whole mini-batch (all micro-batches on all data-parallel ranks),
N_tok / N_seq are those global counts, so each micro-batch returns only its share and the
sum of the micro-batch losses (and of their gradients) equals the full-batch loss. Compute
them with `count_tokens` / `count_seqs` on each micro-batch and sum (all-reduce across
ranks). Without them, the counts are the local ones (a single-micro-batch step).

Conventions: a mask entry is valid when nonzero. A sequence counts towards N_seq only if it
has at least one valid token, so fully masked rows (padding rows) contribute 0 to both the
numerator and the denominator and never produce NaN. T_norm is `norm_length`, one constant
for the whole run (Dr. GRPO uses the generation budget; `loss_norm_length` in
config/derived.py): never the width of the tensor, which the train backends trim to
each micro-batch's longest row, so it would change with the split and break accumulation.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

LossAggMode = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
LOSS_AGG_MODES: tuple[str, ...] = get_args(LossAggMode)

Count = int | float | Tensor


def count_tokens(mask: Tensor) -> Tensor:
    """Number of valid tokens in `mask` [B, T] (the token-mean denominator)."""
    return mask.bool().sum()


def count_seqs(mask: Tensor) -> Tensor:
    """Number of rows of `mask` [B, T] with at least one valid token (the seq-* denominator)."""
    return mask.bool().any(dim=-1).sum()


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` over the valid entries of `mask`; 0 when nothing is valid."""
    valid = mask.bool()
    total = torch.where(valid, values, torch.zeros_like(values)).sum()
    return total / valid.sum().clamp_min(1)


def aggregate_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    *,
    global_num_tokens: Count | None = None,
    global_num_seqs: Count | None = None,
    norm_length: int | None = None,
) -> Tensor:
    """Reduce `loss_mat` [B, T] under `mask` [B, T] to a scalar; see the module docstring.

    Masked entries are replaced (not multiplied) by 0, so inf/NaN in padding cannot leak.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; expected one of {LOSS_AGG_MODES}")
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss_mat {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} differ")
    valid = mask.bool()  # [B, T]
    masked = torch.where(valid, loss_mat, torch.zeros_like(loss_mat))  # [B, T]

    if mode == "token-mean":
        _check_global(mode, needed=global_num_tokens, other=global_num_seqs,
                      needed_name="global_num_tokens", other_name="global_num_seqs")
        return masked.sum() / _denominator(global_num_tokens, count_tokens(valid), loss_mat)

    _check_global(mode, needed=global_num_seqs, other=global_num_tokens,
                  needed_name="global_num_seqs", other_name="global_num_tokens")
    token_sum = masked.sum(dim=-1)  # [B]
    if mode == "seq-mean-token-mean":
        per_seq = token_sum / valid.sum(dim=-1).clamp_min(1)  # [B]
    elif mode == "seq-mean-token-sum":
        per_seq = token_sum  # [B]
    else:  # seq-mean-token-sum-norm: divide by a constant, not by the sequence's own length
        if norm_length is None or norm_length < 1:
            raise ValueError(f"loss_agg_mode {mode!r} divides by norm_length, a constant "
                             f"response budget (>= 1); got {norm_length!r}")
        per_seq = token_sum / float(norm_length)  # [B]
    return per_seq.sum() / _denominator(global_num_seqs, count_seqs(valid), loss_mat)


def _denominator(global_count: Count | None, local_count: Tensor, like: Tensor) -> Tensor:
    count = local_count if global_count is None else global_count
    return torch.as_tensor(count, dtype=like.dtype, device=like.device).clamp_min(1)


def _check_global(mode: str, *, needed, other, needed_name: str, other_name: str) -> None:
    # Passing only the count the mode does not use is a caller bug that would silently
    # fall back to local normalisation and break gradient accumulation.
    if needed is None and other is not None:
        raise ValueError(
            f"loss_agg_mode {mode!r} normalises by {needed_name}, but only {other_name} was "
            f"given; pass {needed_name} (passing both is fine)"
        )
