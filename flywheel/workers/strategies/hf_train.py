"""hf_train: plain PyTorch training of a Hugging Face model, one process.

AdamW with a warmup + constant/linear/cosine schedule and global grad-norm clipping, run by
the shared update loop (`train_loop.py`); this file only says how one rank computes,
back-propagates and steps. Data parallelism belongs to deepspeed_train / megatron_train.

Precision (mixed_precision.py): every role holds fp32 parameters (and, when it trains,
fp32 gradients and AdamW state) whatever `model_args.dtype` says, and every forward runs
under autocast in that dtype; fp16 adds a dynamic loss scaler. Weights leave for
actor_infer in `model_args.dtype`; checkpoints hold the fp32 masters (and the loss
scale), so a resume continues exactly.

LoRA (`model_args.lora_target`, lora.py): the base is loaded in `model_args.dtype` and
frozen; only the adapter is trained, held in fp32 and in the optimizer. The weight sync
sends the merged model; checkpoints hold the adapter (a PEFT adapter folder) and its
optimizer state, not the base, which the run loads from its model again. The reference
policy is the same model with the adapter disabled (base.py `forward_base_logprobs`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch

from flywheel.config.derived import lora_on
from flywheel.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.base import TrainStrategy
from flywheel.workers.strategies.frozen_modules import freeze_modules, unfrozen
from flywheel.workers.strategies.fused_old_logprobs import can_fuse_old_logprobs
from flywheel.workers.strategies.hf_model import (
    batched_outputs,
    distinct_state_tensors,
    pick_device,
)
from flywheel.workers.strategies.lora import (
    adapter_weights,
    add_adapter,
    load_adapter,
    merged_weights,
    save_adapter,
)
from flywheel.workers.strategies.mixed_precision import MixedPrecision, fp32_weights
from flywheel.workers.strategies.model_head import POLICY, ModelHead
from flywheel.workers.strategies.offload import offload_torch, onload_torch
from flywheel.workers.strategies.router_loss import router_loss_for
from flywheel.workers.strategies.sequence_packing import check_model_packs, packing_plan
from flywheel.workers.strategies.train_loop import (
    Counts,
    Objective,
    OptimizerStep,
    accumulate,
    local_counts,
    optimizer_and_schedule,
)


class HFTrainStrategy(TrainStrategy):
    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int, total_steps: int,
                 trainable: bool = True, head: ModelHead = POLICY):
        torch.manual_seed(seed)
        self.cfg, self.head = cfg, head
        self.device = pick_device()
        self.precision = MixedPrecision.for_role(cfg.model_args.dtype, self.device, trainable)
        lora = lora_on(cfg.model_args)
        weights = cfg.model_args if lora else fp32_weights(cfg.model_args)
        self.model = head.load_hf(model_path, weights, self.device, seed)
        # the PEFT wrapper around self.model, whose layers it injected in place
        self.adapter = add_adapter(self.model, cfg.model_args) if lora else None
        # the MoE load-balancing loss of model_args.moe_aux_loss_coef (policy training only)
        self.router = (router_loss_for(self.model, cfg.model_args)
                       if trainable and head.kind == "policy" else None)
        if trainable and cfg.model_args.freeze_module_prefix:
            freeze_modules(self.model, cfg.model_args.freeze_module_prefix)
        self.optimizer, self.scheduler = optimizer_and_schedule(
            self.model, cfg.training_args, total_steps, trainable)
        self.model.eval()
        self.packing = packing_plan(cfg.training_args)  # None: padded rows
        if self.packing is not None:
            check_model_packs(self.model, self.packing)

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        with self.precision.autocast():
            return batched_outputs(
                lambda micro: self.head.hf_outputs(self.model, micro, False,
                                                   packing=self.packing)[0],
                batch, self.cfg.infer_batch_size)

    def fuses_old_logprobs(self, rows: int, ppo_epochs: int) -> bool:
        return can_fuse_old_logprobs(self.model, self.cfg.training_args, rows, ppo_epochs)

    # ---- update-loop hooks ---------------------------------------------------------------
    def set_training(self, training: bool) -> None:
        self.model.train(training)

    def global_counts(self, mini: TokenBatch) -> Counts:
        return local_counts(mini)

    def forward_backward(self, micros: list[TokenBatch], objective: Objective,
                         counts: Counts) -> list[dict[str, float]]:
        self.optimizer.zero_grad(set_to_none=True)

        def forward(micro: TokenBatch, entropy: bool):
            with self.precision.autocast():  # backward follows the forward's dtypes
                return self.head.hf_outputs(self.model, micro, entropy, response_only=True,
                                            packing=self.packing)

        return accumulate(micros, objective, counts, forward,
                          lambda loss, last: self.precision.scaled(loss).backward(),
                          self.device, self.router)

    def optimizer_step(self, max_grad_norm: float) -> OptimizerStep:
        params = [p for p in self.model.parameters() if p.grad is not None]
        self.precision.unscale_(params)
        if max_grad_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
        else:
            norm = float(torch.nn.utils.get_total_norm([p.grad for p in params]))
        return self.precision.step(self.optimizer, norm)

    # ---- phase switch (offload.py; measured on a GPU by bench/gpu_checks.py) ------------
    def offload(self, part: str) -> str:
        return offload_torch(self.model, self.optimizer, part, self.device)

    def onload(self) -> str:
        return onload_torch(self.model, self.optimizer, self.device)

    # ---- weights and checkpoints ---------------------------------------------------------
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """In `model_args.dtype`, the dtype actor_infer loads (the masters are fp32)."""
        dtype = self.precision.compute_dtype
        if self.adapter is not None:
            return {k: v.to("cpu", copy=True) for k, v in self._lora_sync(dtype)}
        return {k: v.detach().to("cpu", dtype, copy=True)
                for k, v in self.model.state_dict().items()}

    def weights_for_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        """In `model_args.dtype`: under fp32 the live tensors, no copy (the sync copies
        each into the object store before the next train step); under bf16/fp16 each fp32
        master cast on its own, one tensor at a time. A tied parameter (lm_head =
        embed_tokens) once. With LoRA, the adapter merged in, or the adapter alone
        (`model_args.lora_sync`, lora.py). Frozen modules are left out (frozen_modules.py)."""
        if self.adapter is not None:
            yield from self._lora_sync(self.precision.compute_dtype)
            return
        for name, tensor in unfrozen(distinct_state_tensors(self.model),
                                     self.cfg.model_args.freeze_module_prefix):
            yield name, tensor.detach().to(self.precision.compute_dtype)

    def _lora_sync(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        if self.cfg.model_args.lora_sync == "adapter":
            return adapter_weights(self.adapter, dtype)
        return merged_weights(self.model, dtype)

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        if self.adapter is not None:  # the base is the run's model, loaded at start
            save_adapter(self.adapter, os.path.join(path, "adapter"))
        else:
            self.model.save_pretrained(os.path.join(path, "model"))
        torch.save(
            {
                "optimizer": self.optimizer.state_dict() if self.optimizer else None,
                "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                "loss_scaler": self.precision.state_dict(),
                "rng": torch.get_rng_state(),
            },
            os.path.join(path, "trainer_state.pt"),
        )

    def load(self, path: str) -> None:
        if self.adapter is not None:
            load_adapter(self.adapter, os.path.join(path, "adapter"))
        else:
            self._load_model(os.path.join(path, "model"))
        state = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=True)
        if self.optimizer and state["optimizer"]:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        self.precision.load_state_dict(state.get("loss_scaler"))  # absent before fp16 scaling
        torch.set_rng_state(state["rng"])

    def _load_model(self, path: str) -> None:
        from safetensors.torch import load_file

        weights = load_file(os.path.join(path, "model.safetensors"))
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        missing = [k for k in missing if k != "lm_head.weight"]  # saved once, as the embedding
        if missing or unexpected:
            raise ValueError(f"checkpoint {path} does not match the model: missing {missing}, "
                             f"unexpected {unexpected}")
        self.model.tie_weights()
