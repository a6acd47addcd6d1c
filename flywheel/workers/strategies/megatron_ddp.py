"""megatron_train's gradients and optimizer through megatron-core's own training stack.

Gradients. The model is wrapped in megatron-core's `DistributedDataParallel`: each
parameter's gradient accumulates into a contiguous fp32 buffer (`param.main_grad`), split
into buckets; the buckets are summed over the data-parallel (DP) ranks once per mini-batch
(`calculate_per_token_loss`: a sum, no 1/DP, as the update loop's `counts` expect), by an
all-reduce, or by a reduce-scatter under the distributed optimizer. `overlap_grad_reduce`
launches each bucket's collective from the backward pass as soon as the bucket's last
gradient is in (asynchronously), and `ddp_bucket_size` (elements; Megatron's
`--ddp-bucket-size`) sizes the buckets; without overlap Megatron keeps one bucket and
reduces it after the backward. The schedule then runs megatron's `finalize_model_grads`:
it waits for the DP collectives, sums the norms' gradients over the tensor-parallel ranks
under sequence parallelism (each rank saw 1/TP of the sequence), and the tied embedding's
gradient between the first and last pipeline stage.

Optimizer. Without `use_distributed_optimizer` the optimizer is torch's AdamW over the
whole local parameters (fp32 masters, train_loop.build_adamw), stepped on the reduced
`main_grad`. With it, megatron-core's `DistributedOptimizer` gives each DP rank the
1/DP slice of every bucket it reduced: the same torch AdamW steps only that slice (its
moments are 1/DP of the local parameters'), and the updated slices are all-gathered back
into the full parameters (Rajbhandari et al. 2020, "ZeRO", stage 1 with the gradient
reduce-scatter of stage 2; Megatron's docs/source/distrib_optimizer.md). AdamW is
elementwise, so the slices' update is the whole one.

The update loop's own pieces stay: the fp16 loss scaler and its skip decision
(mixed_precision.py), and the gradient norm, taken here over what each rank holds (the
TP-replicated parameters once, the last stage's tied copy not at all) and summed over
every rank: the model-parallel group without the distributed optimizer, the whole world
with it (each element of a bucket is reduced on exactly one DP rank).

Checkpoints of the distributed optimizer: each rank writes its own slice's AdamW state
(`optimizer_file`), and a resume needs the same TP x PP x DP layout (checked, with a
one-line error otherwise). Megatron's reshardable formats need its dist_checkpointing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads
from megatron.core.optimizer import OptimizerConfig
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

from flywheel.workers.strategies.megatron_weights import is_expert, tp_dim
from flywheel.workers.strategies.offload import (
    CPU_NOTE,
    OPTIMIZER,
    check_part,
    move_optimizer_state,
    offload_torch,
    on_accelerator,
    onload_torch,
)


def wrap_in_ddp(chunks: list[torch.nn.Module], options: dict) -> list[DistributedDataParallel]:
    """Each model chunk in megatron-core's DDP, and their (shared) config told to finish
    the gradients after each mini-batch (and, overlapping, to hold the collectives until
    its last micro-batch). Under the interleaved schedule a rank holds several chunks; as
    Megatron-LM's `get_model` does, every chunk after the first keeps one bucket
    (`disable_bucketing`): its gradients are complete only once the whole backward is."""
    config = chunks[0].config
    ddps = [DistributedDataParallel(
        config, DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=options["overlap_grad_reduce"],
            use_distributed_optimizer=options["use_distributed_optimizer"],
            bucket_size=options["ddp_bucket_size"]), chunk, disable_bucketing=index > 0)
        for index, chunk in enumerate(chunks)]
    # the loss is already a share of the global mini-batch (train_loop `counts`): no
    # division by the schedule's token count, which here counts micro-batches
    config.finalize_model_grads_func = lambda chunks, num_tokens=None, **kw: (
        finalize_model_grads(chunks, None))
    if options["overlap_grad_reduce"]:
        no_sync = [ddp.no_sync for ddp in ddps]
        config.no_sync_func = no_sync[0] if len(no_sync) == 1 else no_sync
    return ddps


def distributed_optimizer(ddps: list[DistributedDataParallel], adamw: torch.optim.AdamW,
                          expert_adamw: torch.optim.AdamW | None = None) -> SlicedOptimizers:
    """megatron-core's DistributedOptimizer around `adamw` (built over the whole local
    dense parameters of every chunk): `adamw` then steps this DP rank's slices only. With
    experts, a second one around `expert_adamw` over the experts' buffers, cut over the
    expert-data-parallel ranks (megatron's get_megatron_optimizer chains the two the same
    way: one buffer kind per optimizer)."""
    parts = [_sliced(adamw, ddps, {i: ddp.buffers for i, ddp in enumerate(ddps)},
                     ps.get_data_parallel_group(), ps.get_data_parallel_rank())]
    if expert_adamw is not None:
        parts.append(_sliced(expert_adamw, ddps,
                             {i: ddp.expert_parallel_buffers for i, ddp in enumerate(ddps)},
                             ps.get_expert_data_parallel_group(),
                             ps.get_expert_data_parallel_rank()))
    return SlicedOptimizers(parts)


def _sliced(adamw: torch.optim.AdamW, ddps: list[DistributedDataParallel], buffers: dict,
            group: dist.ProcessGroup, index: int) -> DistributedOptimizer:
    config = OptimizerConfig(optimizer="adam", lr=adamw.defaults["lr"],
                             weight_decay=adamw.defaults["weight_decay"],
                             bf16=False, fp16=False, params_dtype=torch.float32,
                             use_distributed_optimizer=True, clip_grad=0.0)
    return DistributedOptimizer(
        adamw, config, grad_scaler=None, init_state_fn=None, model_chunks=ddps,
        per_model_buffers=buffers, data_parallel_group=group, data_parallel_group_gloo=None,
        data_parallel_group_idx=index, distributed_optimizer_instance_id=0)


@dataclass
class SlicedOptimizers:
    """The distributed optimizers of one model (the dense one, and the experts' one)."""

    parts: list[DistributedOptimizer]

    def step_with_ready_grads(self) -> None:
        for part in self.parts:
            part.step_with_ready_grads()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)


