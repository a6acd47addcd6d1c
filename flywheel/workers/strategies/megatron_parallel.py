"""The collective pieces of megatron_train: data across model-parallel ranks and log-probs
across a vocabulary split over TP ranks (gradients: megatron_ddp.py).

Each function is written for any TP/PP/DP sizes and reduces to the single-process
computation when they are all 1 (every collective is then over a group of one).
"""

from __future__ import annotations

import dataclasses
import glob
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region
from safetensors.torch import load_file

from flywheel.algorithms.sampled_distribution import (
    OUTSIDE_LOGIT,
    RAW,
    SampledDistribution,
    finite,
)
from flywheel.workers.batch import SAMPLE_FIELDS, Extra, Extras, TokenBatch


def load_hf_tensors(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of a HF checkpoint directory (one or several safetensors files)."""
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(file))
    return tensors


def gather_model_parallel(batch: TokenBatch) -> tuple[TokenBatch, slice]:
    """All shards of this rank's model replica (TP x PP group), concatenated in group-rank
    order, and the rows of the result that are this rank's own shard."""
    group = ps.get_model_parallel_group()
    size = dist.get_world_size(group)
    if size == 1:
        return batch, slice(0, len(batch))
    shards: list[TokenBatch | None] = [None] * size
    dist.all_gather_object(shards, batch, group=group)
    index = dist.get_rank(group)
    return concat_batches(shards), slice(index * len(batch), (index + 1) * len(batch))


def widened_to_multiple(batch: TokenBatch, multiple: int) -> TokenBatch:
    """`batch` right-padded (masks 0) to a width that divides by `multiple`: sequence
    parallelism splits the sequence into TP equal parts. Causal attention keeps the added
    columns out of every real position; the loss masks leave them out of the loss."""
    extra = -batch.input_ids.shape[1] % multiple
    return batch if not extra else batch.map(lambda t: F.pad(t, (0, extra)), lambda t: t)


def micro_rows(n: int, cap: int, multiple: int = 1) -> int:
    """The largest divisor of `n` that is <= cap (pipeline stages need equal micro-batches)
    and cuts `n` into a multiple of `multiple` micro-batches (the interleaved schedule runs
    them in groups of PP: megatron-core raises on a remainder)."""
    fits = [d for d in range(1, min(n, max(1, cap)) + 1) if n % d == 0 and n // d % multiple == 0]
    if not fits:
        raise ValueError(f"megatron_train: {n} rows do not cut into a multiple of {multiple} "
                         f"equal micro-batches, which the interleaved pipeline schedule "
                         f"(virtual_pipeline_model_parallel_size) needs: make each model "
                         f"replica's rows a multiple of pipeline_model_parallel_size")
    return max(fits)


def concat_batches(batches: list[TokenBatch]) -> TokenBatch:
    """Rows of all batches in order, per-token fields padded to the widest."""
    width = max(b.input_ids.shape[1] for b in batches)
    fields = {}
    for f in dataclasses.fields(TokenBatch):
        parts = [getattr(b, f.name) for b in batches]
        if parts[0] is None:
            continue
        if f.name == "extras":  # each extra as the field it stands for
            fields[f.name] = Extras({name: Extra(torch.cat([
                F.pad(p[name].values, (0, width - p[name].values.shape[1]))
                if extra.per == "token" else p[name].values for p in parts]), extra.per)
                for name, extra in parts[0].items()})
            continue
        if f.name not in SAMPLE_FIELDS:
            parts = [F.pad(t, (0, width - t.shape[1])) for t in parts]
        fields[f.name] = torch.cat(parts)
    return TokenBatch(**fields)


def freeze_padding_row(embedding: torch.nn.Module, pad_id: int) -> None:
    """HF's `nn.Embedding(padding_idx=pad)`: the pad token's *input* embedding gets no
    gradient (its output-layer row, when tied, still does). Megatron's embedding has no
    padding_idx, so the same is done by detaching the pad positions' embeddings."""

    def hook(module, inputs, output):  # output [B, L, H], [L, B, H] or, under SP, [L/tp, B, H]
        ids = inputs[0]
        pad = (ids == pad_id).reshape(*ids.shape, 1)
        if output.shape[:2] != ids.shape:
            pad = pad.transpose(0, 1)  # [L, B, 1]
        if output.shape[0] < pad.shape[0]:  # sequence parallel: this TP rank's positions
            width = output.shape[0]
            start = ps.get_tensor_model_parallel_rank() * width
            pad = pad[start:start + width]
        return torch.where(pad, output.detach(), output)

    embedding.register_forward_hook(hook)


def vocab_parallel_logprobs(logits: torch.Tensor, input_ids: torch.Tensor,
                            with_entropy: bool, distribution: SampledDistribution = RAW
                            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(x_t | x_<t) [B, L] (column 0 is 0) from logits [B, L, V/tp] split over TP.

    pi is the sampled distribution (`algorithms/sampled_distribution.py`). Its temperature
    is a division, local to each rank. Which tokens top-k / top-p keep depends on the whole
    vocabulary: the ranks all-gather their logits (detached), each computes the kept set
    over all of them, and masks its own slice with it. The mask is a constant of the
    logits (a selection, no gradient of its own), so the gradient reaches the kept
    logits only, as with TP = 1.

    log p = z_target - log Z with Z = sum_v exp(z_v); entropy = log Z - sum_v exp(z_v) z_v / Z.
    Each rank sums over its slice of the vocabulary and the partial sums are all-reduced
    over TP. That reduce's backward is the identity, which is right only if everything
    after it is the same on every TP rank: so only those sums are reduced, and nothing
    rank-local (such as p_v = exp(z_v) / Z on the local slice) is computed from a reduced
    value.
    """
    group = ps.get_tensor_model_parallel_group()
    logits = logits[:, :-1].float()  # [B, L-1, V/tp] predicts tokens 1..L-1
    if distribution.truncates:
        logits = logits.masked_fill(_dropped_here(logits, distribution, group), float("-inf"))
    if distribution.temperature != 1.0:
        logits = logits / distribution.temperature
    targets = input_ids[:, 1:]  # [B, L-1]
    local_vocab = logits.shape[-1]
    start = ps.get_tensor_model_parallel_rank() * local_vocab
    top = logits.detach().max(dim=-1, keepdim=True).values  # [B, L-1, 1]
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
    shifted = logits - top  # [B, L-1, V/tp]
    exp = shifted.exp()
    sum_exp = reduce_from_tensor_model_parallel_region(exp.sum(-1))  # Z, [B, L-1]
    log_norm = sum_exp.log()
    local = targets - start
    here = (local >= 0) & (local < local_vocab)
    picked = shifted.gather(-1, local.clamp(0, local_vocab - 1)[..., None]).squeeze(-1)
    # a token pi does not keep scores OUTSIDE_LOGIT before the shift, as picked_logits does
    picked = torch.where(torch.isinf(picked), OUTSIDE_LOGIT - top.squeeze(-1), picked)
    picked = reduce_from_tensor_model_parallel_region(picked * here)  # [B, L-1]
    log_probs = F.pad(picked - log_norm, (1, 0))  # [B, L]
    entropy = None
    if with_entropy:  # a truncated token has exp = 0 and shifted = -inf: it adds 0
        terms = exp * finite(shifted)  # see sampled_distribution.entropy_of_logits
        weighted = reduce_from_tensor_model_parallel_region(terms.sum(-1))
        entropy = F.pad(log_norm - weighted / sum_exp, (1, 0))  # [B, L]
    return log_probs, entropy


def _dropped_here(logits: torch.Tensor, distribution: SampledDistribution,
                 group: dist.ProcessGroup) -> torch.Tensor:
    """[B, L, V/tp] True where top-k / top-p drop this rank's token, decided over the whole
    vocabulary (the TP ranks' slices in rank order)."""
    local = logits.detach()
    parts = [local]
    if dist.get_world_size(group) > 1:
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, local.contiguous(), group=group)
    dropped = torch.isinf(distribution.logits(torch.cat(parts, dim=-1)))
    rank, width = ps.get_tensor_model_parallel_rank(), local.shape[-1]
    return dropped[..., rank * width:(rank + 1) * width]
