"""The token batch that travels between pipeline and workers.

Sequences are prompt tokens followed by response tokens, right-padded, so positions are
the natural 0..n-1 with no shift. Every per-token tensor is aligned with `input_ids`:
`old_log_probs[b, t]` is log p(input_ids[b, t] | input_ids[b, :t]), and column 0 is 0.
`response_mask` is 1 exactly on the tokens the policy generated (the loss positions).

The optional fields are filled by the phases of a step, in order: the packer (sampled
log-probs, scores, versions), the log-prob phase (old / reference log-probs, values), the
advantage phase (advantages, returns) and the mismatch correction (is_weights). Each is
named here once; splitting a batch splits all of them together, so a micro-batch never
mixes rows.

Extras. What one kind of pipeline's loss reads and no other does (a distillation teacher's
log-probs, a preference pair's layout) travels as a named `Extra` in `extras`, not as a new
field here: a rollout attaches it (`batch.attach("teacher_log_probs", tensor, per="token")`),
every split, move, trim and concatenation carries it with its rows, and the loss reads it
(`micro.extra("teacher_log_probs")`, an error naming what is there when it is missing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch

from flywheel.workers.image_inputs import RowImages

Rows = slice | torch.Tensor


@dataclass(frozen=True)
class Extra:
    """One tensor a rollout attaches for its loss: per token ([B, L] or [B, L, ...],
    aligned with input_ids like old_log_probs, 0 off the response) or per sample
    ([B, ...])."""

    values: torch.Tensor
    per: Literal["token", "sample"]

    def __post_init__(self) -> None:
        if self.per not in ("token", "sample"):
            raise ValueError(f"an Extra is per 'token' or 'sample', not {self.per!r}")

    def map(self, per_token: Callable[[torch.Tensor], torch.Tensor],
            per_sample: Callable[[torch.Tensor], torch.Tensor]) -> Extra:
        return Extra((per_token if self.per == "token" else per_sample)(self.values),
                     self.per)


class Extras(dict[str, Extra]):
    """name -> Extra; indexing by rows (`extras[rows]`, as a [B] tensor is indexed) picks
    those rows of every tensor, so code that re-rows a batch field by field carries them."""

    def __getitem__(self, key):  # a name: its Extra; rows: the Extras of those rows
        if isinstance(key, str):
            return super().__getitem__(key)
        return self.map(lambda t: t[key], lambda t: t[key])

    def map(self, per_token: Callable[[torch.Tensor], torch.Tensor],
            per_sample: Callable[[torch.Tensor], torch.Tensor]) -> Extras:
        return Extras({name: extra.map(per_token, per_sample) for name, extra in self.items()})


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, L] long
    attention_mask: torch.Tensor  # [B, L] long, 1 on real tokens
    response_mask: torch.Tensor  # [B, L] float, 1 on generated tokens
    # ---- per token, [B, L] float, 0 off the response --------------------------------------
    infer_log_probs: torch.Tensor | None = None  # behaviour policy: recorded by actor_infer
    old_log_probs: torch.Tensor | None = None  # proximal policy: actor_train before the update
    ref_log_probs: torch.Tensor | None = None  # the reference model
    values: torch.Tensor | None = None  # critic's V(s_t) before its update
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None  # GAE / discounted returns (critic target)
    # agentic episodes: each turn's reward on that turn's last model token (gae's rewards)
    turn_rewards: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None  # train/infer mismatch weights, no gradient
    # ---- per sample, [B] ---------------------------------------------------------------
    scores: torch.Tensor | None = None  # reward of the whole response / episode
    version: torch.Tensor | None = None  # policy version that started the sample (long)
    episode: torch.Tensor | None = None  # agentic per-turn rows: episode index, -1 = padding
    episode_return: torch.Tensor | None = None  # agentic: the episode's discounted return
    anchor: torch.Tensor | None = None  # agentic per-turn rows: GiGPO anchor state, -1 = pad
    truncated: torch.Tensor | None = None  # RLVR: bool, the length limit cut the response
    # ---- per sample, not a tensor -------------------------------------------------------
    # image prompts: each row's image tensors (image_inputs.py), passed to the model with
    # the ids; None: a text batch
    images: RowImages | None = None
    # what one kind's loss reads (module note, "Extras"); empty for RLVR and agentic
    extras: Extras = field(default_factory=Extras)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def map(self, per_token: Callable[[torch.Tensor], torch.Tensor],
            per_sample: Callable[[torch.Tensor], torch.Tensor]) -> TokenBatch:
        """A new batch: `per_token` applied to every [B, L] tensor that is set (the three
        masks included), `per_sample` to every [B] one."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name == "images":  # rows picked as per_sample picks a [B] tensor's
                out[f.name] = value[per_sample(torch.arange(len(self))).cpu()]
            elif f.name == "extras":
                out[f.name] = value.map(per_token, per_sample)
            else:
                out[f.name] = (per_sample if f.name in SAMPLE_FIELDS else per_token)(value)
        return TokenBatch(**out)

    def attach(self, name: str, values: torch.Tensor, per: Literal["token", "sample"]) -> None:
        """Attach a tensor for the loss (module note, "Extras"): per token [B, L, ...] (a
        distillation teacher's top-k: [B, L, k]) or per sample [B, ...]; its shape is
        checked against the batch here, not in the worker."""
        want = tuple(self.input_ids.shape) if per == "token" else (len(self),)
        if tuple(values.shape[:len(want)]) != want:
            raise ValueError(f"extra {name!r} per {per}: expected shape {list(want)} + ..., "
                             f"got {list(values.shape)}")
        self.extras[name] = Extra(values, per)

    def extra(self, name: str) -> torch.Tensor:
        """The tensor attached as `name`; KeyError naming the extras there if none."""
        if name not in self.extras:
            raise KeyError(f"the batch carries no extra {name!r} (it has: "
                           f"{', '.join(self.extras) or 'none'}); the kind's rollout attaches "
                           f"what its loss reads")
        return self.extras[name].values

    def select(self, rows: Rows) -> TokenBatch:
        return self.map(lambda t: t[rows], lambda t: t[rows])

    def chunks(self, size: int) -> list[TokenBatch]:
        """Consecutive row blocks of at most `size` rows."""
        return [self.select(slice(i, i + size)) for i in range(0, len(self), size)]

    def shard(self, n: int) -> list[TokenBatch]:
        """`n` equal contiguous shards, one per data-parallel rank."""
        if len(self) % n:
            raise ValueError(f"batch of {len(self)} rows does not split into {n} equal shards")
        return self.chunks(len(self) // n)

    def to(self, device: torch.device) -> TokenBatch:
        return self.map(lambda t: t.to(device), lambda t: t.to(device))

    def trimmed(self) -> TokenBatch:
        """Drop trailing all-padding columns (saves compute on short responses)."""
        length = int(self.attention_mask.sum(dim=1).max().item())
        return self.map(lambda t: t[:, :length], lambda t: t)


SAMPLE_FIELDS = frozenset({"scores", "version", "episode", "episode_return", "anchor",
                           "truncated"})


def pack_sequences(
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    infer_log_probs: list[list[float]] | None = None,
    images: RowImages | None = None,
) -> TokenBatch:
    """Right-pad prompt+response rows; the sampled log-probs land on the response columns.

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
    batch = TokenBatch(input_ids, attention_mask, response_mask, images=images)
    if infer_log_probs is not None:
        if any(len(v) != len(r) for v, r in zip(infer_log_probs, responses)):
            raise ValueError("infer_log_probs: need one value per response token in every row")
        batch.infer_log_probs = torch.tensor(
            [[0.0] * len(p) + list(v) + [0.0] * (width - len(p) - len(v))
             for p, v in zip(prompts, infer_log_probs)], dtype=torch.float32)
    return batch
