"""Qwen3-Omni checkpoints on the HF backends: the thinker is the model flywheel trains.

What a Qwen3-Omni checkpoint is (transformers `qwen3_omni_moe`): a thinker (vision tower
`visual`, audio tower `audio_tower`, MoE text model `model`, `lm_head`) that reads text,
images, audio and video and writes text, and, in the Instruct variant, a talker and a
code2wav vocoder that turn the thinker's output into speech (the Thinking variant has
none). Its top-level class, Qwen3OmniMoeForConditionalGeneration, is registered with no
auto class and has no training forward; its thinker,
Qwen3OmniMoeThinkerForConditionalGeneration, is an image-text-to-text model like Qwen-VL's
(pixel_values, image_grid_thw, 3-D rotary positions computed in its forward).

What flywheel does with one (issue 29): hf_train, deepspeed_train and hf_infer load the
thinker alone from the full checkpoint (its `thinker.*` tensors; the talker and code2wav
are not loaded, so RL never changes them). A saved checkpoint (`actor_train/model/`) is
the thinker alone: its config is the thinker's (`qwen3_omni_moe_thinker`, with a
vision_config), which transformers' AutoModelForImageTextToText and flywheel's
`load_causal_lm` reload. The talker of an Instruct checkpoint stays in the base model's
folder, unchanged. vLLM serves the same thinker from the full checkpoint (its registry maps
Qwen3OmniMoeForConditionalGeneration to its thinker and drops talker/code2wav), and its
weight mapper takes the thinker's own names (`model.`, `lm_head.`, `visual.`,
`audio_tower.`), which is what the weight sync sends.

What it does not: audio or video inputs (the prompts take images: roll_vl.py refuses
ROLL's audio data function), speech output.
"""

from __future__ import annotations

from typing import Any

import torch

# transformers model types whose checkpoint holds a thinker to train
OMNI_TYPES = ("qwen3_omni_moe",)


def is_omni(config: Any) -> bool:
    """Whether a loaded checkpoint config is a Qwen3-Omni (thinker + maybe talker) one."""
    return getattr(config, "model_type", None) in OMNI_TYPES


def load_thinker(path: str, config: Any, **kwargs: Any) -> torch.nn.Module:
    """The thinker of the Qwen3-Omni checkpoint at `path` (`config`: its loaded config),
    its weights read from the checkpoint's `thinker.*` tensors (transformers strips the
    class's base_model_prefix, "thinker"); `kwargs` as for `from_pretrained`."""
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    return Qwen3OmniMoeThinkerForConditionalGeneration.from_pretrained(
        path, config=config.thinker_config, **kwargs)
