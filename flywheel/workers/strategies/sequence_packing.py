"""Sequence packing: a micro-batch's rows laid end to end, without padding between them;
and, with `shared_prefix_packing`, rows that share a prompt laid after one copy of it.

Why: a train batch is right-padded to its longest row (workers/batch.py), so every short
row costs the forward and backward of the longest one. Packed, rows share a row of the
model's input; `position_ids` restart at 0 where each sequence starts and the attention
mask and the cache are left out, and transformers then builds a block-diagonal causal mask from the
position ids (masking_utils' packed-sequence detection, for sdpa, eager and flash
attention), so no token attends across a sequence boundary and each row's log-probs are
those of the padded forward (tests/workers/test_sequence_packing.py checks this).

Shared prefixes: an RL batch holds each prompt once per sample of its group (GRPO: 8
copies), and a short-answer task spends most of its tokens on those copies. With
`shared_prefix_packing` the rows whose tokens before their first response token are the
same form one unit: the prefix once, then each row's continuation, whose positions go on
from the prefix's end; a 4-D mask lets each continuation see the prefix and itself only
(the shared-prefix forward of Prefix Grouper, Liu et al. 2025, arXiv:2506.05433). The
prefix's hidden states then feed every row of its unit, and backward sums their gradients
into it: each row's log-probs, and the gradient, are those of the padded forward
(tests/workers/test_shared_prefix_packing.py). On SmolLM2's example (35-token prompts,
8 samples of 16 tokens) a train step runs about 2x faster (bench/bench_train_step.py).

Width of a packed row (`training_args.max_packed_sequence_length`; 0: the micro-batch's
longest unit: a row, or a prefix with its continuations). Units go into packs first-fit by
decreasing length (a unit longer than the width gets a pack of its own; a shared-prefix
unit is split before that, each part repeating the prefix). The attention of a packed row
is computed over its whole width (the mask zeroes the pairs it forbids; the kernel still
visits them), so the width trades attention work (about width per token) against the
padding it saves: at the longest row's width attention costs no more than padded, and only
rows that fit together in that width are merged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flywheel.config.schema import TrainingArgs


@dataclass(frozen=True)
class PackingPlan:
    """How a role lays its rows for a forward: `width` as `max_packed_sequence_length`;
    `share_prefix`: rows with the same prompt carry it once (`shared_prefix_packing`)."""
    width: int = 0
    share_prefix: bool = False

    def pack(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             response_mask: torch.Tensor | None) -> Packing:
        return pack_rows(input_ids, attention_mask, self.width,
                         prefix_ends=(first_response_token(attention_mask, response_mask)
                                      if self.share_prefix else None))


@dataclass(frozen=True)
class Packing:
    input_ids: torch.Tensor  # [P, W] packed rows (pad_id after the last sequence of a row)
    position_ids: torch.Tensor  # [P, W] 0..n-1 within each sequence
    # [B, L] long: where each token of the padded batch sits in the packs, as a flat index
    # into [P * W]; -1 on padding. Rows of one shared-prefix unit point at the same prefix.
    source: torch.Tensor
    # shared prefixes only, [P, W] long: the piece each token belongs to (a prefix, a
    # continuation, or the padding after the last unit), and the piece it may also see
    # (a continuation: its unit's prefix; anything else: its own piece)
    piece: torch.Tensor | None = None
    sees: torch.Tensor | None = None

    def model_inputs(self, model: torch.nn.Module) -> dict[str, torch.Tensor | bool]:
        """The forward's arguments. No cache. Rows packed end to end get no attention
        mask: transformers builds the per-sequence mask from the position ids only then
        (masking_utils). Shared prefixes get their 4-D mask, which transformers passes
        to the attention as it is."""
        device = next(model.parameters()).device
        inputs = {"input_ids": self.input_ids.to(device),
                  "position_ids": self.position_ids.to(device), "use_cache": False}
        if self.piece is not None:
            config = getattr(model, "module", model).config  # DeepSpeed's engine: its model
            inputs["attention_mask"] = self.attention_mask(config._attn_implementation, device)
        return inputs

    def attention_mask(self, implementation: str, device: torch.device) -> torch.Tensor:
        """[P, 1, W, W]: query q sees key k at or before it in its own piece or in the
        piece it `sees`. Boolean for sdpa (True: attend); eager adds it to the scores,
        so there it is 0 / the most negative float."""
        piece, sees = self.piece.to(device), self.sees.to(device)
        width = piece.shape[1]
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        allowed = causal & ((piece[:, None, :] == piece[:, :, None])
                            | (piece[:, None, :] == sees[:, :, None]))  # [P, W(q), W(k)]
        allowed = allowed[:, None]
        if implementation == "eager":
            return torch.zeros(allowed.shape, device=device).masked_fill(
                ~allowed, torch.finfo(torch.float32).min)
        return allowed

    def unpacked(self, values: torch.Tensor) -> torch.Tensor:
        """[B, L, ...] from per-position `values` [P, W, ...] of the packs; 0 on padding."""
        flat = values.reshape(-1, *values.shape[2:])  # [P * W, ...]
        source = self.source.to(values.device)
        real = source >= 0  # [B, L]
        out = flat.new_zeros((*source.shape, *values.shape[2:]))
        out[real] = flat[source[real]]
        return out


@dataclass(frozen=True)
class _Unit:
    """What goes into a pack as one block: `prefix` tokens of `rows[0]` that every row of
    `rows` starts with (0: a lone row, packed as in plain sequence packing), then each
    row's tokens after them."""
    rows: tuple[int, ...]
    prefix: int
    length: int


