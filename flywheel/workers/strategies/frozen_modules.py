"""`model_args.freeze_module_prefix` on the train backends that take it (hf_train,
deepspeed_train): ROLL's VL configs freeze the vision tower this way.

A frozen module never changes, and actor_infer loaded the same checkpoint, so a weight
sync leaves it out (`unfrozen`): the receivers keep their copy (hf_infer.py checks that
only those names are missing; vllm_infer.py's in-place reload keeps the layers it is sent
nothing for). On a VL model that is the whole vision tower, every sync."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch


def prefixes_of(spec: str | None) -> list[str]:
    """The comma-separated prefixes of `freeze_module_prefix` (None or "": none)."""
    return [p.strip().rstrip(".") for p in (spec or "").split(",") if p.strip()]


def under(name: str, prefixes: list[str]) -> bool:
    """A prefix matches at the start of a dotted name or after a dot, so ROLL's
    "vision_model" takes a HF model's model.vision_model.*."""
    return any(f".{prefix}." in f".{name}." for prefix in prefixes)


def freeze_modules(model: torch.nn.Module, spec: str) -> None:
    """`model_args.freeze_module_prefix`: the parameters under each comma-separated prefix
    stop training (the optimizer is built over trainable parameters only: train_loop.py)."""
    named = list(model.named_parameters())
    for prefix in prefixes_of(spec):
        hits = [p for name, p in named if under(name, [prefix])]
        if not hits:
            raise ValueError(f"model_args.freeze_module_prefix: '{prefix}' matches no "
                             f"parameter of the model (names start like "
                             f"{', '.join(sorted({n.split('.')[0] for n, _ in named}))})")
        for param in hits:
            param.requires_grad_(False)


def unfrozen(named: Iterable[tuple[str, torch.Tensor]], spec: str | None
             ) -> Iterator[tuple[str, torch.Tensor]]:
    """What a weight sync sends: every tensor not under a frozen prefix (buffers too)."""
    prefixes = prefixes_of(spec)
    return ((name, t) for name, t in named if not under(name, prefixes))
