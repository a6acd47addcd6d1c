"""`model_args.freeze_module_prefix` on the train backends that take it (hf_train,
deepspeed_train): ROLL's VL configs freeze the vision tower this way."""

from __future__ import annotations

import torch


def freeze_modules(model: torch.nn.Module, prefixes: str) -> None:
    """`model_args.freeze_module_prefix`: the parameters under each comma-separated prefix
    stop training (the optimizer is built over trainable parameters only: train_loop.py).
    A prefix matches at the start of a dotted name or after a dot, so ROLL's
    "vision_model" takes a HF model's model.vision_model.*."""
    wanted = [p.strip().rstrip(".") for p in prefixes.split(",") if p.strip()]
    named = list(model.named_parameters())
    for prefix in wanted:
        hits = [p for name, p in named if f".{prefix}." in f".{name}."]
        if not hits:
            raise ValueError(f"model_args.freeze_module_prefix: '{prefix}' matches no "
                             f"parameter of the model (names start like "
                             f"{', '.join(sorted({n.split('.')[0] for n, _ in named}))})")
        for param in hits:
            param.requires_grad_(False)