def first_response_token(attention_mask: torch.Tensor,
                         response_mask: torch.Tensor | None) -> list[int]:
    """Per row, where its first response token is (a row with none: its length): the end
    of the prefix a row may share. Everything a loss reads comes after it."""
    lengths = attention_mask.sum(dim=1).tolist()
    if response_mask is None:
        return lengths
    ends = []
    for row, n in enumerate(lengths):
        hits = response_mask[row, :n].nonzero()
        ends.append(int(hits[0]) if len(hits) else n)
    return ends


def _units(input_ids: torch.Tensor, lengths: list[int], prefix_ends: list[int] | None,
           capacity: int | None) -> list[_Unit]:
    """Rows grouped by the tokens before their first response token; a group longer than
    `capacity` (None: no limit) split into parts that each repeat the prefix."""
    if prefix_ends is None:
        return [_Unit((row,), 0, n) for row, n in enumerate(lengths)]
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, end in enumerate(prefix_ends):
        groups.setdefault(tuple(input_ids[row, :end].tolist()), []).append(row)
    units = []
    for prefix, rows in groups.items():
        p = len(prefix)
        if len(rows) == 1 or p == 0:
            units += [_Unit((row,), 0, lengths[row]) for row in rows]
            continue
        part, length = [], p
        for row in rows:
            tail = lengths[row] - p
            if part and capacity is not None and length + tail > capacity:
                units.append(_Unit(tuple(part), p, length))
                part, length = [], p
            part.append(row)
            length += tail
        units.append(_Unit(tuple(part), p, length))
    return units


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int,
              pad_id: int = 0, prefix_ends: list[int] | None = None) -> Packing:
    """Right-padded rows [B, L] (1s of `attention_mask` first in each row) into packs of at
    most max(`width`, longest unit) tokens; `width` 0: the longest unit. `prefix_ends`
    (per row, where its shareable prefix ends; None: nothing shared): rows with the same
    prefix share one copy of it."""
    lengths = attention_mask.sum(dim=1).tolist()  # [B]
    units = _units(input_ids, lengths, prefix_ends, width if width > 0 else None)
    longest = max(u.length for u in units)
    capacity = max(width, longest) if width > 0 else longest
    packs: list[list[_Unit]] = []  # units per pack, in order of placement
    free: list[int] = []  # room left per pack
    for unit in sorted(units, key=lambda u: -u.length):
        pack = next((p for p, room in enumerate(free) if room >= unit.length), None)
        if pack is None:
            packs.append([])
            free.append(capacity)
            pack = len(packs) - 1
        packs[pack].append(unit)
        free[pack] -= unit.length
    fill = max(capacity - room for room in free)
    ids = torch.full((len(packs), fill), pad_id, dtype=input_ids.dtype)
    positions = torch.zeros((len(packs), fill), dtype=torch.long)
    source = torch.full(input_ids.shape, -1, dtype=torch.long)
    shared = prefix_ends is not None
    piece = torch.zeros((len(packs), fill), dtype=torch.long)  # 0: padding after the units
    sees = torch.zeros((len(packs), fill), dtype=torch.long)
    pieces = 0
    for p, pack_units in enumerate(packs):
        offset = 0
        for unit in pack_units:
            start, prefix_piece = offset, pieces + 1
            if unit.prefix:
                pieces += 1
                span = slice(offset, offset + unit.prefix)
                ids[p, span] = input_ids[unit.rows[0], :unit.prefix]
                positions[p, span] = torch.arange(unit.prefix)
                piece[p, span] = sees[p, span] = pieces
                offset += unit.prefix
            for row in unit.rows:
                n, k = lengths[row], unit.prefix
                pieces += 1
                ids[p, offset:offset + n - k] = input_ids[row, k:n]
                positions[p, offset:offset + n - k] = torch.arange(k, n)
                piece[p, offset:offset + n - k] = pieces
                sees[p, offset:offset + n - k] = prefix_piece if k else pieces
                source[row, :k] = p * fill + start + torch.arange(k)
                source[row, k:n] = p * fill + offset + torch.arange(n - k)
                offset += n - k
        # the tail keeps counting on from the last sequence: causal attention keeps every
        # real token blind to it, as to right padding
        positions[p, offset:] = torch.arange(fill - offset) + (positions[p, offset - 1] + 1)
    if not shared:
        return Packing(ids, positions, source)
    return Packing(ids, positions, source, piece, sees)