class Schedules:
    """One learning-rate schedule per optimizer (the dense and the experts' AdamW), stepped
    together: what the update loop steps and reports, and what checkpoints keep."""

    def __init__(self, schedules: list):
        self.schedules = schedules

    def step(self) -> None:
        for schedule in self.schedules:
            schedule.step()

    def get_last_lr(self) -> list[float]:
        return self.schedules[0].get_last_lr()

    def state_dict(self) -> dict:
        return {"schedules": [s.state_dict() for s in self.schedules]}

    def load_state_dict(self, state: dict) -> None:
        for schedule, saved in zip(self.schedules, state["schedules"]):
            schedule.load_state_dict(saved)


@dataclass
class GradStep:
    """One optimizer step's view of the gradients: (name, tensor holding the values the
    optimizer steps, whose .grad is the reduced gradient) pairs, and the group their
    squared norms are summed over."""

    named: list[tuple[str, torch.Tensor]]
    group: dist.ProcessGroup | None


def ready_grads(model: torch.nn.Module, dopt: SlicedOptimizers | None) -> GradStep:
    """After finalize_model_grads: the gradients the optimizer will step on."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if dopt is None:
        for _, p in named:
            p.grad = p.main_grad  # the reduced sum, a view into the DDP buffer
        return GradStep(named, ps.get_model_parallel_group())
    name_of = {id(p): n for n, p in named}
    pairs = []
    for part in dopt.parts:
        part._copy_model_grads_to_main_grads()  # each slice's .grad, a view into the buffer
        pairs += [(name_of[id(p)], shard)
                  for model_group, shard_group in zip(part.model_fp32_groups,
                                                      part.shard_fp32_groups)
                  for p, shard in zip(model_group, shard_group)]
    return GradStep(pairs, None)  # slices of every rank: summed over the world


def clipped_norm(step: GradStep, max_norm: float, tied: bool,
                 expert_group: dist.ProcessGroup | None = None, sliced: bool = False) -> float:
    """The global gradient norm (before clipping) and the gradients clipped to
    `max_norm`. TP-replicated parameters count on TP rank 0 only and the last pipeline
    stage's copy of a tied embedding not at all; which parameters are TP-sliced is decided
    by name (megatron's `tensor_model_parallel` flag is set only when it initialises the
    weights). With experts (`expert_group`: megatron's expert-tensor x expert x pipeline
    parallel group, whose ranks together hold every expert element once), each rank's
    experts (or its expert-TP slices of them) are its own: their squares are summed over
    that group and added to the dense sum; under the distributed optimizer (`sliced`) each
    expert element sits in one rank's slice, and the world sum counts it."""
    first_tp = ps.get_tensor_model_parallel_rank() == 0
    tied_copy = (tied and ps.get_pipeline_model_parallel_world_size() > 1
                 and not ps.is_pipeline_first_stage())
    # the TP ranks may hold different experts (or slices of them): each rank counts its own
    counted = [(n, t) for n, t in step.named
               if (tp_dim(n) is not None or first_tp
                   or (expert_group is not None and is_expert(n)))
               and not (tied_copy and n.endswith("output_layer.weight"))]
    device = step.named[0][1].device if step.named else "cpu"
    squares = torch.zeros((), dtype=torch.float32, device=device)
    experts = torch.zeros((), dtype=torch.float32, device=device)
    for n, t in counted:
        if expert_group is not None and is_expert(n):
            experts += t.grad.float().pow(2).sum()
        else:
            squares += t.grad.float().pow(2).sum()
    if expert_group is not None and sliced:
        squares += experts  # summed over the world with the rest
    dist.all_reduce(squares, group=step.group)
    if expert_group is not None and not sliced:
        dist.all_reduce(experts, group=expert_group)
        squares += experts
    norm = float(squares.sqrt())
    if max_norm > 0 and norm > 0:
        coef = max_norm / (norm + 1e-6)
        if coef < 1.0:
            for _, t in step.named:
                t.grad.mul_(coef)
    return norm


