"""The update loop, written once: every training backend runs this loop and only this one.

A train step is `ppo_epochs` passes over the rank's shard of the batch. One mini-batch is
one optimizer step and holds per_device_train_batch_size * gradient_accumulation_steps
rows, cut into micro-batches of per_device_train_batch_size rows, or, under
`training_args.dynamic_batching`, into micro-batches of at most
`max_tokens_per_micro_batch` padded tokens (`micro_batches`).

The invariant the loop exists for: a mini-batch's gradient does not depend on how it is
cut, into micro-batches or across data-parallel ranks. The objective is handed the
mini-batch's *global* counts (response tokens and sequences, summed over its micro-batches
and over ranks: `UpdateHooks.global_counts`) and divides by them, so the micro-batch losses
of all ranks add up to the mini-batch loss. Each backend's `forward_backward` then makes the
ranks' gradients *sum*: hf_train has one rank; deepspeed_train averages over ranks, so each
rank back-propagates its loss times the data-parallel size; megatron_train all-reduces a
sum.

What a backend supplies is `UpdateHooks`: train/eval mode, how counts are all-reduced,
forward + backward over one mini-batch's micro-batches, and a clipped optimizer step. What
the loop owns: epochs, mini-batches, the counts, the learning-rate schedule (stepped here
only, once per optimizer step, so its horizon is counted in optimizer steps: see
`optimizer_steps_per_train_step`), the divergence check and the metrics.

Metrics: each loss metric is the mean over micro-batches, `<prefix>/grad_norm` the mean
over optimizer steps (before clipping), `<prefix>/lr` the rate after the last step, and
`<prefix>/optimizer_steps` the count. The prefix is the head's (`actor` for the policy,
SFT included; `critic` for the value head). A backend training in fp16 under a loss
scaler (mixed_precision.py) may skip a step whose gradients overflowed: the schedule is
not stepped for it, its norm is left out of the mean, and `<prefix>/skipped_steps` and
`<prefix>/loss_scale` (the scale after the last step) are reported.

Phase times, summed over the step's micro-batches and optimizer steps, so a user sees
where the driver's time/train goes: `time/<prefix>_forward` (forward and objective),
`time/<prefix>_backward` and `time/<prefix>_optimizer` (clip and step), in the time/
namespace so that comparisons of a step's numbers leave them out with the driver's. A
backend whose schedule interleaves forward and backward (megatron_train) reports their
sum as `time/<prefix>_forward_backward` instead. On a GPU, `accumulate` synchronises the device
around each backward, so kernels still running are counted in the phase that queued them.

Liveness: every micro-batch and optimizer step ticks the worker's progress counter
(platform/liveness.py), so a long but progressing update is never reported as stalled.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist

from flywheel.algorithms import count_seqs, count_tokens
from flywheel.config.schema import TrainingArgs
from flywheel.platform.liveness import tick
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.router_loss import METRIC as ROUTER_METRIC
from flywheel.workers.strategies.router_loss import RouterLoss


@dataclass(frozen=True)
class Counts:
    """A mini-batch's response tokens and sequences, summed over micro-batches and ranks."""

    num_tokens: float
    num_seqs: float


@dataclass(frozen=True)
class OptimizerStep:
    """What one `optimizer_step` did. `applied` is False only when a loss scaler skipped
    the step for overflowing gradients (fp16, mixed_precision.py); `loss_scale` is that
    scaler's scale after the step (None without one)."""

    grad_norm: float  # global, before clipping
    applied: bool = True
    loss_scale: float | None = None


class Objective(Protocol):
    """What the loop minimises, per micro-batch: the actor's policy loss, the critic's value
    loss or SFT's cross-entropy. `outputs` are the model head's per-token outputs ([b, L]
    log-probs or values), `entropy` is given when `needs_entropy`. An objective reads them
    under `micro.response_mask` only: the policy head leaves 0 elsewhere (it computes the
    vocabulary-wide head only at response positions, `hf_model.sequence_logprobs`)."""

    needs_entropy: bool

    def __call__(self, outputs: torch.Tensor, entropy: torch.Tensor | None,
                 micro: TokenBatch, counts: Counts) -> tuple[torch.Tensor, dict[str, float]]: ...