def packing_plan(args: TrainingArgs) -> PackingPlan | None:
    """How a role's forwards lay their rows: None when it does not pack."""
    if not args.sequence_packing:
        return None
    return PackingPlan(args.max_packed_sequence_length, args.shared_prefix_packing)


@torch.no_grad()
def check_model_packs(model: torch.nn.Module, plan: PackingPlan) -> None:
    """Refuses a model that attends across packed sequences: an architecture whose
    attention mask ignores the position ids (custom or older modelling code) would
    silently train on cross-sequence context, and one that ignores a 4-D mask (flash
    attention) would let shared-prefix rows see each other. Three 4-token rows, two of
    them with the same 2-token prompt, padded and packed."""
    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9, 10]])
    device = next(model.parameters()).device
    ones = torch.ones_like(ids)
    padded = model(input_ids=ids.to(device), attention_mask=ones.to(device)).logits.float()
    response = torch.zeros_like(ids)
    response[:, 2:] = 1
    packing = PackingPlan(12, plan.share_prefix).pack(ids, ones, response)
    packed = packing.unpacked(model(**packing.model_inputs(model)).logits)
    if not torch.allclose(padded, packed.float(), rtol=1e-3, atol=1e-3):
        name = type(getattr(model, "module", model)).__name__  # DeepSpeed's engine: its model
        if plan.share_prefix:
            raise ValueError(f"training_args.shared_prefix_packing: {name} does not mask "
                             "attention as a 4-D mask asks (flash attention ignores it); "
                             "use attn_implementation sdpa or eager, or set "
                             "shared_prefix_packing: false")
        raise ValueError(f"training_args.sequence_packing: {name} attends across packed "
                         "sequences (its attention mask ignores position ids); set "
                         "sequence_packing: false")
