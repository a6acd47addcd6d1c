"""A LoRA adapter on a Hugging Face causal LM, with PEFT: built, merged for a sync, saved.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv
2106.09685, eq. 3) freezes a weight W0 [d, k] and trains h = W0 x + (alpha / r) B A x with
A [r, k] (random) and B [d, r] (zeros at the start, so the adapted model starts as the
base). What the keys mean is `config/lora_args.py`; PEFT builds the layers.

Precision: the frozen base stays in `model_args.dtype` (bf16 holds half of fp32's bytes
and needs no master copy: it never changes), while A, B and every module trained in
full (`additional_target`) are fp32, as hf_train's masters are (mixed_precision.py: an
AdamW step of lr 1e-6 vanishes in bf16), and the forward runs under the same autocast.

What this module refuses, with the model in hand (ConfigError, key path of the role):
- a target that is tied to another module (SmolLM2's lm_head is embed_tokens' weight):
  an adapter on one half would make the pair differ, which a tied model cannot hold
  and a weight sync (which sends the tied tensor once) would silently undo;
- an adapter folder (`adapter_name_or_path`) whose rank, alpha, targets or fully
  trained modules differ from the config's.

The reference policy of a KL term is the policy RL starts from (InstructGPT, Ouyang et al.
2022 §3.5: the SFT model; GRPO, arXiv 2402.03300 §4.1: the initial policy). With a fresh
adapter that is the base model, so the reference disables the adapter. Started from an
adapter folder (`adapter_name_or_path`, an SFT adapter), it is base + that adapter: a
frozen copy of it is kept as a second PEFT adapter (`REFERENCE`, the same dtypes as the
trained one, so at step 0 it is the trained adapter exactly) and the reference's forward
runs with it active (`reference_adapter_active`). The copy costs the adapter's size once
more (and each `additional_target` module's); syncs, checkpoints and saved folders hold
the trained adapter alone.

Gradient checkpointing: the frozen embedding's output needs no gradient, so a reentrant
checkpoint of the first layer would see no input requiring one and leave every adapter
inside without a gradient (ROLL #307). Nothing here has to act: transformers 5
checkpoints non-reentrantly by default, and both it (`gradient_checkpointing_enable`)
and PEFT (`get_peft_model` on a checkpointing model) make the embedding's output require
a gradient. tests/workers/test_lora.py holds that a checkpointed step equals a plain one.

Weight sync, as `model_args.lora_sync` says: `merged_weights` sends W0 + (alpha / r) B A
for each adapted weight, under the base names, in the same format as a full fine-tune's
sync, so any infer backend takes it; `adapter_weights` sends only A and B under the names
PEFT saves them with, which vllm serves as a LoRA adapter (vllm_adapters.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils import (
    ModulesToSaveWrapper,
    get_peft_model_state_dict,
    set_peft_model_state_dict,
)
from safetensors.torch import load_file

from flywheel.config.lora_args import lora_alpha, lora_targets, module_names
from flywheel.config.schema import ModelArgs
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.strategies.hf_model import distinct_state_tensors

ADAPTER = "default"  # PEFT's name for a model's one adapter
REFERENCE = "reference"  # the frozen starting adapter, when one was loaded
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # what PeftModel.save_pretrained writes
KEY = "model_args"  # key paths are the role's (the config check prefixes the role)


def lora_config(args: ModelArgs) -> LoraConfig:
    return LoraConfig(
        r=args.lora_rank, lora_alpha=lora_alpha(args), lora_dropout=args.lora_dropout,
        target_modules=lora_targets(args.lora_target),
        modules_to_save=module_names(args.additional_target or "") or None,
        bias="none", task_type="CAUSAL_LM")


def add_adapter(model: torch.nn.Module, args: ModelArgs) -> PeftModel:
    """`model` (loaded in `args.dtype`) with LoRA layers injected in place: only the
    adapter (and `additional_target`) trainable, in fp32; the adapter from
    `adapter_name_or_path` when set, else freshly initialised (B = 0)."""
    tied = tied_module_names(model)
    peft_model = get_peft_model(model, lora_config(args))
    for name in trained_module_names(peft_model):
        if name in tied:
            key = "lora_target" if name in peft_model.base_model.targeted_module_names else (
                "additional_target")
            raise ConfigError("", f"{KEY}.{key}", f"reaches {name}, whose weight is tied to "
                                                  f"{', '.join(sorted(tied[name]))}: training "
                                                  f"one of a tied pair would split it; leave "
                                                  f"it out (all-linear already does)")
    for param in peft_model.parameters():
        if param.requires_grad:
            param.data = param.data.float()
    if args.adapter_name_or_path:
        check_adapter_folder(args.adapter_name_or_path, peft_model.peft_config[ADAPTER])
        load_adapter(peft_model, args.adapter_name_or_path)
        keep_starting_adapter(peft_model, args.adapter_name_or_path)
    return peft_model


@torch.no_grad()
def keep_starting_adapter(peft_model: PeftModel, path: str) -> None:
    """A frozen copy of the adapter at `path` as adapter `REFERENCE`, each tensor in its
    trained counterpart's dtype (the fp32 masters), so it equals the starting policy."""
    peft_model.load_adapter(path, adapter_name=REFERENCE, is_trainable=False)
    named = dict(peft_model.named_parameters())
    for name, param in named.items():
        if f".{REFERENCE}." in name:
            param.requires_grad_(False)
            twin = named.get(name.replace(f".{REFERENCE}.", f".{ADAPTER}."))
            if twin is not None and twin.dtype != param.dtype:
                param.data = param.data.to(twin.dtype)


def save_adapter(peft_model: PeftModel, path: str) -> None:
    """The trained adapter's PEFT folder (never the frozen starting copy)."""
    peft_model.save_pretrained(path, selected_adapters=[ADAPTER])