class UpdateHooks(Protocol):
    def set_training(self, training: bool) -> None:
        """Train mode during the update, eval mode outside it."""

    def global_counts(self, mini: TokenBatch) -> Counts:
        """The mini-batch's counts summed over data-parallel ranks (local ones on one rank)."""

    def forward_backward(self, micros: list[TokenBatch], objective: Objective,
                         counts: Counts) -> list[dict[str, float]]:
        """From zero gradients, accumulate the gradient of every micro-batch's loss; each
        one's metrics (a pipeline-parallel stage that computes no loss returns none)."""

    def agreed_micro_batches(self, n: int) -> int:
        """The most micro-batches any data-parallel rank cut its mini-batch into, this one
        cutting `n` (dynamic batching: every rank then runs that many; one rank: `n`)."""

    def optimizer_step(self, max_grad_norm: float) -> OptimizerStep:
        """Clip (when max_grad_norm > 0) and step; the gradient norm before clipping, and
        whether a loss scaler skipped the step."""

    def shared_loss_metrics(self, sums: dict[str, float], micro_steps: int
                            ) -> tuple[dict[str, float], int]:
        """Loss-metric sums as every rank should report them (pipeline parallelism: the
        last stage's); most backends return them unchanged."""


BACKWARD_SECONDS = "_backward_s"  # a micro-batch's backward seconds, from `accumulate`


def synchronized_clock(device: torch.device | None = None) -> float:
    """perf_counter once the device's queued kernels are done (a no-op wait off GPU)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class DivergenceError(RuntimeError):
    """A non-finite loss or gradient norm: training stops before bad weights spread."""


def local_counts(mini: TokenBatch) -> Counts:
    return Counts(float(count_tokens(mini.response_mask)), float(count_seqs(mini.response_mask)))


def summed_counts(mini: TokenBatch, device: torch.device, group=None) -> Counts:
    """The mini-batch's counts summed over the ranks of `group` (all ranks when None)."""
    local = local_counts(mini)
    total = torch.tensor([local.num_tokens, local.num_seqs], dtype=torch.float64,
                         device=device)
    dist.all_reduce(total, group=group)
    return Counts(float(total[0]), float(total[1]))


def run_update(hooks: UpdateHooks, batch: TokenBatch, objective: Objective,
               args: TrainingArgs, ppo_epochs: int, scheduler, prefix: str,
               per_train_step: bool = False) -> dict[str, float]:
    """`ppo_epochs` passes of optimizer steps over `batch`; the step's metrics.

    The schedule steps after every applied optimizer step, or (`per_train_step`: its
    horizon counts train steps, TrainStrategy.schedule_per_train_step) once after the
    train step when any was applied: every optimizer step of one train step then takes
    the same learning rate."""
    mini_rows = args.per_device_train_batch_size * args.gradient_accumulation_steps
    sums: dict[str, float] = {}
    micro_steps = steps = skipped = 0
    grad_norms = 0.0
    loss_scale = None
    seconds = {"forward_backward": 0.0, "backward": 0.0, "optimizer": 0.0}
    split = False  # whether the backend timed its backward passes apart (accumulate)
    hooks.set_training(True)
    try:
        for _ in range(ppo_epochs):
            for mini in batch.chunks(mini_rows):
                counts = hooks.global_counts(mini)
                micros = micro_batches(mini, args, hooks)
                start = synchronized_clock()
                results = hooks.forward_backward(micros, objective, counts)
                opt_start = time.perf_counter()
                seconds["forward_backward"] += opt_start - start
                for metrics in results:
                    tick()
                    if BACKWARD_SECONDS in metrics:
                        split = True
                        seconds["backward"] += metrics.pop(BACKWARD_SECONDS)
                    check_finite(metrics, steps + 1)
                    for k, v in metrics.items():
                        sums[k] = sums.get(k, 0.0) + v
                    micro_steps += 1
                step = hooks.optimizer_step(args.max_grad_norm)
                seconds["optimizer"] += synchronized_clock() - opt_start
                tick()
                steps += 1
                loss_scale = step.loss_scale
                if not step.applied:  # overflow under fp16 loss scaling: nothing changed
                    skipped += 1
                    continue
                check_finite({f"{prefix}/grad_norm": step.grad_norm}, steps)
                if not per_train_step:
                    scheduler.step()
                grad_norms += step.grad_norm
        if per_train_step and steps > skipped:
            scheduler.step()
    finally:
        hooks.set_training(False)
    sums, micro_steps = hooks.shared_loss_metrics(sums, micro_steps)
    metrics = {k: v / micro_steps for k, v in sums.items()}
    metrics[f"{prefix}/grad_norm"] = grad_norms / max(1, steps - skipped)
    metrics[f"{prefix}/lr"] = scheduler.get_last_lr()[0]
    metrics[f"{prefix}/optimizer_steps"] = float(steps)
    if loss_scale is not None:
        metrics[f"{prefix}/skipped_steps"] = float(skipped)
        metrics[f"{prefix}/loss_scale"] = loss_scale
    metrics |= phase_metrics(seconds, split, prefix)
    return metrics


