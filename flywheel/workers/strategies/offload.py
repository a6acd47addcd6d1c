"""Freeing a backend's device memory between the phases of a colocated run.

When actor_train and actor_infer share devices (synchronous runs,
pipelines/loop/phase_switch.py), each phase needs the memory the other phase's role holds:
the engine sleeps while training runs, and training moves its state off the device while
the engine generates. A training role goes in two parts, so the weight sync can still
read the parameters after the optimizer state has gone:

  OPTIMIZER  optimizer state and gradients: unused from the end of one train step to the
             start of the next
  MODEL      the parameters: read by the weight sync, so they go after it

These helpers do it for a plain torch module and optimizer (hf_train, megatron_train;
deepspeed_train uses DeepSpeed's own `offload_states`). Where the device is the CPU
there is nothing to free: the call still happens, in order, and says it did nothing.

On an H100 (bench/gpu_checks.py, 0.72B bf16 model): hf_train held 5.5 GiB after a train
step, 1.4 after the optimizer part, 0.06 after the model part; the train step after
`onload_torch` was bit-identical to one that never offloaded. Those figures predate
hf_train's fp32 master weights (mixed_precision.py): its parameters, gradients and AdamW
state are now fp32 under bf16 too, about twice as many bytes, not yet measured there.
"""

from __future__ import annotations

import torch

OPTIMIZER = "optimizer"
MODEL = "model"
PARTS = (OPTIMIZER, MODEL)
CPU_NOTE = "no-op on cpu: nothing on an accelerator to free"


def check_part(part: str) -> None:
    if part not in PARTS:
        raise ValueError(f"offload part must be one of {PARTS}, got {part!r}")


def on_accelerator(device: torch.device) -> bool:
    return device.type != "cpu"


def move_optimizer_state(optimizer: torch.optim.Optimizer | None, device: torch.device) -> int:
    """Every state tensor of `optimizer` to `device`; bytes moved. Scalar tensors (Adam's
    `step`) stay where they are: torch keeps them on the CPU unless `capturable`, and
    refuses a CUDA step otherwise."""
    moved = 0
    for state in (optimizer.state.values() if optimizer is not None else ()):
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.device != device:
                state[key] = value.to(device, non_blocking=True)
                moved += value.numel() * value.element_size()
    return moved


def drop_grads(model: torch.nn.Module) -> None:
    """Gradients are zeroed (set to None) at the start of every train step anyway."""
    for param in model.parameters():
        param.grad = None


def offload_torch(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                  part: str, device: torch.device) -> str:
    """`part` of a torch model and optimizer off `device`; what happened, in words."""
    check_part(part)
    if not on_accelerator(device):
        return CPU_NOTE
    if part == OPTIMIZER:
        drop_grads(model)
        moved = move_optimizer_state(optimizer, torch.device("cpu"))
        note = f"gradients freed, optimizer state to cpu ({moved >> 20} MiB)"
    else:
        model.to("cpu")  # in place: the optimizer's references stay valid
        note = "parameters to cpu"
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return note


def onload_torch(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                 device: torch.device) -> str:
    """Parameters and optimizer state back onto `device` (a no-op for what is there)."""
    if not on_accelerator(device):
        return CPU_NOTE
    model.to(device)
    moved = move_optimizer_state(optimizer, device)
    torch.cuda.synchronize(device)
    return f"parameters and optimizer state ({moved >> 20} MiB) to {device}"
