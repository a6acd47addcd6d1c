"""deepspeed_train: a Hugging Face model trained under DeepSpeed ZeRO, one rank per worker.

Every worker of the role is one data-parallel rank of one torch.distributed group (gloo on
CPU, NCCL on GPU). The group is formed before this class is built: `TrainWorker`
receives rank 0's address and port from the cluster and exports MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE and LOCAL_RANK (see registry `process_group`).

The update is the shared loop (`train_loop.py`); what is DeepSpeed's here:
  - the loop's global counts are all-reduced over ranks;
  - DeepSpeed averages gradients over ranks, so each rank back-propagates its loss times
    the data-parallel size: mean_r(dp * grad_r) = sum_r grad_r = grad of the global loss;
  - accumulation boundaries are set by hand (`set_gradient_accumulation_boundary`) and
    the loss is not rescaled by DeepSpeed (`scale_wrt_gas=False`): the objective already
    divides by the global counts;
  - clipping happens inside `engine.step()`; the schedule is built on DeepSpeed's basic
    optimizer and stepped by the loop, not handed to DeepSpeed (one place steps it).

strategy_config (checked at start): `zero_stage` 0-3; `offload_optimizer` /
`offload_param` (to CPU; offload_param needs stage 3); `torch_adam` (torch's AdamW instead
of DeepSpeed's fused/CPU Adam: on by default without CUDA, which avoids a ~55 s JIT build
there). Precision follows `model_args.dtype` (bf16/fp16 turn on DeepSpeed's mixed
precision with fp32 master weights).

Weights for actor_infer are gathered in full on every rank (ZeRO-3: GatheredParameters;
all ranks must call it, as the pipeline does). Checkpoints: DeepSpeed's own sharded
format (model, optimizer, scheduler; resumable with the same world size) plus the full
model in HF format from rank 0, plus each rank's RNG and schedule state.

On CPU, DeepSpeed's shared-memory all-reduce (used when LOCAL_SIZE says every rank is on
one host) leaves a /dev/shm/deepspeed_allreduce_buffer_* file per rank after exit; each
rank unlinks its own file once every rank has mapped it, so nothing is left even when the
actor is killed.

Large models would be built under `deepspeed.zero.Init` (each rank loading only its
partition); here every rank loads the full HF checkpoint and ZeRO partitions it.

LoRA (`model_args.lora_target`, lora.py): PEFT injects the adapter into the loaded model
before `deepspeed.initialize`, and only the adapter's parameters (and `additional_target`'s)
go to DeepSpeed's optimizer, so ZeRO keeps fp32 masters, moments and gradients of those
alone; under bf16/fp16 DeepSpeed casts every parameter to that dtype, the adapter's
included, and updates it from its fp32 master (hf_train holds the adapter itself in fp32:
the same update, rounded once more for the forward). ZeRO-3 partitions the frozen base
too. The weight sync sends the merged model, each adapted weight gathered (ZeRO-3) with its
A and B; checkpoints hold DeepSpeed's state without the frozen parameters
(`exclude_frozen_parameters`) and a PEFT adapter folder from rank 0, never the base,
which the run loads from its model again. The reference policy is the same model with
the adapter disabled (base.py `forward_base_logprobs`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist

from flywheel.config.derived import lora_on
from flywheel.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies import deepspeed_options
from flywheel.workers.strategies.base import TrainStrategy
from flywheel.workers.strategies.frozen_modules import freeze_modules, unfrozen
from flywheel.workers.strategies.fused_old_logprobs import can_fuse_old_logprobs
from flywheel.workers.strategies.hf_model import (
    TORCH_DTYPES,
    batched_outputs,
    distinct_state_tensors,
    pick_device,
)
from flywheel.workers.strategies.lora import (
    add_adapter,
    merge_inputs,
    merged_weights,
    save_adapter,
)
from flywheel.workers.strategies.model_head import POLICY, ModelHead
from flywheel.workers.strategies.offload import (
    CPU_NOTE,
    OPTIMIZER,
    check_part,
    offload_torch,
    on_accelerator,
    onload_torch,
)
from flywheel.workers.strategies.router_loss import router_loss_for
from flywheel.workers.strategies.sequence_packing import check_model_packs, packing_plan
from flywheel.workers.strategies.train_loop import (
    Counts,
    Objective,
    OptimizerStep,
    accumulate,
    build_schedule,
    summed_counts,
)
from flywheel.workers.weight_buckets import cut

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed picks its accelerator
import deepspeed  # noqa: E402

SHM_BUFFER = "/dev/shm/deepspeed_allreduce_buffer"
GATHER_BYTES = 64 << 20  # ZeRO-3 weight sync: parameters gathered at once, at most


def strategy_options(cfg: WorkerConfig) -> dict:
    options = deepspeed_options.strategy_options(cfg.strategy_args.strategy_config)
    if options["torch_adam"] is None:  # unset: torch's AdamW on CPU, DeepSpeed's on GPU
        options["torch_adam"] = not torch.cuda.is_available()
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
                 trainable: bool = True, head: ModelHead = POLICY):
        options = strategy_options(cfg)
        if not trainable and options["zero_stage"] in (1, 2):
            # ZeRO-1/2 shard optimizer states and gradients, which a frozen role (a
            # reference) has none of: its weights are replicated either way (stage 0);
            # DeepSpeed refuses stage 1/2 without an optimizer. ZeRO-3 shards the weights.
            options = {**options, "zero_stage": 0}
        torch.manual_seed(seed)
        self.cfg, self.head = cfg, head
        self.trainable = trainable
        self.device = pick_device()
        self.zero_stage = options["zero_stage"]
        deepspeed.init_distributed(dist_backend="nccl" if self.device.type == "cuda" else "gloo")
        self.rank, self.dp_size = dist.get_rank(), dist.get_world_size()
        unlink_shm_buffer(self.rank)
        model = head.load_hf(model_path, cfg.model_args, self.device, seed)
        # the PEFT wrapper around `model`, whose layers it injected in place (lora.py)
        self.adapter = add_adapter(model, cfg.model_args) if lora_on(cfg.model_args) else None
        if not trainable:
            model.requires_grad_(False)
        elif cfg.model_args.freeze_module_prefix:  # before the optimizer takes the params
            freeze_modules(model, cfg.model_args.freeze_module_prefix)
        # the MoE load-balancing loss of model_args.moe_aux_loss_coef (policy training only)
        self.router = (router_loss_for(model, cfg.model_args)
                       if trainable and head.kind == "policy" else None)
        self.engine, _, _, _ = deepspeed.initialize(
            model=model, config=deepspeed_config(cfg, options, trainable),
            model_parameters=[p for p in model.parameters() if p.requires_grad]
            if trainable else None)
        self.optimizer = self.engine.basic_optimizer if trainable else None
        self.scheduler = (build_schedule(self.optimizer, cfg.training_args, total_steps)
                          if trainable else None)
        self.engine.eval()
        self.packing = packing_plan(cfg.training_args)  # None: padded rows
        if self.packing is not None:
            check_model_packs(self.engine, self.packing)

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        return batched_outputs(lambda micro: self.head.hf_outputs(
            self.engine, micro, False, packing=self.packing)[0],
            batch, self.cfg.infer_batch_size)

    def fuses_old_logprobs(self, rows: int, ppo_epochs: int) -> bool:
        """Every rank holds an equal shard, so all ranks decide alike (the separate pass is
        a collective under ZeRO-3)."""
        return can_fuse_old_logprobs(self.engine.module, self.cfg.training_args, rows,
                                     ppo_epochs)

    # ---- update-loop hooks ---------------------------------------------------------------
    def set_training(self, training: bool) -> None:
        self.engine.train(training)

    def global_counts(self, mini: TokenBatch) -> Counts:
        return summed_counts(mini, self.device)

    def agreed_micro_batches(self, n: int) -> int:
        most = torch.tensor([n], device=self.device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        return int(most)

    def forward_backward(self, micros: list[TokenBatch], objective: Objective,
                         counts: Counts) -> list[dict[str, float]]:
        def backward(loss: torch.Tensor, last: bool) -> None:
            self.engine.set_gradient_accumulation_boundary(last)
            self.engine.backward(loss * self.dp_size, scale_wrt_gas=False)

        chunked = self.zero_stage != 3  # see hf_model.sequence_logprobs
        return accumulate(micros, objective, counts,
                          lambda micro, ent: self.head.hf_outputs(
                              self.engine, micro, ent, chunked, response_only=True,
                              packing=self.packing),
                          backward, self.device, self.router, self.dp_size)

    def optimizer_step(self, max_grad_norm: float) -> OptimizerStep:
        self.engine.step()  # clips by the config's gradient_clipping, then zeroes the grads
        norm = float(self.engine.get_global_grad_norm() or 0.0)
        if not self.engine.fp16_enabled():  # a non-finite norm stops the run (train_loop)
            return OptimizerStep(norm)
        # DeepSpeed's fp16 loss scaler skips an overflowing step itself, as
        # mixed_precision.LossScaler does for hf_train and megatron_train
        return OptimizerStep(norm, applied=self.engine.was_step_applied(),
                             loss_scale=float(self.engine.optimizer.loss_scale))

    # ---- phase switch (measured on a GPU by bench/gpu_checks.py) -------------------------
    def offload(self, part: str) -> str:
        """ZeRO 1-3 with an optimizer: DeepSpeed's own `offload_states` (it knows its flat
        buffers and partitions; a plain `.to` would miss them), optimizer part first
        (fp32 master weights, optimizer state, gradients), the bf16/fp16 parameters after
        the weight sync. DeepSpeed refuses it under `offload_param` (the parameters live on
        the CPU already and ZeRO-3 moves them itself), and without a ZeRO optimizer (stage
        0, the forward-only reference): those get nothing, and a plain torch move.

        On an H100 (0.72B bf16 model, DeepSpeed 0.19.8, FusedAdam) ZeRO 1 and 2 went from
        18.9 GiB to 0.06 and the next step was bit-identical (bench/gpu_checks.py). ZeRO-3's
        next step was bit-identical too, but its memory figure is not yet known: that run
        shared its process with an earlier ZeRO-3 engine, which outlives
        `engine.destroy()`, and the 10.8 GiB left were, by `--diagnose`, that engine's."""
        check_part(part)
        if not on_accelerator(self.device):
            return CPU_NOTE
        if self._params_offloaded():
            return "nothing moved: offload_param keeps the states on the cpu (DeepSpeed)"
        if self.zero_stage == 0 or self.optimizer is None:
            return offload_torch(self.engine.module, self.optimizer, part, self.device)
        if self.zero_stage == 3 and type(self.optimizer).__name__ != "FusedAdam":
            raise RuntimeError(  # config/checks/config.py refuses the config that leads here
                "deepspeed_train: ZeRO-3 offloads optimizer state only for DeepSpeed's "
                "FusedAdam (strategy_config.torch_adam: false); "
                f"this rank has {type(self.optimizer).__name__}")
        from deepspeed.runtime.zero.offload_config import OffloadStateTypeEnum as States

        include = ([States.optim_states, States.hp_params, States.lp_grads,
                    States.contiguous_grad_buffer] if part == OPTIMIZER else [States.lp_params])
        self.engine.offload_states(include=include)
        return f"deepspeed offload_states({[s.value for s in include]})"

    def onload(self) -> str:
        if not on_accelerator(self.device):
            return CPU_NOTE
        if self._params_offloaded():
            return "nothing moved: offload_param keeps the states on the cpu (DeepSpeed)"
        if self.zero_stage == 0 or self.optimizer is None:
            return onload_torch(self.engine.module, self.optimizer, self.device)
        self.engine.reload_states()
        return "deepspeed reload_states()"

    def _params_offloaded(self) -> bool:
        from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

        config = self.engine.zero_offload_param()
        return config is not None and config.device != OffloadDeviceEnum.none

    def _gathered(self, params: list[torch.nn.Parameter] | None = None
                  ) -> contextlib.AbstractContextManager:
        """Full parameters (`params`, default all) on every rank for the duration (ZeRO-3:
        a collective); a no-op otherwise."""
        if self.zero_stage == 3:
            return deepspeed.zero.GatheredParameters(
                list(self.engine.module.parameters()) if params is None else params)
        return contextlib.nullcontext()

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        if self.adapter is not None:
            return {k: v.to("cpu", copy=True) for k, v in self.weights_for_sync()}
        with self._gathered():
            return {k: v.detach().to("cpu", copy=True)
                    for k, v in self.engine.module.state_dict().items()}

    def weights_for_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The weights with no full copy of the model anywhere. ZeRO 0-2 hand out the live
        tensors, as hf_train does. ZeRO-3 gathers runs of parameters of at most
        GATHER_BYTES (a collective: every rank walks the same order) and hands out copies,
        since the carrier keeps a bucket's tensors until the bucket is full while the run
        is partitioned again before the next one. So at most one run gathered and a
        bucket of copies exist at once, where the full state dict gathers the whole model
        on every rank and copies all of it to the CPU (bench/bench_deepspeed_sync.py). A
        tied parameter (lm_head = embed_tokens) goes once. With LoRA, the merged model
        (lora.py `merged_weights`): a run gathers the A and B its adapted weights read too.
        Frozen modules are left out, ungathered (frozen_modules.py)."""
        module = self.engine.module
        named = list(unfrozen(distinct_state_tensors(module),
                              self.cfg.model_args.freeze_module_prefix))
        if self.zero_stage != 3:
            yield from self._as_synced(named)
            return
        for run in cut(named, GATHER_BYTES, full_bytes):
            reads = [t for _, t in run] + [p for n, _ in run for p in self._merge_inputs(n)]
            params = list({id(t): t for t in reads if hasattr(t, "ds_id")}.values())
            with deepspeed.zero.GatheredParameters(params):
                copies = [(name, t.clone()) for name, t in self._as_synced(run)]
            yield from copies

    def _as_synced(self, named: list[tuple[str, torch.Tensor]]
                   ) -> Iterator[tuple[str, torch.Tensor]]:
        """`named` as actor_infer loads it: as it is, or with the adapter merged in."""
        if self.adapter is None:
            return ((name, tensor.detach()) for name, tensor in named)
        dtype = TORCH_DTYPES[self.cfg.model_args.dtype]  # DeepSpeed's parameter dtype
        return merged_weights(self.engine.module, dtype, named)

    def _merge_inputs(self, name: str) -> list[torch.nn.Parameter]:
        return [] if self.adapter is None else merge_inputs(self.engine.module, name)

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.engine.save_checkpoint(os.path.join(path, "deepspeed"), tag="state",
                                    save_latest=False,
                                    exclude_frozen_parameters=self.adapter is not None)
        torch.save({"rng": torch.get_rng_state(),
                    "scheduler": self.scheduler.state_dict() if self.scheduler else None},
                   os.path.join(path, f"rng_{self.rank}.pt"))
        if self.adapter is not None:
            self._save_adapter(os.path.join(path, "adapter"))
        else:
            weights = self.state_dict_for_sync()  # collective under ZeRO-3: all ranks gather
            if self.rank == 0:
                self.engine.module.save_pretrained(os.path.join(path, "model"),
                                                   state_dict=weights)
        dist.barrier()

    def _save_adapter(self, path: str) -> None:
        """The PEFT adapter folder hf_train writes too (adapter_name_or_path loads it)."""
        trained = [p for p in self.engine.module.parameters() if p.requires_grad]
        with self._gathered(trained):  # collective under ZeRO-3: every rank gathers
            if self.rank == 0:
                save_adapter(self.adapter, path)

    def load(self, path: str) -> None:
        self.engine.load_checkpoint(  # with LoRA the checkpoint holds no frozen parameter
            os.path.join(path, "deepspeed"), tag="state",
            load_module_strict=self.adapter is None,
            load_optimizer_states=self.trainable, load_lr_scheduler_states=False)
        state = torch.load(os.path.join(path, f"rng_{self.rank}.pt"), weights_only=True)
        torch.set_rng_state(state["rng"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])


def full_bytes(named: tuple[str, torch.Tensor]) -> int:
    """A tensor's size once gathered (a ZeRO-3 parameter's own shape is a placeholder)."""
    tensor = named[1]
    return getattr(tensor, "ds_numel", tensor.numel()) * tensor.element_size()


def unlink_shm_buffer(rank: int) -> None:
    """Remove this rank's shared-memory all-reduce file once every rank has mapped it."""
    dist.barrier()
    name = (f"{SHM_BUFFER}_{os.getuid()}_{os.environ.get('MASTER_ADDR')}_"
            f"{os.environ.get('MASTER_PORT')}_{rank}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)
