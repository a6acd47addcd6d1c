"""The two forwards of offline distillation over a teacher's top-k tokens (algorithms/
distill/divergences.py): the teacher's k most likely tokens and their log-probs at each
loss position (no gradient), and the student's head that gives, with gradient, its
log-prob of the row's own token and its log-probs at the teacher's k tokens.

Both run the model's body once and its vocabulary head only at the wanted positions, in
chunks of LOGIT_CHUNK_POSITIONS (under activation checkpointing when training, so backward
recomputes each chunk's logits): never a [batch, length, vocab] tensor, as the policy
head (`hf_model.sequence_logprobs`). Values are aligned with input_ids: column t holds the
distribution of token t given the tokens before it; column 0 and unwanted positions are 0.

The student's head (`TopKHead`) is a policy head whose training outputs are [B, L, 1 + k]:
[..., 0] log q(x_t | x_<t) at temperature 1 (the SFT term), [..., 1:] log softmax(z /
kd_temperature) at the vocabulary ids the batch carries as the extra
`TOPK_INDICES` ([B, L, k], pipelines/distill/offline_run.py attaches it). It computes at
the batch's response mask (distill_on_prompt widens that mask to the prompt). It has no
entropy and no sequence packing (the offline-distillation check refuses neither: the
kind reads no entropy or packing key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from flywheel.platform.liveness import tick
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import LOGIT_CHUNK_POSITIONS, own_logits
from flywheel.workers.strategies.model_head import ModelHead
from flywheel.workers.strategies.sequence_packing import PackingPlan

TOPK_INDICES = "teacher_topk_indices"  # the extra [B, L, k] of vocabulary ids
TOPK_LOG_PROBS = "teacher_topk_log_probs"  # the extra [B, L, k] of the teacher's log-probs

# (logits [n, V] of n wanted positions, their flat position indices [n]) -> values [n, D]
PerChunk = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def at_positions(model: torch.nn.Module, batch: TokenBatch, positions: torch.Tensor,
                 per_chunk: PerChunk, width: int) -> torch.Tensor:
    """[B, L, width]: `per_chunk` of the logits predicting each wanted token (`positions`
    [B, L] nonzero where wanted), 0 elsewhere and in column 0."""
    device = next(model.parameters()).device
    input_ids = batch.input_ids.to(device)  # [B, L]
    attention_mask = batch.attention_mask.to(device)
    rows, length = input_ids.shape
    # [N] flat indices into [B * (L-1)]: position t - 1 predicts token t
    wanted = positions.to(device)[:, 1:].reshape(-1).nonzero().squeeze(1)
    if own_logits(model):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        flat = logits[:, :-1].reshape(rows * (length - 1), -1)[wanted]  # [N, V]
        values = per_chunk(flat, wanted)
    else:
        hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                  use_cache=False).last_hidden_state  # [B, L, H]
        flat_hidden = hidden[:, :-1].reshape(rows * (length - 1), -1)[wanted]  # [N, H]
        head = model.get_output_embeddings()

        def chunk_values(h: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
            return per_chunk(head(h), where)

        parts = []
        for start in range(0, max(1, len(wanted)), LOGIT_CHUNK_POSITIONS):
            tick()  # a long forward is progress (platform/liveness.py)
            piece = (flat_hidden[start:start + LOGIT_CHUNK_POSITIONS],
                     wanted[start:start + LOGIT_CHUNK_POSITIONS])
            if torch.is_grad_enabled() and flat_hidden.requires_grad:
                parts.append(checkpoint(chunk_values, *piece, use_reentrant=False))
            else:
                parts.append(chunk_values(*piece))
        values = torch.cat(parts)  # [N, width]
    out = values.new_zeros(rows * (length - 1), width).index_put((wanted,), values)
    return F.pad(out.view(rows, length - 1, width), (0, 0, 1, 0))  # [B, L, width]


@torch.no_grad()
def teacher_topk(model: torch.nn.Module, batch: TokenBatch, positions: torch.Tensor, k: int,
                 temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher's k most likely tokens at each wanted position: (log-probs [B, L, k] of
    softmax(z / temperature) over the whole vocabulary, vocabulary ids [B, L, k] long), 0
    elsewhere. k above the vocabulary keeps every token."""
    vocab = model.get_output_embeddings().weight.shape[0] if not own_logits(model) else None
    k = min(k, vocab) if vocab else k

    def top(logits: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)  # [n, V]
        values, ids = torch.topk(log_probs, min(k, log_probs.shape[-1]), dim=-1)
        return torch.cat([values, ids.to(values.dtype)], -1)  # [n, 2k]: ids exact < 2^24

    both = at_positions(model, batch, positions, top, 2 * k)  # [B, L, 2k]
    return both[..., :k].cpu(), both[..., k:].long().cpu()


@dataclass(frozen=True)
class TopKHead(ModelHead):
    """The student's head under offline distillation (module docstring)."""

    kd_temperature: float = 1.0

    def hf_outputs(self, model: torch.nn.Module, batch: TokenBatch, with_entropy: bool,
                   chunked: bool = True, response_only: bool = False,
                   packing: PackingPlan | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if with_entropy or packing is not None:
            raise ValueError("the top-k distillation head computes no entropy and takes no "
                             "packed rows")
        device = next(model.parameters()).device
        targets = batch.input_ids.to(device)[:, 1:].reshape(-1)  # [B * (L-1)]
        indices = batch.extra(TOPK_INDICES).to(device)  # [B, L, k]
        k = indices.shape[-1]
        flat_indices = indices[:, 1:].reshape(-1, k)  # [B * (L-1), k]

        def own_and_topk(logits: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
            logits = logits.float()  # [n, V]
            label = torch.log_softmax(logits, -1).gather(-1, targets[where][:, None])  # [n, 1]
            scaled = torch.log_softmax(logits / self.kd_temperature, -1)  # [n, V]
            return torch.cat([label, scaled.gather(-1, flat_indices[where])], -1)  # [n, 1+k]

        return at_positions(model, batch, batch.response_mask, own_and_topk, 1 + k), None
