"""The token batch that travels between pipeline and workers.

Sequences are prompt tokens followed by response tokens, right-padded, so positions are
the natural 0..n-1 with no shift. Every per-token tensor is aligned with `input_ids`:
`log_probs[b, t]` is log p(input_ids[b, t] | input_ids[b, :t]), and column 0 is 0.
`response_mask` is 1 exactly on the tokens the policy generated (the loss positions).

Per-sample values (`scores`, sample ids) live in `sample` and per-token extras
(advantages, old/ref/infer log-probs) in `token`, keyed by name; splitting a batch
splits all of them together so a micro-batch never mixes rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, L] long
    attention_mask: torch.Tensor  # [B, L] long, 1 on real tokens
    response_mask: torch.Tensor  # [B, L] float, 1 on generated tokens
    token: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [B, L]
    sample: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [B]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, rows: slice | torch.Tensor) -> TokenBatch:
        return TokenBatch(
            input_ids=self.input_ids[rows],
            attention_mask=self.attention_mask[rows],
            response_mask=self.response_mask[rows],
            token={k: v[rows] for k, v in self.token.items()},
            sample={k: v[rows] for k, v in self.sample.items()},
        )

    def chunks(self, size: int) -> list[TokenBatch]:
        """Consecutive row blocks of at most `size` rows."""
        return [self.select(slice(i, i + size)) for i in range(0, len(self), size)]

    def shard(self, n: int) -> list[TokenBatch]:
        """`n` equal contiguous shards, one per data-parallel rank."""
        if len(self) % n:
            raise ValueError(f"batch of {len(self)} rows does not split into {n} equal shards")
        return self.chunks(len(self) // n)

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(
            self.input_ids.to(device), self.attention_mask.to(device),
            self.response_mask.to(device),
            token={k: v.to(device) for k, v in self.token.items()},
            sample={k: v.to(device) for k, v in self.sample.items()},
        )

    def trimmed(self) -> TokenBatch:
        """Drop trailing all-padding columns (saves compute on short responses)."""
        length = int(self.attention_mask.sum(dim=1).max().item())
        return TokenBatch(
            input_ids=self.input_ids[:, :length],
            attention_mask=self.attention_mask[:, :length],
            response_mask=self.response_mask[:, :length],
            token={k: v[:, :length] for k, v in self.token.items()},
            sample=dict(self.sample),
        )


def pack_sequences(
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    response_values: dict[str, list[list[float]]] | None = None,
) -> TokenBatch:
    """Right-pad prompt+response rows; per-response-token values land on response columns.

    Rows are padded as Python lists and turned into each tensor with one call: the
    pipeline packs every training batch on its critical path, and a tensor per row cost
    milliseconds per step.
    """
    starts = torch.tensor([len(p) for p in prompts])  # [B] first response column
    ends = starts + torch.tensor([len(r) for r in responses])  # [B] one past the last token
    width = int(ends.max())
    cols = torch.arange(width)[None, :]  # [1, L]
    input_ids = torch.tensor([p + r + [pad_id] * (width - len(p) - len(r))
                              for p, r in zip(prompts, responses)], dtype=torch.long)
    attention_mask = (cols < ends[:, None]).long()  # [B, L]
    response_mask = ((cols >= starts[:, None]) & (cols < ends[:, None])).float()  # [B, L]
    token = {}
    for k, values in (response_values or {}).items():
        if any(len(v) != len(r) for v, r in zip(values, responses)):
            raise ValueError(f"{k}: need one value per response token in every row")
        token[k] = torch.tensor([[0.0] * len(p) + list(v) + [0.0] * (width - len(p) - len(v))
                                 for p, v in zip(prompts, values)], dtype=torch.float32)
    return TokenBatch(input_ids, attention_mask, response_mask, token=token)