def phase_metrics(seconds: dict[str, float], split: bool, prefix: str) -> dict[str, float]:
    """The update's phase times by name (module docstring)."""
    times = {f"time/{prefix}_optimizer": seconds["optimizer"]}
    if not split:
        return times | {f"time/{prefix}_forward_backward": seconds["forward_backward"]}
    return times | {f"time/{prefix}_forward": seconds["forward_backward"] - seconds["backward"],
                    f"time/{prefix}_backward": seconds["backward"]}


def micro_batches(mini: TokenBatch, args: TrainingArgs, hooks: UpdateHooks
                  ) -> list[TokenBatch]:
    """How one mini-batch is cut: per_device_train_batch_size rows at a time, or, under
    `dynamic_batching`, by the token budget (`by_token_budget`) into as many micro-batches
    as the rank that needs most (`UpdateHooks.agreed_micro_batches`: ZeRO's forwards and
    backwards are collectives, so every rank runs the same number). Either cut gives the
    same gradient: the objective divides by the mini-batch's counts, not the micro-batch's."""
    if not args.dynamic_batching:
        return mini.chunks(args.per_device_train_batch_size)
    cut = token_budget_rows(mini.attention_mask.sum(dim=1), args.max_tokens_per_micro_batch)
    cut = split_to(cut, mini.attention_mask.sum(dim=1), hooks.agreed_micro_batches(len(cut)))
    return [mini.select(rows) for rows in cut]


