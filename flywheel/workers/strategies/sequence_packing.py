"""Sequence packing: a micro-batch's rows laid end to end, without padding between them.

Why: a train batch is right-padded to its longest row (workers/batch.py), so every short
row costs the forward and backward of the longest one. Packed, rows share a row of the
model's input; `position_ids` restart at 0 where each sequence starts and the attention
mask and the cache are left out, and transformers then builds a block-diagonal causal mask from the
position ids (masking_utils' packed-sequence detection, for sdpa, eager and flash
attention), so no token attends across a sequence boundary and each row's log-probs are
those of the padded forward (tests/workers/test_sequence_packing.py checks this).

Width of a packed row (`training_args.max_packed_sequence_length`; 0: the micro-batch's
longest row). Rows go into packs first-fit by decreasing length (a row longer than the
width gets a pack of its own). The attention of a packed row is computed over its whole
width (the mask zeroes the blocks off the diagonal; the kernel still visits them), so the
width trades attention work (about width per token) against the padding it saves: at the
longest row's width attention costs no more than padded, and only rows that fit together
in that width are merged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flywheel.platform.config.schema import TrainingArgs


@dataclass(frozen=True)
class Packing:
    input_ids: torch.Tensor  # [P, W] packed rows (pad_id after the last sequence of a row)
    position_ids: torch.Tensor  # [P, W] 0..n-1 within each sequence
    # [B, L] long: where each token of the padded batch sits in the packs, as a flat index
    # into [P * W]; -1 on padding
    source: torch.Tensor

    def model_inputs(self, device: torch.device) -> dict[str, torch.Tensor | bool]:
        """The forward's arguments. No attention mask and no cache: transformers builds
        the per-sequence mask from the position ids only then (masking_utils)."""
        return {"input_ids": self.input_ids.to(device),
                "position_ids": self.position_ids.to(device), "use_cache": False}

    def unpacked(self, values: torch.Tensor) -> torch.Tensor:
        """[B, L, ...] from per-position `values` [P, W, ...] of the packs; 0 on padding."""
        flat = values.reshape(-1, *values.shape[2:])  # [P * W, ...]
        source = self.source.to(values.device)
        real = source >= 0  # [B, L]
        out = flat.new_zeros((*source.shape, *values.shape[2:]))
        out[real] = flat[source[real]]
        return out


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int,
              pad_id: int = 0) -> Packing:
    """Right-padded rows [B, L] (1s of `attention_mask` first in each row) into packs of at
    most max(`width`, longest row) tokens; `width` 0: the longest row."""
    lengths = attention_mask.sum(dim=1).tolist()  # [B]
    capacity = max(width, max(lengths)) if width > 0 else max(lengths)
    packs: list[list[int]] = []  # row indices per pack, in order of placement
    free: list[int] = []  # room left per pack
    for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        n = lengths[row]
        pack = next((p for p, room in enumerate(free) if room >= n), None)
        if pack is None:
            packs.append([])
            free.append(capacity)
            pack = len(packs) - 1
        packs[pack].append(row)
        free[pack] -= n
    fill = max(capacity - room for room in free)
    ids = torch.full((len(packs), fill), pad_id, dtype=input_ids.dtype)
    positions = torch.zeros((len(packs), fill), dtype=torch.long)
    source = torch.full(input_ids.shape, -1, dtype=torch.long)
    for p, rows in enumerate(packs):
        offset = 0
        for row in rows:
            n = lengths[row]
            ids[p, offset:offset + n] = input_ids[row, :n]
            positions[p, offset:offset + n] = torch.arange(n)
            source[row, :n] = p * fill + offset + torch.arange(n)
            offset += n
        # the tail keeps counting on from the last sequence: causal attention keeps every
        # real token blind to it, as to right padding
        positions[p, offset:] = torch.arange(fill - offset) + (positions[p, offset - 1] + 1)
    return Packing(ids, positions, source)


def packing_width(args: TrainingArgs) -> int | None:
    """What a role's forwards pass as `packing_width`: None when it does not pack."""
    return args.max_packed_sequence_length if args.sequence_packing else None


@torch.no_grad()
def check_model_packs(model: torch.nn.Module, device: torch.device) -> None:
    """Refuses a model that attends across packed sequences: an architecture whose
    attention mask ignores the position ids (custom or older modelling code) would
    silently train on cross-sequence context. Two 4-token rows, padded and packed."""
    ids = torch.arange(1, 9).view(2, 4)
    padded = model(input_ids=ids.to(device),
                   attention_mask=torch.ones_like(ids).to(device)).logits.float()
    packing = pack_rows(ids, torch.ones_like(ids), width=8)
    packed = packing.unpacked(model(**packing.model_inputs(device)).logits)
    if not torch.allclose(padded, packed.float(), rtol=1e-3, atol=1e-3):
        name = type(getattr(model, "module", model)).__name__  # DeepSpeed's engine: its model
        raise ValueError(f"training_args.sequence_packing: {name} attends across packed "
                         "sequences (its attention mask ignores position ids); set "
                         "sequence_packing: false")
