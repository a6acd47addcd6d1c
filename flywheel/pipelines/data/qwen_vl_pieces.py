"""Qwen2-VL / Qwen2.5-VL (and Qwen3-Omni) image prompts where their processor class cannot
be built: the same outputs for text and images, from the two pieces that do build.

Why: in transformers 5.19 without torchvision (this machine; the Makefile removes PyPI's
CUDA build), `Qwen2VLProcessor(...)` and `Qwen2_5_VLProcessor(...)` fail in their argument
check (the video processor slot is looked up in a mapping that exists only with
torchvision), even with no video processor, and `AutoProcessor` on a checkpoint fails
loading `Qwen2VLVideoProcessor`. The tokenizer and the PIL image processor
(`Qwen2VLImageProcessorPil`) load and run. With torchvision (GPU machines)
`load_vl_processor` returns transformers' own processor.

What `QwenVLPieces` does, as the real processor does for images: the image processor gives
`pixel_values` and `image_grid_thw` (t, h, w patches); each `<|image_pad|>` in the text, in
order, becomes grid_t * grid_h * grid_w / merge_size**2 pads (transformers'
`Qwen2VLProcessor.replace_image_token`), then the tokenizer runs. Videos are refused. It has
the attributes image_prompts.py uses (`apply_chat_template`, `tokenizer`, `__call__`).
bench/vl_feasibility.py runs Qwen2.5-VL's HF model on its output: the model checks that
the pad count equals its image features.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE_PAD = "<|image_pad|>"
# Checked here with Qwen2.5-VL's HF model (bench/vl_feasibility.py) and Qwen3-Omni's thinker
# (tests/workers/test_omni_thinker.py: its processor expands `<|image_pad|>` the same way,
# from the Qwen2-VL image processor of its checkpoint, 16 px patches); Qwen3-VL's processor
# is not (its image processor differs), so it is not taken over.
QWEN_VL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_omni_moe")


@dataclass
class QwenVLPieces:
    tokenizer: Any  # the checkpoint's tokenizer (its chat template writes the vision tokens)
    image_processor: Any  # Qwen2VLImageProcessorPil (merge_size, patch grid)

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> Any:
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def __call__(self, text: list[str], images: list[list[Any]] | None = None,
                 videos: Any = None, return_tensors: str | None = "pt", **text_kwargs: Any):
        """Like the processor: `images[i]` are the images of `text[i]`, in order."""
        if videos is not None:
            raise ValueError("video inputs need transformers' Qwen-VL processor (torchvision)")
        flat = [image for group in images or [] for image in group]
        features: dict[str, Any] = {}
        if flat:
            features = dict(self.image_processor(images=flat, return_tensors=return_tensors))
        per_image = [int(grid.prod()) // self.image_processor.merge_size ** 2
                     for grid in features.get("image_grid_thw", [])]
        marks = sum(sample.count(IMAGE_PAD) for sample in text)
        if marks != len(per_image):
            raise ValueError(f"{len(per_image)} image(s) but {marks} {IMAGE_PAD} marks")
        counts = iter(per_image)
        expanded = ["".join(piece if i == 0 else IMAGE_PAD * next(counts) + piece
                            for i, piece in enumerate(sample.split(IMAGE_PAD)))
                    for sample in text]
        return {**self.tokenizer(expanded, return_tensors=return_tensors, **text_kwargs),
                **features}


def load_vl_processor(folder: str | Path) -> Any:
    """transformers' `AutoProcessor` for the checkpoint; for a Qwen2-VL / Qwen2.5-VL
    checkpoint without torchvision (AutoProcessor fails: its video processor requires it),
    its `QwenVLPieces`."""
    from transformers import AutoConfig, AutoImageProcessor, AutoProcessor, AutoTokenizer
    model_type = AutoConfig.from_pretrained(folder).model_type
    if model_type in QWEN_VL_TYPES and importlib.util.find_spec("torchvision") is None:
        return QwenVLPieces(AutoTokenizer.from_pretrained(folder),
                            AutoImageProcessor.from_pretrained(folder))
    return AutoProcessor.from_pretrained(folder)