def token_budget_rows(lengths: torch.Tensor, max_tokens: int) -> list[torch.Tensor]:
    """Row indices of each micro-batch: rows sorted longest first ([B] `lengths`, the
    attention-mask sums of right-padded rows), then cut greedily: a micro-batch takes rows
    while rows x its first (longest) row's length <= `max_tokens`; a longer row goes alone.
    Sorted rows are alike in length, so trimming (TokenBatch.trimmed) leaves little padding."""
    order = torch.argsort(lengths, descending=True, stable=True)  # [B]
    cut, start = [], 0
    while start < len(order):
        rows = max(1, max_tokens // max(1, int(lengths[order[start]])))
        cut.append(order[start:start + rows])
        start += rows
    return cut


def split_to(cut: list[torch.Tensor], lengths: torch.Tensor, n: int) -> list[torch.Tensor]:
    """`cut` with its largest micro-batches (padded tokens) halved until there are `n`
    (every rank holds as many rows as the one that cut `n`, so n <= rows)."""
    cut = list(cut)
    while len(cut) < n:
        i = max((j for j in range(len(cut)) if len(cut[j]) > 1),
                key=lambda j: len(cut[j]) * int(lengths[cut[j][0]]))
        half = (len(cut[i]) + 1) // 2
        cut[i:i + 1] = [cut[i][:half], cut[i][half:]]
    return cut


def check_finite(metrics: dict[str, float], optimizer_step: int) -> None:
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad:
        name, value = next(iter(bad.items()))
        raise DivergenceError(f"{name} is {value} at optimizer step {optimizer_step} of this "
                              "train step; stopping before the weights are used")


def accumulate(micros: list[TokenBatch], objective: Objective, counts: Counts,
               forward: Callable[[TokenBatch, bool], tuple[torch.Tensor, torch.Tensor | None]],
               backward: Callable[[torch.Tensor, bool], None], device: torch.device,
               router: RouterLoss | None = None, ranks: int = 1) -> list[dict[str, float]]:
    """`forward_backward` for backends that run one micro-batch at a time (hf, deepspeed):
    `backward(loss, last)` is told whether this micro-batch ends the accumulation. Each
    micro-batch's backward seconds ride in its metrics under BACKWARD_SECONDS, which
    run_update takes out again. `router`: the MoE load-balancing loss is added, each
    micro-batch's times 1 / (micro-batches x `ranks`), Megatron's scale (router_loss.py)."""
    results = []
    for i, micro in enumerate(micros):
        micro = micro.trimmed()
        with router.recording() if router is not None else contextlib.nullcontext():
            outputs, entropy = forward(micro, objective.needs_entropy)
        loss, metrics = objective(outputs, entropy, micro.to(device), counts)
        if router is not None:
            balance = router.loss(micro.attention_mask)
            loss = loss + balance / (len(micros) * ranks)
            metrics[ROUTER_METRIC] = float(balance.detach())
        start = synchronized_clock(device)
        backward(loss, i == len(micros) - 1)
        metrics[BACKWARD_SECONDS] = synchronized_clock(device) - start
        results.append(metrics)
    return results


def build_adamw(params, args: TrainingArgs) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=args.weight_decay,
                             betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon)


def optimizer_and_schedule(model: torch.nn.Module, args: TrainingArgs, horizon: int,
                           trainable: bool) -> tuple[torch.optim.Optimizer | None, object]:
    """AdamW over `model`'s trainable parameters (all of them, or a LoRA adapter's) and
    its schedule for a role that trains; for one that does not (the reference), neither,
    and the model's parameters frozen."""
    if not trainable:
        model.requires_grad_(False)
        return None, None
    optimizer = build_adamw([p for p in model.parameters() if p.requires_grad], args)
    return optimizer, build_schedule(optimizer, args, horizon)


def build_schedule(optimizer: torch.optim.Optimizer, args: TrainingArgs, horizon: int):
    """The learning-rate schedule over `horizon` optimizer steps, with linear warmup over
    `warmup_steps(args, horizon)` for every schedule type (transformers' plain `constant`
    ignores warmup)."""
    # imported here: transformers.optimization imports its trainer utilities and, through
    # them, PEFT (~2 s of CPU), which a worker that builds no schedule (actor_infer,
    # importing this module through strategies/base.py) need not pay at every start
    from transformers import get_scheduler

    horizon = max(1, horizon)
    warmup = warmup_steps(args, horizon)
    name = args.lr_scheduler_type
    if name == "constant" and warmup:
        name = "constant_with_warmup"
    return get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=horizon)


def warmup_steps(args: TrainingArgs, horizon: int) -> int:
    """`warmup_steps` when written, else ceil(warmup_ratio x horizon): the rule of ROLL's
    TrainingArguments.get_warmup_steps and transformers', over the same horizon."""
    return args.warmup_steps or math.ceil(args.warmup_ratio * horizon)


def optimizer_steps_per_train_step(args: TrainingArgs, rows_per_rank: int,
                                   ppo_epochs: int) -> int:
    """Optimizer steps one train step takes on a rank holding `rows_per_rank` rows."""
    mini_rows = args.per_device_train_batch_size * args.gradient_accumulation_steps
    return ppo_epochs * max(1, math.ceil(rows_per_rank / mini_rows))
