"""deepspeed_train: a Hugging Face model trained under DeepSpeed ZeRO, one rank per worker.

Every worker of the role is one data-parallel rank of one torch.distributed group (gloo on
CPU, NCCL on GPU). The group is formed before this class is built: `TrainWorker`
receives rank 0's address and port from the cluster and exports MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE and LOCAL_RANK (see registry `process_group`).

A train step has hf_train's shape (ppo_epochs passes over mini-batches of
per_device_train_batch_size * gradient_accumulation_steps rows of this rank's shard), with
two differences that make N ranks equal one rank holding the same global mini-batch:
  - `counts` (num_tokens, num_seqs) handed to the loss are all-reduced over ranks, so
    every rank's micro-batch loss is its share of the *global* mini-batch loss;
  - DeepSpeed averages gradients over ranks, so each rank back-propagates its loss times
    the data-parallel size: mean_r(dp * grad_r) = sum_r grad_r = grad of the global loss.
Accumulation boundaries are set by hand (`set_gradient_accumulation_boundary`) and the
loss is not rescaled by DeepSpeed (`scale_wrt_gas=False`): the loss function already
divides by the global counts.

strategy_config (checked at start): `zero_stage` 0-3; `offload_optimizer` /
`offload_param` (to CPU; offload_param needs stage 3); `torch_adam` (torch's AdamW instead
of DeepSpeed's fused/CPU Adam: on by default without CUDA, which avoids a ~55 s JIT build
there). Precision follows `model_args.dtype` (bf16/fp16 turn on DeepSpeed's mixed
precision with fp32 master weights).

Weights for actor_infer are gathered in full on every rank (ZeRO-3: GatheredParameters;
all ranks must call it, as the pipeline does). Checkpoints: DeepSpeed's own sharded
format (model, optimizer, scheduler; resumable with the same world size) plus the full
model in HF format from rank 0, plus each rank's RNG state.

On CPU, DeepSpeed's shared-memory all-reduce (used when LOCAL_SIZE says every rank is on
one host) leaves a /dev/shm/deepspeed_allreduce_buffer_* file per rank after exit; each
rank unlinks its own file once every rank has mapped it, so nothing is left even when the
actor is killed.

Large models would be built under `deepspeed.zero.Init` (each rank loading only its
partition); here every rank loads the full HF checkpoint and ZeRO partitions it.
"""

from __future__ import annotations

import contextlib
import os

import torch
import torch.distributed as dist
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
from flywheel.workers.strategies.strategy_config import checked_config, require

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed picks its accelerator
import deepspeed  # noqa: E402

SHM_BUFFER = "/dev/shm/deepspeed_allreduce_buffer"


def strategy_options(cfg: WorkerConfig) -> dict:
    given = cfg.strategy_args.strategy_config
    options = checked_config("deepspeed_train", given, {
        "zero_stage": 2, "offload_optimizer": False, "offload_param": False,
        "torch_adam": not torch.cuda.is_available(),
    })
    require(options["zero_stage"] in (0, 1, 2, 3), "zero_stage",
            f"expected 0, 1, 2 or 3, got {options['zero_stage']!r}")
    require(not options["offload_param"] or options["zero_stage"] == 3, "offload_param",
            "parameter offload needs zero_stage: 3")
    return options


def deepspeed_config(cfg: WorkerConfig, options: dict, trainable: bool) -> dict:
    """The DeepSpeed JSON config for this role (batch sizes from training_args)."""
    args = cfg.training_args
    zero: dict = {"stage": options["zero_stage"]}
    if options["offload_optimizer"]:
        zero["offload_optimizer"] = {"device": "cpu"}
    if options["offload_param"]:
        zero["offload_param"] = {"device": "cpu"}
    config = {
        "train_micro_batch_size_per_gpu": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "gradient_clipping": args.max_grad_norm,
        "zero_optimization": zero,
        "bf16": {"enabled": cfg.model_args.dtype == "bf16"},
        "fp16": {"enabled": cfg.model_args.dtype == "fp16"},
        "zero_force_ds_cpu_optimizer": not options["torch_adam"],
        "steps_per_print": 2**31 - 1,
    }
    if trainable:
        config["optimizer"] = {"type": "AdamW", "params": {
            "lr": args.learning_rate, "betas": [args.adam_beta1, args.adam_beta2],
            "eps": args.adam_epsilon, "weight_decay": args.weight_decay,
            "torch_adam": options["torch_adam"]}}
    return config


