"""hf_train: plain PyTorch training of a Hugging Face model, one process.

AdamW, a warmup + constant/linear/cosine schedule, global grad-norm clipping, and
gradient accumulation over micro-batches. A train step walks `ppo_epochs` passes over
the batch's mini-batches (per_device_train_batch_size * gradient_accumulation_steps
rows each); the loss function is told the mini-batch's token and sequence counts so
that splitting a mini-batch into micro-batches leaves the gradient unchanged.

Data parallelism belongs to deepspeed_train / megatron_train; this backend runs one rank.
"""

from __future__ import annotations

import os

import torch
from transformers import get_scheduler

from flywheel.algorithms import count_seqs, count_tokens
from flywheel.platform.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.base import LossFn, TrainStrategy
from flywheel.workers.strategies.hf_model import (
    batched_logprobs,
    load_causal_lm,
    pick_device,
    sequence_logprobs,
)


class HFTrainStrategy(TrainStrategy):
    metric_prefix = "actor"  # the critic subclass reports under critic/

    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int, total_steps: int,
                 trainable: bool = True):
        torch.manual_seed(seed)
        self.cfg = cfg
        self.device = pick_device()
        self.model = self._load_model(model_path)
        self.optimizer = None
        self.scheduler = None
        if trainable:
            args = cfg.training_args
            self.optimizer = torch.optim.AdamW(
                self.model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay,
                betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
            )
            self.scheduler = get_scheduler(
                args.lr_scheduler_type, self.optimizer,
                num_warmup_steps=args.warmup_steps, num_training_steps=max(1, total_steps),
            )
        else:
            self.model.requires_grad_(False)
        self.model.eval()

    def _load_model(self, model_path: str) -> torch.nn.Module:
        return load_causal_lm(model_path, self.cfg.model_args, self.device)

    def _forward(self, micro: TokenBatch, with_entropy: bool
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token outputs the loss consumes ([b, L] log-probs here, values for a critic)."""
        return sequence_logprobs(self.model, micro, with_entropy)

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return batched_logprobs(self.model, batch, self.cfg.infer_batch_size)

    def train_step(self, batch: TokenBatch, loss_fn: LossFn, ppo_epochs: int = 1) -> dict:
        assert self.optimizer is not None, "train_step on a forward-only strategy"
        args = self.cfg.training_args
        mini_size = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self.model.train()
        sums: dict[str, float] = {}
        steps = micro_steps = 0
        for _ in range(ppo_epochs):
            for mini in batch.chunks(mini_size):
                counts = {"num_tokens": float(count_tokens(mini.response_mask)),
                          "num_seqs": float(count_seqs(mini.response_mask))}
                self.optimizer.zero_grad(set_to_none=True)
                for micro in mini.chunks(args.per_device_train_batch_size):
                    micro = micro.trimmed()
                    outputs, entropy = self._forward(micro, loss_fn.needs_entropy)
                    loss, metrics = loss_fn(outputs, entropy, micro.to(self.device), counts)
                    loss.backward()
                    micro_steps += 1
                    for k, v in metrics.items():
                        sums[k] = sums.get(k, 0.0) + v
                grad_norm = self._clip(args.max_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                grad_key = f"{self.metric_prefix}/grad_norm"
                sums[grad_key] = sums.get(grad_key, 0.0) + grad_norm
                steps += 1
        self.model.eval()
        metrics = {k: v / (steps if k.endswith("/grad_norm") else micro_steps)
                   for k, v in sums.items()}
        metrics[f"{self.metric_prefix}/lr"] = self.scheduler.get_last_lr()[0]
        metrics[f"{self.metric_prefix}/optimizer_steps"] = float(steps)
        return metrics

    def _clip(self, max_norm: float) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if max_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        return float(torch.nn.utils.get_total_norm([p.grad for p in params]))

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.model.save_pretrained(os.path.join(path, "model"))
        torch.save(
            {
                "optimizer": self.optimizer.state_dict() if self.optimizer else None,
                "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                "rng": torch.get_rng_state(),
            },
            os.path.join(path, "trainer_state.pt"),
        )

    def load(self, path: str) -> None:
        from safetensors.torch import load_file

        weights = load_file(os.path.join(path, "model", "model.safetensors"))
        self.model.load_state_dict(weights, strict=False)
        self.model.tie_weights()
        state = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=True)
        if self.optimizer and state["optimizer"]:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])