class DistributedStep:
    """What MixedPrecision.step calls `.step()` on under the distributed optimizer: the
    slices' AdamW step, then the all-gather of the updated slices into the parameters."""

    def __init__(self, dopt: SlicedOptimizers):
        self.dopt = dopt

    def step(self) -> None:
        self.dopt.step_with_ready_grads()


def zero_grads(ddps: list[DistributedDataParallel], optimizer) -> None:
    """Before a mini-batch's backward, as Megatron's train_step does."""
    for ddp in ddps:
        ddp.zero_grad_buffer()
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)


def state_numel(optimizer: torch.optim.Optimizer | None) -> int:
    """Elements of AdamW's moments this rank holds (exp_avg + exp_avg_sq)."""
    if optimizer is None:
        return 0
    return sum(v.numel() for s in optimizer.state.values() for k, v in s.items()
               if k in ("exp_avg", "exp_avg_sq"))


def optimizer_file(path: str, part: int = 0) -> str:
    """Part 0: the dense slices; 1: the experts' (ranks of one EP coordinate differ)."""
    coords = (f"tp{ps.get_tensor_model_parallel_rank()}_"
              f"pp{ps.get_pipeline_model_parallel_rank()}_dp{ps.get_data_parallel_rank()}")
    suffix = "" if part == 0 else f"_experts_ep{ps.get_expert_model_parallel_rank()}"
    return os.path.join(path, "megatron", f"{coords}_optimizer{suffix}.pt")