def has_reference_adapter(peft_model: PeftModel) -> bool:
    return REFERENCE in peft_model.peft_config


@contextmanager
def reference_adapter_active(peft_model: PeftModel) -> Iterator[None]:
    """The starting adapter in place of the trained one, for a no-grad forward; every
    parameter's requires_grad as before afterwards (PEFT's set_adapter changes them)."""
    flags = [(p, p.requires_grad) for p in peft_model.parameters()]
    peft_model.set_adapter(REFERENCE)
    try:
        yield
    finally:
        peft_model.set_adapter(ADAPTER)
        for param, flag in flags:
            param.requires_grad_(flag)


def tied_module_names(model: torch.nn.Module) -> dict[str, set[str]]:
    """module name -> the other modules holding the same weight tensor (lm_head and
    embed_tokens of a model with tied embeddings)."""
    holders: dict[int, list[str]] = {}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor):
            holders.setdefault(id(weight), []).append(name)
    return {name: set(names) - {name} for names in holders.values() if len(names) > 1
            for name in names}


def trained_module_names(peft_model: PeftModel) -> list[str]:
    """The modules the adapter changes: LoRA layers and fully trained copies."""
    return [name.removeprefix("base_model.model.")
            for name, module in peft_model.named_modules()
            if isinstance(module, BaseTunerLayer | ModulesToSaveWrapper)]


def check_adapter_folder(path: str, wanted: LoraConfig) -> None:
    """The adapter at `path` was trained with this config's rank, alpha and targets."""
    found = LoraConfig.from_pretrained(path)
    for key, ours, theirs in (
            ("lora_rank", wanted.r, found.r), ("lora_alpha", wanted.lora_alpha,
                                               found.lora_alpha),
            ("lora_target", _as_set(wanted.target_modules), _as_set(found.target_modules)),
            ("additional_target", _as_set(wanted.modules_to_save),
             _as_set(found.modules_to_save))):
        if ours != theirs:
            raise ConfigError("", f"{KEY}.{key}", f"is {ours!r} but the adapter at {path} "
                                                  f"was trained with {theirs!r}: write that")


def _as_set(value: str | list[str] | set[str] | None) -> str | set[str]:
    return value if isinstance(value, str) else set(value or ())


def load_adapter(peft_model: PeftModel, path: str) -> None:
    """The adapter weights saved by `PeftModel.save_pretrained(path)`, exactly (every
    adapter tensor present, nothing else), copied into the fp32 parameters."""
    weights = load_file(os.path.join(path, ADAPTER_WEIGHTS))
    result = set_peft_model_state_dict(peft_model, weights, adapter_name=ADAPTER)
    adapter_keys = {k for k, p in peft_model.named_parameters() if p.requires_grad}
    missing = sorted(set(result.missing_keys) & adapter_keys)
    if missing or result.unexpected_keys:
        raise ValueError(f"adapter {path} does not match the model: missing {missing}, "
                         f"unexpected {result.unexpected_keys}")


@torch.no_grad()
def merged_weights(model: torch.nn.Module, dtype: torch.dtype,
                   named: list[tuple[str, torch.Tensor]] | None = None
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """The weights of `model` (a PEFT-injected HF model) with the adapter merged, under
    the base model's names, in `dtype`, one tensor at a time, a tied tensor once: for
    each adapted weight W0 + (alpha / r) B A (arXiv 2106.09685 §4.1, computed as PEFT's
    `merge` does), for a fully trained module its trained copy. `named`: a run of the
    model's distinct state tensors to merge (default: all of them), for a backend that
    gathers partitioned parameters run by run."""
    for name, tensor in named if named is not None else distinct_state_tensors(model):
        merged = merged_tensor(model, name, tensor, dtype)
        if merged is not None:
            yield merged


def merged_tensor(model: torch.nn.Module, name: str, tensor: torch.Tensor,
                  dtype: torch.dtype) -> tuple[str, torch.Tensor] | None:
    """One state tensor of `model` as the merged model holds it (base name, `dtype`), or
    None for a tensor the merged model has no place for. Reads `merge_inputs(model, name)`
    besides `tensor`: a backend whose parameters are partitioned (ZeRO-3) gathers both."""
    if ".lora_" in name or ".original_module." in name or \
            f".modules_to_save.{REFERENCE}." in name:
        return None  # A, B themselves; the frozen copies of a fully trained module
    if ".base_layer." in name:
        owner, leaf = name.split(".base_layer.")
        if leaf == "weight":
            tensor = tensor + model.get_submodule(owner).get_delta_weight(ADAPTER)
        name = f"{owner}.{leaf}"
    return name.replace(f".modules_to_save.{ADAPTER}.", "."), tensor.detach().to(dtype)


@torch.no_grad()
def adapter_weights(peft_model: PeftModel, dtype: torch.dtype
                    ) -> Iterator[tuple[str, torch.Tensor]]:
    """A and B of every adapted module, in `dtype`, under the names of PEFT's
    adapter_model.safetensors (`base_model.model.<module>.lora_A.weight`): an adapter
    folder's contents, what vLLM loads."""
    for name, tensor in get_peft_model_state_dict(peft_model, adapter_name=ADAPTER).items():
        yield name, tensor.detach().to(dtype)


def merge_inputs(model: torch.nn.Module, name: str) -> list[torch.nn.Parameter]:
    """The parameters besides state tensor `name` that its merged value reads: A and B of
    an adapted weight (none for any other tensor)."""
    if not name.endswith(".base_layer.weight"):
        return []
    layer = model.get_submodule(name.removesuffix(".base_layer.weight"))
    return [layer.lora_A[ADAPTER].weight, layer.lora_B[ADAPTER].weight]
