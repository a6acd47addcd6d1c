"""Mixed precision for the plain-torch training backends (hf_train, megatron_train).

`model_args.dtype` names the *compute* dtype. A role that trains keeps its parameters,
their gradients and AdamW's moments in fp32, and runs its forward (and so its backward)
under `torch.autocast` in that dtype: matrix products in bf16/fp16, reductions, norms
and the log-softmax in fp32. This is torch's AMP recipe, the one Hugging Face's Trainer
(accelerate) uses; DeepSpeed and Megatron reach the same end with a half-precision
module and a separate fp32 copy in the optimizer.

Why fp32 masters at all: AdamW's update is about lr * sign(g) in size. A weight of 0.03
held in bf16 has a spacing of 2^-13 ~ 1.2e-4 around it (8 significant bits), so at lr
1e-6 (the default) every update rounds back to the same bf16 value and training does
nothing, with no error (bench/bench_mixed_precision.py measures it on SmolLM2). The fp32
master accumulates those small steps (Micikevicius et al. 2018, "Mixed Precision
Training", ICLR, section 3.1: fp32 master copy of weights).

fp16 also needs loss scaling (same paper, section 3.2): fp16 has 5 exponent bits, so
gradients below 2^-24 flush to zero (the paper found a large share of activation
gradients there). `LossScaler` multiplies the loss by S before backward and divides the
fp32 gradients by S before clipping and the step; S is dynamic: a step whose gradients
overflowed (inf or nan) is skipped and S halved, and S doubles after `growth_interval`
steps in a row without overflow (the schedule of torch's GradScaler, apex, Megatron and
DeepSpeed; torch's defaults). bf16 has fp32's 8 exponent bits and needs no scaling.

The decision to skip is taken on the *global* gradient norm, which every backend already
reduces over all its ranks, so every rank skips the same steps (one rank stepping while
another skips would split the model). A skipped step is not an optimizer step: the update
loop (train_loop.py) leaves the learning-rate schedule where it is (as DeepSpeed and
Megatron do) and reports `<prefix>/skipped_steps` and `<prefix>/loss_scale`.

A role that never trains (the reference) holds fp32 weights too and runs the same
autocast forward, so its log-probs are exactly actor_train's for the same weights (KL 0
at step 0). Holding them in bf16 instead (half the memory, no gradients or AdamW state
either way) changes the forward itself: under autocast the embeddings, norms and residual
stream then run in bf16 rather than fp32, and on SmolLM2 the two forwards' log-probs
differed by 0.07 on average and 0.7 at most (bench/bench_mixed_precision.py).

What leaves the trainer is in the compute dtype too: the weights handed to actor_infer
(which loads `model_args.dtype`, and whose object-store and shared-memory sizing,
`platform/models/weight_size.py`, counts that dtype's bytes). Checkpoints keep the fp32
masters, so a resume continues exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from flywheel.config.schema import ModelArgs
from flywheel.workers.strategies.hf_model import TORCH_DTYPES
from flywheel.workers.strategies.train_loop import DivergenceError, OptimizerStep


def fp32_weights(model_args: ModelArgs) -> ModelArgs:
    """`model_args` with the weights held in fp32, whatever compute dtype it names."""
    return dataclasses.replace(model_args, dtype="fp32")


@dataclass
class LossScaler:
    """Dynamic loss scaling for fp16 (Micikevicius et al. 2018, section 3.2; the dynamic
    schedule and defaults of torch.amp.GradScaler). Loss x S before backward, gradients
    / S after; on overflow the step is skipped and S halved, after `growth_interval`
    finite steps S doubles. An overflow at `min_scale` is a real divergence."""

    scale: float = 2.0 ** 16
    growth_interval: int = 2000
    min_scale: float = 1.0
    good_steps: int = 0  # finite steps since the last change of scale

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale

    @torch.no_grad()
    def unscale_(self, grads: list[torch.Tensor]) -> None:
        if grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)

    def update(self, finite: bool) -> None:
        """After a step whose (unscaled) gradient norm was `finite` or not."""
        if finite:
            self.good_steps += 1
            if self.good_steps >= self.growth_interval:
                self.scale, self.good_steps = self.scale * 2.0, 0
            return
        if self.scale <= self.min_scale:
            raise DivergenceError(f"fp16 gradients are non-finite at loss scale {self.scale:g}"
                                  ": the loss itself diverged, not the scale")
        self.scale, self.good_steps = max(self.min_scale, self.scale / 2.0), 0

    def state_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "good_steps": self.good_steps}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.scale, self.good_steps = float(state["scale"]), int(state["good_steps"])


@dataclass
class MixedPrecision:
    """A backend's precision: the autocast dtype of its forward, and a loss scaler when
    that dtype is fp16 and the role trains."""

    compute_dtype: torch.dtype
    device_type: str
    scaler: LossScaler | None

    @classmethod
    def for_role(cls, dtype: str, device: torch.device, trainable: bool) -> MixedPrecision:
        compute = TORCH_DTYPES[dtype]
        scaler = LossScaler() if trainable and compute == torch.float16 else None
        return cls(compute, device.type, scaler)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context every forward of the role runs in, training and no-grad alike, so
        the log-probs `forward` returns are those the training forward computes."""
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute_dtype)

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """What to back-propagate for `loss` (itself unless a loss scaler is on)."""
        return loss if self.scaler is None else self.scaler.scaled(loss)

    def unscale_(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Gradients back to their true size, before the norm is taken and clipped."""
        if self.scaler is not None:
            self.scaler.unscale_([p.grad for p in params if p.grad is not None])

    def step(self, optimizer: torch.optim.Optimizer, grad_norm: float) -> OptimizerStep:
        """Step `optimizer` unless the loss scaler found the gradients overflowed
        (`grad_norm`, global over ranks, not finite); without a scaler always step, and a
        non-finite norm stops the run in the update loop (train_loop.check_finite)."""
        if self.scaler is None:
            optimizer.step()
            return OptimizerStep(grad_norm)
        finite = math.isfinite(grad_norm)
        if finite:
            optimizer.step()
        self.scaler.update(finite)
        return OptimizerStep(grad_norm, applied=finite, loss_scale=self.scaler.scale)

    def state_dict(self) -> dict[str, float] | None:
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_state_dict(self, state: dict[str, float] | None) -> None:
        if self.scaler is not None and state is not None:
            self.scaler.load_state_dict(state)