def save_slices(dopt: SlicedOptimizers, path: str) -> None:
    """This rank's slices of the AdamW state, with the layout they were cut for."""
    for index, part in enumerate(dopt.parts):
        torch.save({"layout": _layout(part), "adamw": part.optimizer.state_dict()},
                   optimizer_file(path, index))


def load_slices(dopt: SlicedOptimizers, path: str) -> None:
    for index, part in enumerate(dopt.parts):
        _load_slice(part, optimizer_file(path, index), path)


def _load_slice(dopt: DistributedOptimizer, file: str, path: str) -> None:
    if not os.path.exists(file):
        raise ValueError(f"checkpoint {path}: no distributed-optimizer slice {file}; it was "
                         f"saved without use_distributed_optimizer or with another layout")
    state = torch.load(file, weights_only=True)
    if state["layout"] != _layout(dopt):
        raise ValueError(f"checkpoint {path}: distributed-optimizer slices cut for "
                         f"{state['layout']}, this run is {_layout(dopt)} (resume with the "
                         f"same tensor, pipeline and data-parallel sizes and buckets)")
    dopt.optimizer.load_state_dict(state["adamw"])


def _layout(dopt: DistributedOptimizer) -> dict:
    """The parallel sizes and the buckets' sizes: what decides which slice a rank holds."""
    return {"tp": ps.get_tensor_model_parallel_world_size(),
            "pp": ps.get_pipeline_model_parallel_world_size(),
            "dp": ps.get_data_parallel_world_size(),
            "buckets": [n for per_buffer in dopt.per_bucket_numel
                        for sizes in per_buffer.values() for n in sizes]}


def offload_megatron(model: torch.nn.Module, ddps: list[DistributedDataParallel] | None,
                     optimizer: torch.optim.Optimizer | None, part: str,
                     device: torch.device) -> str:
    """offload.py's two parts for a DDP-wrapped model. The gradient buffers are freed in
    place (megatron's own `offload_grad_buffers`: every `main_grad` view stays valid).
    Under the distributed optimizer the parameters are views into DDP's parameter buffer,
    which a `model.to("cpu")` would cut loose from it (the next all-gather would write
    where no parameter reads): that buffer is moved by megatron's `offload_to_cpu`
    instead. Unverified on a GPU here (bench/gpu_checks.py holds the check)."""
    if ddps is None:
        return offload_torch(model, optimizer, part, device)
    check_part(part)
    if not on_accelerator(device):
        return CPU_NOTE
    if part == OPTIMIZER:
        for ddp in ddps:
            ddp.offload_grad_buffers(synchronize=True, empty_cache=False)
        moved = move_optimizer_state(optimizer, torch.device("cpu"))
        note = f"gradient buffers freed, optimizer state to cpu ({moved >> 20} MiB)"
    elif ddps[0].ddp_config.use_distributed_optimizer:
        for buffer in (b for ddp in ddps for b in ddp.buffers):
            buffer.offload_to_cpu(move_params=True, move_grads=False)
        note = "parameter buffers to cpu"
    else:
        model.to("cpu")  # in place; the gradient buffers are not the parameters' storage
        note = "parameters to cpu"
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return note


def onload_megatron(model: torch.nn.Module, ddps: list[DistributedDataParallel] | None,
                    optimizer: torch.optim.Optimizer | None, device: torch.device) -> str:
    if ddps is None:
        return onload_torch(model, optimizer, device)
    if not on_accelerator(device):
        return CPU_NOTE
    if ddps[0].ddp_config.use_distributed_optimizer:
        for buffer in (b for ddp in ddps for b in ddp.buffers):
            buffer.reload_from_cpu(move_params=True, move_grads=False)
    else:
        model.to(device)
    for ddp in ddps:  # a no-op for buffers never offloaded
        ddp.restore_grad_buffers(synchronize=False)
    moved = move_optimizer_state(optimizer, device)
    torch.cuda.synchronize(device)
    return f"parameters, gradient buffers and optimizer state ({moved >> 20} MiB) to {device}"
