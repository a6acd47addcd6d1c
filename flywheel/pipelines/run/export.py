"""`platform export CHECKPOINT_OR_RUN_DIR -o OUT_DIR`: a checkpoint as one Hugging Face model
folder for serving (safetensors, config, tokenizer), loadable by transformers (the class the
run's backends load: `AutoModelForCausalLM`, an image-text one), by vLLM, and by flywheel as a
`pretrain:`.

Why a command: a LoRA checkpoint holds only the adapter (`actor_train/adapter`, a PEFT
folder) and relies on the run's own base model, named in the run's config.yaml; a serving
stack wants one folder. A full fine-tune's checkpoint holds its weights as fp32 masters
without a tokenizer. Both become the same thing here.

What a checkpoint may hold (first match wins):
- `actor_train/adapter/` (an RL run with LoRA): the base of the run's actor_train
  (`model_args.model_name_or_path`, else `pretrain`) with the adapter merged, each adapted
  weight W0 + (alpha / r) B A exactly as the weight sync computes it (workers/strategies/
  lora.py `merged_weights`), so the folder is what actor_infer served;
- `actor_train/model/` (an RL run, full fine-tuning): those weights;
- `adapter/` (an SFT run with LoRA) and the checkpoint itself (an SFT run: already a model
  folder) likewise.
The weights are written in `model_args.dtype` of the run's actor_train (the dtype the run
served) unless `dtype` says otherwise; the tokenizer (and an image-text model's processor
files) are the base model's. A Qwen3-Omni run trained the thinker alone: its folder is the
full Omni checkpoint again, the base's talker and code2wav copied unchanged
(workers/strategies/omni_thinker.py `as_full_checkpoint`).

What it does not do: shard, quantise, or export the critic or a reward model.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from flywheel.config.schema import PipelineConfig
from flywheel.platform.checkpoint import MARKER, complete_checkpoints

ROLE = "actor_train"
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
RUN_CONFIG = "config.yaml"


class ExportError(ValueError):
    """Input `platform export` cannot use; the message is the user's one line."""


@dataclass(frozen=True)
class Trained:
    """What a checkpoint holds of the policy: an adapter folder or a model folder."""
    kind: str  # "adapter" or "model"
    path: Path


def find_checkpoint_dir(source: Path) -> Path:
    """`source` if it is a complete checkpoint, else a run directory's newest one."""
    if (source / MARKER).exists():
        return source
    if not source.is_dir():
        raise ExportError(f"{source}: no such directory (give a checkpoint-<step> folder "
                          f"or a run directory)")
    found = complete_checkpoints(source)
    if not found:
        raise ExportError(f"{source}: neither a complete checkpoint (no {MARKER} file) nor "
                          f"a run directory holding one")
    return found[-1][1]


def trained_part(checkpoint: Path) -> Trained:
    for kind, path in (("adapter", checkpoint / ROLE / "adapter"),
                       ("model", checkpoint / ROLE / "model"),
                       ("adapter", checkpoint / "adapter"),
                       ("model", checkpoint)):
        if (path / ("adapter_config.json" if kind == "adapter" else "config.json")).exists():
            return Trained(kind, path)
    raise ExportError(f"{checkpoint}: holds no policy weights (looked for {ROLE}/adapter/, "
                      f"{ROLE}/model/, adapter/ and a model's config.json)")


def run_config(checkpoint: Path) -> PipelineConfig:
    """The config of the run that wrote `checkpoint` (its run directory's config.yaml)."""
    path = checkpoint.parent / RUN_CONFIG
    if not path.exists():
        raise ExportError(f"{path}: missing; export needs the run's config.yaml beside its "
                          f"checkpoints (it names the base model)")
    from flywheel.pipelines.config import load_config

    return load_config(str(path), [])


def export(source: Path, out: Path, dtype: str | None = None) -> Path:
    """The merged model folder of `source`'s checkpoint at `out` (written beside, then
    renamed, so a killed export leaves no half folder); returns the checkpoint exported."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    from flywheel.pipelines.roles.roles import actor_train_model
    from flywheel.platform.models.builtin import resolve_pretrain
    from flywheel.workers.strategies.hf_model import TORCH_DTYPES, load_tokenizer
    from flywheel.workers.strategies.omni_thinker import as_full_checkpoint, is_omni

    hf_logging.disable_progress_bar()  # the command prints one line of its own
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out}: exists and is not empty; pick a new output folder")
    checkpoint = find_checkpoint_dir(source)
    part = trained_part(checkpoint)
    cfg = run_config(checkpoint)
    base = actor_train_model(cfg, resolve_pretrain(cfg.pretrain))
    torch_dtype = TORCH_DTYPES[dtype or cfg.actor_train.model_args.dtype]
    model = (merged_model(base, part.path, torch_dtype) if part.kind == "adapter"
             else _load(part.path, torch_dtype))
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    load_tokenizer(base).save_pretrained(tmp)
    copy_processor_files(base, tmp)
    if is_omni(AutoConfig.from_pretrained(base)):  # the talker and code2wav, unchanged
        as_full_checkpoint(tmp, base)
    if out.exists():
        out.rmdir()
    os.replace(tmp, out)
    return checkpoint


def merged_model(base: str, adapter: Path, dtype: torch.dtype) -> torch.nn.Module:
    """The base model at `base` with the PEFT adapter at `adapter` merged in, in `dtype`."""
    from peft import PeftModel

    from flywheel.workers.strategies.lora import merged_weights

    model = _load(base, dtype)
    peft_model = PeftModel.from_pretrained(model, str(adapter))  # injects into `model`
    merged = dict(merged_weights(model, dtype))
    plain = peft_model.unload()  # the base's own modules again, unmerged
    missing, unexpected = plain.load_state_dict(merged, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # a tied head comes once
        raise ExportError(f"{adapter}: the merged weights do not fit the base {base}: "
                          f"missing {missing}, unexpected {unexpected}")
    return plain


def _load(path: str | Path, dtype: torch.dtype) -> torch.nn.Module:
    """As the run's backends load it: a causal LM, an image-text model, Qwen3-Omni's
    thinker (hf_model.load_pretrained)."""
    from flywheel.workers.strategies.hf_model import load_pretrained

    return load_pretrained(str(path), dtype=dtype)


def copy_processor_files(base: str, out: Path) -> None:
    """The base's image processor files (an image-text model's), beside the tokenizer's:
    flywheel's image prompts load the processor from the model folder."""
    from flywheel.workers.strategies.omni_thinker import base_file

    for name in PROCESSOR_FILES:
        found = base_file(base, name, required=False)
        if found is not None:
            shutil.copyfile(found, out / name)