class DeepSpeedTrainStrategy(TrainStrategy):
    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int, total_steps: int,
                 trainable: bool = True):
        options = strategy_options(cfg)
        torch.manual_seed(seed)
        self.cfg = cfg
        self.trainable = trainable
        self.device = pick_device()
        self.zero_stage = options["zero_stage"]
        deepspeed.init_distributed(dist_backend="nccl" if self.device.type == "cuda" else "gloo")
        self.rank, self.dp_size = dist.get_rank(), dist.get_world_size()
        unlink_shm_buffer(self.rank)
        model = load_causal_lm(model_path, cfg.model_args, self.device)
        if not trainable:
            model.requires_grad_(False)
        args = cfg.training_args
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, config=deepspeed_config(cfg, options, trainable),
            model_parameters=model.parameters() if trainable else None,
            lr_scheduler=(lambda opt: get_scheduler(
                args.lr_scheduler_type, opt, num_warmup_steps=args.warmup_steps,
                num_training_steps=max(1, total_steps))) if trainable else None,
        )
        self.engine.eval()

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return batched_logprobs(self.engine, batch, self.cfg.infer_batch_size)

    def train_step(self, batch: TokenBatch, loss_fn: LossFn, ppo_epochs: int = 1) -> dict:
        assert self.trainable, "train_step on a forward-only strategy"
        args = self.cfg.training_args
        mini_size = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self.engine.train()
        sums: dict[str, float] = {}
        steps = micro_steps = 0
        for _ in range(ppo_epochs):
            for mini in batch.chunks(mini_size):
                counts = self._global_counts(mini)
                micros = mini.chunks(args.per_device_train_batch_size)
                for i, micro in enumerate(micros):
                    self.engine.set_gradient_accumulation_boundary(i == len(micros) - 1)
                    micro = micro.trimmed()
                    log_probs, entropy = sequence_logprobs(self.engine, micro,
                                                           loss_fn.needs_entropy)
                    loss, metrics = loss_fn(log_probs, entropy, micro.to(self.device), counts)
                    self.engine.backward(loss * self.dp_size, scale_wrt_gas=False)
                    micro_steps += 1
                    for k, v in metrics.items():
                        sums[k] = sums.get(k, 0.0) + v
                self.engine.step()
                grad_norm = self.engine.get_global_grad_norm()
                sums["actor/grad_norm"] = sums.get("actor/grad_norm", 0.0) + float(grad_norm or 0.0)
                steps += 1
        self.engine.eval()
        metrics = {k: v / (steps if k == "actor/grad_norm" else micro_steps)
                   for k, v in sums.items()}
        metrics["actor/lr"] = self.engine.get_lr()[0]
        metrics["actor/optimizer_steps"] = float(steps)
        return metrics

    def _global_counts(self, mini: TokenBatch) -> dict[str, float]:
        """The mini-batch's token and sequence counts summed over data-parallel ranks."""
        local = torch.stack([count_tokens(mini.response_mask), count_seqs(mini.response_mask)])
        total = local.to(self.device, torch.float64)
        dist.all_reduce(total)
        return {"num_tokens": float(total[0]), "num_seqs": float(total[1])}

    def _gathered(self) -> contextlib.AbstractContextManager:
        """Full parameters on every rank for the duration (ZeRO-3); a no-op otherwise."""
        if self.zero_stage == 3:
            return deepspeed.zero.GatheredParameters(list(self.engine.module.parameters()))
        return contextlib.nullcontext()

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        with self._gathered():
            return {k: v.detach().to("cpu", copy=True)
                    for k, v in self.engine.module.state_dict().items()}

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.engine.save_checkpoint(os.path.join(path, "deepspeed"), tag="state",
                                    save_latest=False)
        torch.save({"rng": torch.get_rng_state()}, os.path.join(path, f"rng_{self.rank}.pt"))
        weights = self.state_dict_for_sync()  # collective under ZeRO-3: every rank gathers
        if self.rank == 0:
            self.engine.module.save_pretrained(os.path.join(path, "model"), state_dict=weights)
        dist.barrier()

    def load(self, path: str) -> None:
        self.engine.load_checkpoint(
            os.path.join(path, "deepspeed"), tag="state",
            load_optimizer_states=self.trainable, load_lr_scheduler_states=self.trainable)
        state = torch.load(os.path.join(path, f"rng_{self.rank}.pt"), weights_only=True)
        torch.set_rng_state(state["rng"])


def unlink_shm_buffer(rank: int) -> None:
    """Remove this rank's shared-memory all-reduce file once every rank has mapped it."""
    dist.barrier()
    name = (f"{SHM_BUFFER}_{os.getuid()}_{os.environ.get('MASTER_ADDR')}_"
            f"{os.environ.get('MASTER_PORT')}_{rank}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)
