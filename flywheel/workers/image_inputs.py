"""A prompt's image inputs as the HF backends take them, per row of a batch (issue 29).

What it owns: the processor's image tensors of each row (pipelines/data/image_prompts.py
`ImagePrompt.features`, computed for that prompt alone: a batch of one), carried beside the
token ids, and their collation into one model call's keyword arguments. What it does not:
decoding images (image_files.py), token ids (the prompt's ids already hold the image tokens
expanded). A generation request carries a `PromptImages` per prompt: the tensors for
hf_infer, and for vllm the PIL images with the `engine_ids` it expands itself
(pipelines/data/image_prompts.py says why the two id forms).

Why per row: rows of a batch have different numbers and sizes of images, and a batch is
cut, selected, resharded and reordered by row (TokenBatch.select / chunks / shard), so each
row keeps its own tensors and `model_inputs` collates the rows in the batch at the moment of
a forward or a `generate`, as the model's processor would for that batch:

- a tensor with a per-sample leading dimension and an image axis (Idefics3 / SmolVLM
  `pixel_values` [1, images, 3, H, W] and `pixel_attention_mask` [1, images, H, W]): padded
  with zeros to the largest image count and size of the batch, then stacked; a row with no
  image gets all-zero images, which Idefics3 drops as padding (its `get_image_features`);
- a flat tensor over the images or patches of the row (Qwen2-VL `pixel_values` [patches, D],
  `image_grid_thw` [images, 3]): concatenated in row order, which is the order of the image
  tokens in the flattened ids; a row with no image adds nothing.
The two are told apart by the key and rank (`BATCHED`), not by guessing from sizes.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from flywheel.workers.strategies.wrapped_model import hf_core

# key -> rank of a per-sample tensor with an image axis (Idefics3 family)
BATCHED = {"pixel_values": 5, "pixel_attention_mask": 4}

Features = dict[str, torch.Tensor]


@dataclass
class PromptImages:
    """One image prompt's inputs as every generation backend takes them, beside its
    `prompt_ids` (image tokens expanded: what the trainer scores)."""

    features: Features  # the processor's image tensors (HF backends)
    images: list[Any] = field(default_factory=list)  # bounded PIL images (vLLM)
    engine_ids: list[int] = field(default_factory=list)  # one placeholder per image (vLLM)
    # len(prompt_ids): where the expanded prompt ends in a request's ids (vLLM swaps
    # those for engine_ids and keeps what follows: a partial rollout's tokens so far)
    expanded_length: int = 0


@dataclass
class RowImages:
    """Per row of a TokenBatch: that row's image tensors, or None for a text row."""

    rows: list[Features | None]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: slice | torch.Tensor | list[int]) -> RowImages:
        if isinstance(index, slice):
            return RowImages(self.rows[index])
        picked = index.tolist() if isinstance(index, torch.Tensor) else list(index)
        return RowImages([self.rows[i] for i in picked])

    @classmethod
    def of(cls, prompts: list[PromptImages | None]) -> RowImages:
        return cls([p.features if p is not None else None for p in prompts])

    def repeat(self, n: int) -> RowImages:
        """Each row n times in a row (a prompt's n samples)."""
        return RowImages([row for row in self.rows for _ in range(n)])

    def model_inputs(self, device: torch.device | str = "cpu") -> Features:
        """The keyword arguments of one model call over these rows; {} without images."""
        present = [row for row in self.rows if row]
        if not present:
            return {}
        return {key: collate(key, [row.get(key) if row else None for row in self.rows],
                             present[0][key]).to(device)
                for key in present[0]}


def collate(key: str, parts: list[torch.Tensor | None], example: torch.Tensor) -> torch.Tensor:
    """One key's tensors of every row as one batch tensor (module doc)."""
    if BATCHED.get(key) != example.dim():
        return torch.cat([p for p in parts if p is not None])
    shape = [max(p.shape[d] for p in parts if p is not None) for d in range(1, example.dim())]
    out = []
    for p in parts:
        if p is None:
            out.append(example.new_zeros(1, *shape))
            continue
        pad = []  # F.pad's order: last dimension first, (before, after) each
        for d in reversed(range(1, example.dim())):
            pad += [0, shape[d - 1] - p.shape[d]]
        out.append(F.pad(p, pad))
    return torch.cat(out)


def token_types(model: torch.nn.Module, input_ids: torch.Tensor) -> Features:
    """`mm_token_type_ids` (1 at an image token, 0 elsewhere) for a model whose forward
    reads it, else {}. Why: Qwen2-VL's family builds its 3-D rotary positions (multimodal
    RoPE, Wang et al. 2024, arXiv:2409.12191) only when given them; without them
    transformers 5.x silently gives every token 1-D positions, on the trainer and in
    `generate` alike, so the two agree with each other and not with the model (nor with
    vLLM, which places the image patches by their grid). `input_ids`: the ids the model
    embeds, with sampled image tokens already read as text (hf_model.py
    `generated_image_tokens_as_text`): only a prompt's image tokens are images."""
    core = hf_core(model)  # a DeepSpeed engine's config and forward are not the model's
    image_id = getattr(core.config, "image_token_id", None)
    if image_id is None or "mm_token_type_ids" not in inspect.signature(
            core.forward).parameters:
        return {}
    return {"mm_token_type_ids": (input_ids == image_id).int()}
