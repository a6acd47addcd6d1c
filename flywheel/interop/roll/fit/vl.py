"""ROLL's vision-language RLVR files on convert: the data they read, and whether the
converted run can take their images.

Which files: ROLL runs a VL file with its VL pipeline (start_rlvr_vl_pipeline.py), picked
by the launcher, not by a key; the file shows it by a detection reward
(DetectionRewardWorker), an image key in actor_train's data_args (image_folder,
image_max_pixels, image_min_pixels) or a `custom_data_kwargs_func` (`is_vl`).

The data (ROLL's VL data function, roll/datasets/vlm_dataset_utils.py, behaviour only):
unset, `custom_data_kwargs_func` is `get_vlm_data_kwargs`, which reads fixed columns
whatever data_args' column keys say: the prompt from `prompt` (a list of chat messages;
a plain string it wraps in its own question template, which flywheel does not: the
`messages` column refuses a string loudly rather than sending another prompt), the images
from `images`, the answer from `reward_model.ground_truth` and the tag from `data_source`.
`fit_vl_columns` writes those as flywheel's data_args (messages, response, tag; images is
flywheel's image_key default). ROLL's other data functions read video (Video-R1) or audio
(its Omni audio test); flywheel has neither: `data_function` refuses them by name.

The backends: flywheel's images reach hf_train (actor_train, reference) with hf_infer or
vllm (derived.takes_images); megatron_train, deepspeed_train and sglang take text alone.
A VL file whose converted backends do not take images is refused (`check_images`): its
records carry images, and the run would stop at its first batch. The same for
`freeze_module_prefix`: ROLL freezes on every training backend, flywheel's hf_train alone
(config/acts_when/table.py FREEZE), so a prefix on another backend would train the frozen tower.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

from flywheel.config.derived import lora_on, takes_image_inputs, takes_images
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.conversion import to_config
from flywheel.platform.config.errors import ConfigError, KeyPath
from flywheel.workers.strategies.registry import backends_with

# The backends whose forwards / requests carry image tensors (their registry entries' flag).
IMAGE_TRAIN_BACKENDS = backends_with(takes_image_inputs, "train")
IMAGE_INFER_BACKENDS = backends_with(takes_image_inputs, "infer")

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

DATA_BLOCKS = ("actor_train", "validation")
IMAGE_KEYS = ("image_folder", "image_max_pixels", "image_min_pixels")
DETECTION = "DetectionRewardWorker"
_UTILS = "roll.datasets.vlm_dataset_utils."
# ROLL's data functions: name -> None (its default: the image layout below) or why not
DATA_FUNCTIONS: dict[str, str | None] = {
    _UTILS + "get_vlm_data_kwargs": None,
    _UTILS + "video_r1_get_data_kwargs": "video inputs (ROLL's Video-R1 data function: "
                                         "flywheel's prompts take images, not video)",
    _UTILS + "audio_test_get_data_kwargs": "audio inputs (ROLL's audio data function: "
                                           "flywheel's prompts take images, not audio)",
}
# ROLL's DetectionVerifier thresholds (pack_for_iou_score), averaged when DET_IOU_THRESHOLD
# is unset; the same list as workers/rewards/detection.py's (platform/ imports no worker)
ROLL_IOU_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
# What ROLL's default VL data function reads: flywheel data_args key -> column
VL_COLUMNS = {"messages": "prompt", "response": "reward_model.ground_truth",
              "tag": "data_source"}


def is_vl(data: dict[str, Any]) -> bool:
    """Whether ROLL runs this (resolved) file with its VL pipeline (module doc)."""
    rewards = data.get("rewards") if isinstance(data.get("rewards"), dict) else {}
    if any(str((r or {}).get("worker_cls") or "").rsplit(".", 1)[-1] == DETECTION
           for r in rewards.values() if isinstance(r, dict)):
        return True
    args = (data.get("actor_train") or {}).get("data_args") or {}
    return any(args.get(k) is not None for k in (*IMAGE_KEYS, "custom_data_kwargs_func"))


def data_function(data: dict[str, Any], out: Conversion) -> dict[str, Any]:
    """`data` with each block's `custom_data_kwargs_func` taken out where it is ROLL's
    default VL data function (said) or refused by name (video, audio); an unknown one is
    left for its rule (a custom data function: missing)."""
    data = dict(data)
    for block in DATA_BLOCKS:
        args = (data.get(block) or {}).get("data_args")
        name = args.get("custom_data_kwargs_func") if isinstance(args, dict) else None
        if name is None or name not in DATA_FUNCTIONS:
            continue
        where = f"{block}.data_args.custom_data_kwargs_func"
        why = DATA_FUNCTIONS[name]
        if why is None:
            out.mapped.append(f"{where}: {name} is ROLL's own VL data function (its default): "
                              f"the columns it reads are written out (fit/vl.py)")
        else:
            out.missing.append(f"{why} ({where} = {name})")
        data[block] = {**data[block], "data_args": {k: v for k, v in args.items()
                                                    if k != "custom_data_kwargs_func"}}
    return data


def fit_vl_columns(data: dict[str, Any], out: Conversion,
                   written: dict[KeyPath, str]) -> None:
    """Each converted data_args block reads the columns ROLL's VL data function reads
    (`written`: roll_defaults' defaults written out, whose `response` this replaces)."""
    for block in DATA_BLOCKS:
        args = (out.data.get(block) or {}).get("data_args")
        if not isinstance(args, dict):
            continue
        args.pop("prompt", None)
        for key, column in VL_COLUMNS.items():
            given = ((data.get(block) or {}).get("data_args") or {}).get(key)
            if given is not None and given != column:
                out.dropped.append(f"{block}.data_args.{key}: {given!r}: ROLL's VL data "
                                   f"function reads column '{column}' whatever it says")
            args[key] = column
            written.pop((block, "data_args", key), None)
        out.mapped.append(f"{block}.data_args: ROLL's VL data columns -> messages: prompt, "
                          f"response: reward_model.ground_truth, tag: data_source, "
                          f"image_key: images (roll/datasets/vlm_dataset_utils.py)")


def check_images(out: Conversion) -> None:
    """A VL file's converted backends must take images, and freeze where ROLL froze."""
    try:
        cfg = to_config(copy.deepcopy(out.data), PipelineConfig)
    except ConfigError:
        return  # a wrong value: the strict loader names it (roll_convert._validate)
    if not takes_images(cfg):
        train = {r: cfg_role.strategy_args.strategy_name for r, cfg_role in (
            ("actor_train", cfg.actor_train), ("reference", cfg.reference)) if cfg_role}
        layout = ", ".join(f"{r} on {b}" for r, b in train.items())
        out.missing.append(
            f"image prompts with {layout}, actor_infer on "
            f"{cfg.actor_infer.strategy_args.strategy_name} (flywheel's images reach "
            f"{'/'.join(IMAGE_TRAIN_BACKENDS)} with {' or '.join(IMAGE_INFER_BACKENDS)}, no "
            f"critic, no sequence packing; ROLL's VL pipeline feeds this file's images)")
    prefix = cfg.actor_train.model_args.freeze_module_prefix
    backend = cfg.actor_train.strategy_args.strategy_name
    if prefix and (backend not in IMAGE_TRAIN_BACKENDS or lora_on(cfg.actor_train.model_args)):
        out.missing.append(f"freezing modules on {backend} (actor_train.model_args."
                           f"freeze_module_prefix = {prefix!r}: flywheel's "
                           f"{'/'.join(IMAGE_TRAIN_BACKENDS)} freeze, without LoRA; ROLL "
                           f"freezes here too)")


def fit_vl(data: dict[str, Any], out: Conversion, written: dict[KeyPath, str]) -> None:
    """After the backends are final and ROLL's defaults written (roll_defaults.finish),
    before inert keys go."""
    if out.pipeline_type != "rlvr" or not out.vl:
        return
    fit_vl_columns(data, out, written)
    hf_vision_prefix(out)
    check_images(out)


# Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 (image-text models without "VL" in their
# name: transformers' Qwen3_5ForConditionalGeneration and its MoE twin): transformers names
# their vision tower `visual` (model.visual.*); ROLL's Megatron files name it
# `vision_model`, mcore_adapter's module name, which no HF Qwen-VL module has (a prefix
# that matches nothing is refused when the model loads).
QWEN_VL = re.compile(r"qwen[0-9.]*-vl|qwen3\.5-", re.IGNORECASE)
QWEN_VL_NAMES: dict[str, str | None] = {"vision_model": "visual"}
# Qwen3-Omni: flywheel trains its thinker (workers/strategies/omni_thinker.py), whose towers
# transformers names `visual` and `audio_tower` (mcore_adapter: vision_model, audio_model).
# The talker and code2wav are not loaded, so RL never changes them: their prefixes have
# nothing left to freeze and go (None).
QWEN_OMNI = re.compile(r"qwen3[-_.]?omni", re.IGNORECASE)
OMNI_NAMES: dict[str, str | None] = {"vision_model": "visual", "audio_model": "audio_tower",
                                     "talker": None, "code2wav": None}


def hf_vision_prefix(out: Conversion) -> None:
    """actor_train's freeze_module_prefix in transformers' names for a Qwen-VL or
    Qwen3-Omni model (the key goes if nothing is left to freeze)."""
    args = (out.data.get("actor_train") or {}).get("model_args") or {}
    prefix = args.get("freeze_module_prefix")
    model = str(args.get("model_name_or_path") or out.data.get("pretrain") or "")
    names = (OMNI_NAMES if QWEN_OMNI.search(model)
             else QWEN_VL_NAMES if QWEN_VL.search(model) else None)
    if not isinstance(prefix, str) or names is None:
        return
    parts = [p.strip() for p in prefix.split(",") if p.strip()]
    if not any(p in names for p in parts):
        return
    kept = [names.get(p, p) for p in parts if names.get(p, p) is not None]
    gone = [p for p in parts if p in names and names[p] is None]
    if kept:
        args["freeze_module_prefix"] = ",".join(kept)
    else:
        args.pop("freeze_module_prefix")
    why = (f"; {', '.join(gone)}: not in the thinker flywheel trains (never loaded, so "
           f"never trained)" if gone else "")
    out.mapped.append(f"actor_train.model_args.freeze_module_prefix: {prefix} (Megatron's "
                      f"names for {model}'s modules) -> {','.join(kept) or 'unset'} "
                      f"(transformers' names{why})")


def detection_reward_args(name: str, out: Conversion) -> None:
    """ROLL's DetectionRewardWorker reads its settings from each record's `reward_model`
    column (flywheel's detection reward does too) and its IoU threshold from the
    environment (DET_IOU_THRESHOLD, unset: "average" over its thresholds, which flywheel
    never reads from the environment): reward_args gets that average."""
    args = {"iou_thresholds": list(ROLL_IOU_THRESHOLDS)}
    reward = out.data.setdefault("rewards", {}).setdefault(name.split(".", 1)[1], {})
    reward["reward_args"] = {**args, **(reward.get("reward_args") or {})}
    out.mapped.append(f"{name}: ROLL's detection IoU terms averaged over its thresholds -> "
                      f"{name}.reward_args.iou_thresholds (0.5, 0.55, ..., 0.95, 0.99); "
                      f"format_ratio, accuracy_ratio and det_reward_ratio come from each "
                      f"record's reward_model column, as in ROLL")
