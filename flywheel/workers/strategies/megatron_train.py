"""megatron_train: a megatron-core GPTModel built from a HF Qwen2/Llama checkpoint, or a
Qwen2-MoE / Qwen3-MoE one on megatron-core's MoE layers.

Ranks and data. The role's workers form one torch.distributed group (see registry
`process_group`), split by megatron into tensor- (TP) and pipeline-parallel (PP) groups;
data parallelism (DP) is what remains. The pipeline hands every rank its own equal
shard, so the ranks of one model replica (its TP x PP "model-parallel group") first
all-gather their shards and work on the union; each rank returns the log-probs of its own
shard. One optimizer step consumes per_device_train_batch_size *
gradient_accumulation_steps rows per replica, as `checks.data_parallel_size` assumes.

Loss and gradients. The update is the shared loop (`train_loop.py`); its
`forward_backward` hook runs a mini-batch's micro-batches through megatron's schedule
(`get_forward_backward_func`, which also drives PP) with `calculate_per_token_loss`, so the
loss function's value is back-propagated as is. `counts` are all-reduced over DP, making
each replica's loss its share of the global mini-batch loss; gradients are then *summed*
over DP by megatron-core's DDP, and tied-embedding gradients summed between the first and
last PP stage by its `finalize_model_grads` (megatron_ddp.py: buckets, the overlapped
reduce, the distributed optimizer). The global grad norm counts TP-replicated parameters
once. Log-probs are a vocab-parallel log-softmax (max, sum-exp and the target logit
reduced over TP), equal to HF's. As in HF (`nn.Embedding(padding_idx=pad)`), the pad
token's input embedding gets no gradient.
TP needs the vocabulary and the KV heads to divide by its size (no vocab padding yet).
`sequence_parallel` (TP >= 2) splits the activations outside attention and the MLP (the
norms, the residual stream, dropout) along the sequence over the TP ranks, as megatron-core
does (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 4.2.2): the embedding's output is scattered, the linear layers all-gather
and reduce-scatter where they all-reduced before, and each norm's weight gradient is summed
over TP. Its norms are torch's RMSNorm, marked for that sum (`SequenceParallelRMSNorm`;
megatron's own torch-norm wrapper refuses SP, its fused one needs apex). Sequences are
right-padded to a multiple of TP.
The critic is the same model with `ValueOutput` in place of the output layer (untied).

Old log-probs stay a separate forward here, even for a one-step update (the base
`fuses_old_logprobs` says no; fused_old_logprobs.py is hf_train's and deepspeed_train's):
the objective runs on the last PP stage only, over the union of the replica's shards,
so the training forward's log-probs are neither on every rank nor of the rank's own rows,
and the whole-batch off-policy metrics would need their own gather and broadcast.

Precision: fp32 parameters (the masters), their fp32 gradient buffers and AdamW's fp32
moments; bf16/fp16 in `model_args.dtype` run the forward under autocast, and fp16
back-propagates a dynamically scaled loss (mixed_precision.py, whose skip decision comes
from the global grad norm, the same on every rank). Context parallelism is refused with
its reason (megatron_options.py).

Pipeline chunks. With `virtual_pipeline_model_parallel_size` each rank builds that many
model chunks (`chunk_layers`), each in its own DDP, and megatron-core's interleaved schedule
runs them (its micro-batches in groups of PP).

MoE. The experts are megatron-core's (`moe_config`, `layer_spec`), split over
`expert_model_parallel_size` ranks (megatron_weights.ep_shard at load, gathered at sync);
with `expert_tensor_parallel_size` (1 or TP) each expert's fc1 / fc2 is sliced over that
many ranks as a dense MLP's (megatron-core's expert-TP group; its dispatcher gathers the
tokens there), gathered at sync. `model_args.moe_aux_loss_coef` is megatron's router aux
loss at router_loss.py's scale (`_aux_share`).

On CPU megatron-core still calls torch.cuda in a few places (RoPE, RNG tracker, p2p, the
DDP buffers, the optimizer's flags and its `torch.cuda.FloatTensor` type checks), and its
linear layers replay only CUDA's autocast in backward (so bf16/fp16 backward fails on
CPU); the tests patch those in their workers. Its home is the GPU.
Checkpoints: each (TP, PP) coordinate's model/optimizer/scheduler/loss scale from DP rank
0, under the distributed optimizer each rank's own slice of the AdamW state
(megatron_ddp.save_slices), every rank's RNG, and the full model in HF format (in
`model_args.dtype`, as the weights actor_infer receives) from rank 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core import tensor_parallel
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.moe import moe_utils
from megatron.core.transformer.moe.moe_utils import (
    clear_aux_losses_tracker,
    get_moe_layer_wise_logging_tracker,
)
from megatron.core.transformer.moe.router import TopKRouter
from megatron.core.transformer.transformer_block import (
    TransformerBlockSubmodules,
    get_num_layers_to_build,
)
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
from safetensors.torch import save_file
from transformers import AutoConfig

from flywheel.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies import megatron_options
from flywheel.workers.strategies.base import TrainStrategy
from flywheel.workers.strategies.hf_model import pick_device
from flywheel.workers.strategies.megatron_ddp import (
    DistributedStep,
    Schedules,
    clipped_norm,
    distributed_optimizer,
    load_slices,
    offload_megatron,
    onload_megatron,
    ready_grads,
    save_slices,
    wrap_in_ddp,
    zero_grads,
)
from flywheel.workers.strategies.megatron_parallel import (
    concat_batches,
    freeze_padding_row,
    gather_model_parallel,
    load_hf_tensors,
    micro_rows,
    vocab_parallel_logprobs,
    widened_to_multiple,
)
from flywheel.workers.strategies.megatron_weights import (
    DecoderSpec,
    ep_shard,
    ep_unshard,
    hf_to_megatron,
    is_expert,
    megatron_to_hf,
    to_global_layers,
    to_local_layers,
    tp_shard,
    tp_unshard,
)
from flywheel.workers.strategies.mixed_precision import MixedPrecision
from flywheel.workers.strategies.model_head import POLICY, ModelHead, init_value_head
from flywheel.workers.strategies.router_loss import METRIC as ROUTER_METRIC
from flywheel.workers.strategies.strategy_config import require
from flywheel.workers.strategies.train_loop import (
    Counts,
    Objective,
    OptimizerStep,
    build_adamw,
    build_schedule,
    optimizer_and_schedule,
    summed_counts,
)

# megatron-core 0.16's router gate (moe_utils.RouterGatingLinearFunction) tests
# `te_general_gemm is not None`, a name it imports only with Transformer Engine: without
# TE every MoE forward raised NameError. None is what the test means: torch's matmul.
if not hasattr(moe_utils, "te_general_gemm"):
    moe_utils.te_general_gemm = None


def strategy_options(cfg: WorkerConfig) -> dict:
    return megatron_options.strategy_options(cfg.strategy_args.strategy_config)


def moe_config(spec: DecoderSpec, options: dict, aux_coef: float | None) -> dict:
    """megatron-core's MoE settings for a Qwen2-MoE / Qwen3-MoE model (none for a dense
    one). Routing as transformers' blocks: softmax over the experts then the top k
    (`moe_router_pre_softmax`), or, with `norm_topk_prob`, the top k logits softmaxed among
    themselves, the same renormalised probabilities; no token dropped (no capacity). The
    load-balancing loss is megatron's `aux_loss` (Switch Transformer's, Fedus et al. 2021,
    eq. 4-6, per layer) at `model_args.moe_aux_loss_coef`."""
    if not spec.moe:
        return {}
    return dict(
        num_moe_experts=spec.num_experts, moe_router_topk=spec.top_k,
        moe_ffn_hidden_size=spec.moe_ffn_hidden_size,
        moe_router_pre_softmax=not spec.norm_topk_prob,
        moe_router_load_balancing_type="aux_loss" if aux_coef else "none",
        moe_aux_loss_coeff=aux_coef or 0.0,
        moe_token_dispatcher_type=options["moe_token_dispatcher_type"],
        moe_shared_expert_intermediate_size=spec.shared_expert_size or None,
        moe_shared_expert_gate=bool(spec.shared_expert_size),
        expert_model_parallel_size=options["expert_model_parallel_size"],
        expert_tensor_parallel_size=expert_tp(options))


def expert_tp(options: dict) -> int:
    """Ranks each routed expert's linear layers are sliced over: unset is 1 here, each
    expert whole on its rank (megatron-core's unset is TP; the numbers are the same)."""
    return options["expert_tensor_parallel_size"] or 1


def transformer_config(spec: DecoderSpec, options: dict, on_cpu: bool,
                       aux_coef: float | None = None) -> TransformerConfig:
    recompute = options["recompute_granularity"]
    return TransformerConfig(
        qk_layernorm=spec.qk_norm, **moe_config(spec, options, aux_coef),
        num_layers=spec.num_layers, hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_heads, num_query_groups=spec.num_kv_heads,
        kv_channels=spec.head_dim, ffn_hidden_size=spec.ffn_hidden_size,
        normalization="RMSNorm", layernorm_epsilon=spec.norm_eps, gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, add_qkv_bias=spec.qkv_bias,
        hidden_dropout=0.0, attention_dropout=0.0, params_dtype=torch.float32,
        pipeline_dtype=torch.float32, use_cpu_initialization=on_cpu,
        perform_initialization=False, bias_dropout_fusion=False, apply_rope_fusion=False,
        masked_softmax_fusion=False, gradient_accumulation_fusion=False,
        persist_layer_norm=False, calculate_per_token_loss=True,
        tensor_model_parallel_size=options["tensor_model_parallel_size"],
        pipeline_model_parallel_size=options["pipeline_model_parallel_size"],
        virtual_pipeline_model_parallel_size=interleaved_chunks(options),
        # interleaved, Megatron-LM overlaps the stages' sends and receives (its default
        # --overlap-p2p-communication, batch_p2p_comm = not that): each direction on its own
        # communicator. Batched in one, at PP 2 (both neighbours the same rank) gloo matched
        # an activation's send with a gradient's receive (same shapes, no error)
        overlap_p2p_comm=interleaved_chunks(options) is not None,
        batch_p2p_comm=interleaved_chunks(options) is None,
        account_for_embedding_in_pipeline_split=options[
            "account_for_embedding_in_pipeline_split"],
        account_for_loss_in_pipeline_split=options["account_for_loss_in_pipeline_split"],
        sequence_parallel=options["sequence_parallel"],
        bias_activation_fusion=options["bias_activation_fusion"],  # torch.jit SwiGLU
        recompute_granularity=recompute,
        recompute_method="uniform" if recompute == "full" else None,
        recompute_num_layers=1 if recompute == "full" else None,
    )


class SequenceParallelRMSNorm(torch.nn.RMSNorm):
    """torch's RMSNorm (what megatron-core's WrappedTorchNorm builds without apex) whose
    weight carries megatron's `sequence_parallel` flag, so that `finalize_model_grads`
    sums its gradient over the TP ranks when each saw 1/TP of the sequence."""

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5,
                 **unused):
        super().__init__(hidden_size, eps=eps)
        self.weight.sequence_parallel = config.sequence_parallel


def interleaved_chunks(options: dict) -> int | None:
    """Model chunks per pipeline rank under the interleaved schedule; None without it
    (Megatron-LM treats a virtual size of 1 as the plain schedule too)."""
    size = options["virtual_pipeline_model_parallel_size"]
    return size if size and size > 1 else None


def chunk_layers(config: TransformerConfig, pp_rank: int, vp_stage: int | None) -> range:
    """Global indices of the decoder layers of one model chunk, as megatron-core places
    them (`get_transformer_layer_offset`, `get_num_layers_to_build`): with the interleaved
    schedule chunk v of rank p holds the (v * PP + p)-th of PP x VPP equal runs of layers
    (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM", section 2.2); `account_for_embedding_in_pipeline_split` /
    `account_for_loss_in_pipeline_split` count the embedding / the loss as one layer of
    the split, so the very first / very last chunk builds one decoder layer fewer."""
    offset = get_transformer_layer_offset(config, vp_stage=vp_stage, pp_rank=pp_rank)
    return range(offset, offset + get_num_layers_to_build(config, vp_stage, pp_rank))


def require_pipeline_split(num_layers: int, options: dict) -> None:
    """The split megatron-core asserts, as one line naming the keys (at start: the layer
    count is the model's)."""
    pp, vpp = options["pipeline_model_parallel_size"], interleaved_chunks(options) or 1
    units = num_layers + options["account_for_embedding_in_pipeline_split"] + options[
        "account_for_loss_in_pipeline_split"]
    counted = "" if units == num_layers else (f" (+ the embedding and/or the loss counted "
                                              f"as layers: {units})")
    require(units % (pp * vpp) == 0, "pipeline_model_parallel_size",
            f"{num_layers} layers{counted} do not split into {pp} pipeline stages x {vpp} "
            f"model chunks of equal size")


def layer_spec(config: TransformerConfig, vp_stage: int | None) -> TransformerBlockSubmodules:
    """megatron-core's local GPT layer spec with SequenceParallelRMSNorm for every norm
    (the same computation at any setting; under SP the norms' gradients are summed), for
    the layers of one model chunk; with experts its MoELayer (TopKRouter, the token
    dispatcher, SequentialMLP experts, the shared expert)."""
    layer = get_gpt_layer_local_spec(num_experts=config.num_moe_experts,
                                     qk_layernorm=config.qk_layernorm, normalization="RMSNorm")
    layer.submodules = dataclasses.replace(layer.submodules,
                                           input_layernorm=SequenceParallelRMSNorm,
                                           pre_mlp_layernorm=SequenceParallelRMSNorm)
    if config.qk_layernorm:  # per head; megatron sums their gradients over TP by name
        attention = layer.submodules.self_attention
        attention.submodules = dataclasses.replace(attention.submodules,
                                                   q_layernorm=SequenceParallelRMSNorm,
                                                   k_layernorm=SequenceParallelRMSNorm)
    return TransformerBlockSubmodules(
        layer_specs=[layer] * get_num_layers_to_build(config, vp_stage),
        layer_norm=SequenceParallelRMSNorm)


class ValueOutput(torch.nn.Module):
    """The critic's head in place of megatron's output layer: one scalar per position.

    Replicated on every TP rank (the hidden states it reads are), called the way GPTModel
    calls its output layer, so megatron's own forward and schedules stay untouched."""

    def __init__(self, hidden_size: int, seed: int):
        super().__init__()
        self.score = torch.nn.Linear(hidden_size, 1)
        init_value_head(self.score, seed)

    def forward(self, hidden: torch.Tensor, weight=None, runtime_gather_output=None):
        return self.score(hidden), None  # [L, B, 1] like megatron's logits, and no bias


class MegatronTrainStrategy(TrainStrategy):
    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int, total_steps: int,
                 trainable: bool = True, head: ModelHead = POLICY):
        options = strategy_options(cfg)
        self.cfg, self.head, self.trainable, self.device = cfg, head, trainable, pick_device()
        self.model_path = model_path
        if not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        tp, pp = options["tensor_model_parallel_size"], options["pipeline_model_parallel_size"]
        vpp, ep = interleaved_chunks(options), options["expert_model_parallel_size"]
        self.spec = DecoderSpec.from_hf(AutoConfig.from_pretrained(model_path))
        self.aux_coef = self._require_moe_layout(options, cfg, trainable, head)
        ps.initialize_model_parallel(
            tp, pp, virtual_pipeline_model_parallel_size=vpp, expert_model_parallel_size=ep,
            expert_tensor_parallel_size=expert_tp(options) if self.spec.moe else None)
        self.ep_rank, self.ep_size = ps.get_expert_model_parallel_rank(), ep
        self.etp_size = expert_tp(options) if self.spec.moe else 1
        self.etp_rank = ps.get_expert_tensor_parallel_rank() if self.spec.moe else 0
        torch.manual_seed(seed)
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
        require_pipeline_split(self.spec.num_layers, options)
        require(self.spec.vocab_size % tp == 0 and self.spec.num_kv_heads % tp == 0,
                "tensor_model_parallel_size", f"vocab {self.spec.vocab_size} and "
                f"{self.spec.num_kv_heads} KV heads must both divide by {tp}")
        self.tp_rank, self.tp_size = ps.get_tensor_model_parallel_rank(), tp
        self.first, self.last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
        # A critic's head is its own; only the policy ties its output layer to the embedding.
        self.tied = self.spec.tied and head.kind == "policy"
        megatron_options.require_policy_for_sequence_parallel(head.kind == "value", options)
        config = transformer_config(self.spec, options, self.device.type == "cpu",
                                    self.aux_coef)
        # one model chunk per virtual stage (one without the interleaved schedule), built
        # in order: a tied embedding's first/last copies meet in megatron's all-reduce
        stages = [None] if vpp is None else list(range(vpp))
        self.chunks = [GPTModel(
            config, layer_spec(config, vp),
            vocab_size=self.spec.vocab_size, max_sequence_length=self.spec.max_positions,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            share_embeddings_and_output_weights=self.tied,
            position_embedding_type="rope", rotary_base=int(self.spec.rope_theta), vp_stage=vp,
        ).to(self.device) for vp in stages]
        pp_rank = ps.get_pipeline_model_parallel_rank()
        self.chunk_layers = [chunk_layers(config, pp_rank, vp) for vp in stages]
        self.model = torch.nn.ModuleList(self.chunks)  # every parameter this rank holds
        for module in self.model.modules():
            if isinstance(module, TopKRouter):  # the aux loss's scale: see _aux_share
                module.calculate_per_token_loss = False
        self.aux_share: float | None = None
        full = hf_to_megatron(load_hf_tensors(model_path), self.spec)
        if head.kind == "value":
            full = {k: v for k, v in full.items() if not k.startswith("output_layer.")}
            if self.last:
                last = self.chunks[-1]
                last.output_layer = ValueOutput(self.spec.hidden_size, seed).to(self.device)
                full |= {f"output_layer.{k}": v.detach().cpu() for k, v in
                         last.output_layer.state_dict().items()}
        self._load_megatron_state(full)
        if self.first and self.spec.pad_token_id is not None:
            freeze_padding_row(self.chunks[0].embedding.word_embeddings,
                               self.spec.pad_token_id)
        self.precision = MixedPrecision.for_role(cfg.model_args.dtype, self.device, trainable)
        self.sequence_multiple = tp if options["sequence_parallel"] else 1
        # the interleaved schedule wants its micro-batches in groups of PP
        self.micro_multiple = pp if vpp else 1
        self.ddps = self.dopt = None
        if trainable:  # megatron_ddp.py: DDP's buffers, and the distributed optimizer
            self.ddps = wrap_in_ddp(self.chunks, options)
            named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
            # under the distributed optimizer the experts have their own AdamW (their
            # buffers are cut over other ranks); else one AdamW over everything
            split = options["use_distributed_optimizer"] and self.spec.moe
            self.optimizer = build_adamw([p for n, p in named if not (split and is_expert(n))],
                                         cfg.training_args)
            experts = build_adamw([p for n, p in named if is_expert(n)],
                                  cfg.training_args) if split else None
            if options["use_distributed_optimizer"]:
                self.dopt = distributed_optimizer(self.ddps, self.optimizer, experts)
            # after the distributed optimizer swapped in its slices: the schedule's
            # learning rate reaches the param groups AdamW steps
            self.scheduler = build_schedule(self.optimizer, cfg.training_args, total_steps)
            if experts is not None:
                self.scheduler = Schedules([self.scheduler, build_schedule(
                    experts, cfg.training_args, total_steps)])
        else:
            self.optimizer, self.scheduler = optimizer_and_schedule(
                self.model, cfg.training_args, total_steps, trainable)
        self.model.eval()

    def _require_moe_layout(self, options: dict, cfg: WorkerConfig, trainable: bool,
                            head: ModelHead) -> float | None:
        """What an MoE model needs (known only from the model), and the load-balancing
        loss's coefficient (policy training only, as router_loss.py)."""
        spec, ep, etp = self.spec, options["expert_model_parallel_size"], expert_tp(options)
        for key, size in (("expert_model_parallel_size", ep),
                          ("expert_tensor_parallel_size", etp)):
            require(size == 1 or spec.moe, key, f"a dense model ({spec.num_layers} layers, "
                    f"no experts) has no experts to split: set 1")
        if spec.moe:
            require(spec.num_experts % ep == 0, "expert_model_parallel_size",
                    f"{spec.num_experts} experts do not split over {ep} ranks")
            require(spec.moe_ffn_hidden_size % etp == 0, "expert_tensor_parallel_size",
                    f"the experts' {spec.moe_ffn_hidden_size} intermediate channels do not "
                    f"split over {etp} ranks")
            require(options["tensor_model_parallel_size"] == 1 or options["sequence_parallel"],
                    "sequence_parallel", "megatron-core trains an MoE model under tensor "
                    "parallelism only with sequence parallelism (its MoELayer raises "
                    "otherwise): set true")
        setting = cfg.model_args.moe_aux_loss_coef
        if setting in (None, 0) or not trainable or head.kind != "policy":
            return None
        require(spec.moe, "moe_aux_loss_coef", "this model has no MoE router to balance")
        coef = spec.router_aux_loss_coef if setting == "model" else setting
        require(coef is not None, "moe_aux_loss_coef", "'model': the checkpoint's config has "
                "no router_aux_loss_coef; write the coefficient")
        return float(coef)

    # ---- weights -----------------------------------------------------------------------
    def _load_megatron_state(self, full: dict[str, torch.Tensor]) -> None:
        for chunk, layers in zip(self.chunks, self.chunk_layers):
            local = to_local_layers(full, layers, chunk.pre_process, chunk.post_process,
                                    self.tied)
            if self.spec.moe:  # this EP rank's experts, renumbered from 0
                local = ep_shard(local, self.ep_rank, self.ep_size, self.spec.num_experts)
            # the experts' slices are this rank's over the expert-tensor-parallel ranks
            shards = {k: tp_shard(k, v, *((self.etp_rank, self.etp_size) if is_expert(k)
                                          else (self.tp_rank, self.tp_size)))
                      for k, v in local.items()}
            missing, unexpected = chunk.load_state_dict(shards, strict=False)
            missing = [k for k in missing if not k.endswith("_extra_state")]
            if missing or unexpected:
                raise ValueError(f"megatron weights mismatch: missing={missing} "
                                 f"unexpected={unexpected}")

    def _chunk_states(self) -> list[dict[str, torch.Tensor]]:
        return [{k: v for k, v in chunk.state_dict().items() if not k.endswith("_extra_state")}
                for chunk in self.chunks]

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        self._require_head("policy", "weights for actor_infer")
        # actor_infer loads model_args.dtype; cast before the gathers, which then move half
        tp_group = ps.get_tensor_model_parallel_group()
        etp_group = ps.get_expert_tensor_parallel_group() if self.spec.moe else None
        here = {}  # this rank's chunks, whole over TP, layers numbered globally
        for state, layers in zip(self._chunk_states(), self.chunk_layers):
            full = {}
            for name, tensor in state.items():
                tensor = tensor.detach().to(self.precision.compute_dtype)
                # an expert's slices are over the expert-TP ranks (whole at size 1)
                group, size = ((etp_group, self.etp_size) if is_expert(name)
                               else (tp_group, self.tp_size))
                if size == 1:
                    full[name] = tensor.cpu()
                    continue
                parts = [torch.empty_like(tensor) for _ in range(size)]
                dist.all_gather(parts, tensor.contiguous(), group=group)
                full[name] = tp_unshard(name, [p.cpu() for p in parts])
            here |= to_global_layers(full, layers.start)
        if self.ep_size > 1:  # every EP rank's experts, numbered globally
            experts: list[dict] = [{}] * self.ep_size
            dist.all_gather_object(experts, {k: v for k, v in here.items() if is_expert(k)},
                                   group=ps.get_expert_model_parallel_group())
            here = {k: v for k, v in here.items() if not is_expert(k)} | ep_unshard(
                experts, self.spec.num_experts)
        stages: list[dict] = [{}] * ps.get_pipeline_model_parallel_world_size()
        dist.all_gather_object(stages, here, group=ps.get_pipeline_model_parallel_group())
        merged = {k: v for stage in stages for k, v in stage.items()}
        return megatron_to_hf(merged, self.spec)

    # ---- compute -----------------------------------------------------------------------
    def forward(self, batch: TokenBatch) -> torch.Tensor:
        union, mine = gather_model_parallel(batch)
        rows = micro_rows(len(union), self.cfg.infer_batch_size, self.micro_multiple)
        union = widened_to_multiple(union.trimmed(), self.sequence_multiple)
        results = self._run(union.chunks(rows), None, None, forward_only=True)
        width = union.input_ids.shape[1]
        outputs = torch.zeros((len(union), width), dtype=torch.float32, device=self.device)
        if self.last:
            outputs = torch.cat([r["outputs"] for r in results]).to(self.device)
        dist.broadcast(outputs, ps.get_pipeline_model_parallel_last_rank(),
                       group=ps.get_pipeline_model_parallel_group())
        out = outputs.cpu()[mine][:, :batch.input_ids.shape[1]]
        return F.pad(out, (0, batch.input_ids.shape[1] - out.shape[1]))

    def train_step(self, batch: TokenBatch, loss_fn: Objective, ppo_epochs: int = 1) -> dict:
        """The loop over the union of the model replica's shards (see the module doc)."""
        union, _ = gather_model_parallel(batch)
        return super().train_step(union, loss_fn, ppo_epochs)

    # ---- update-loop hooks ---------------------------------------------------------------
    def set_training(self, training: bool) -> None:
        self.model.train(training)

    def global_counts(self, mini: TokenBatch) -> Counts:
        return summed_counts(mini, self.device, ps.get_data_parallel_group())

    def forward_backward(self, micros: list[TokenBatch], objective: Objective,
                         counts: Counts) -> list[dict[str, float]]:
        # pipeline stages pass equal shapes: one width for the whole mini-batch
        mini = widened_to_multiple(concat_batches(micros).trimmed(), self.sequence_multiple)
        zero_grads(self.ddps, self.dopt or self.optimizer)
        # the losses are shares of the mini-batch's counts: any cut gives the same gradient
        rows = micro_rows(len(mini), len(micros[0]), self.micro_multiple)
        results = self._run(mini.chunks(rows), objective, counts, forward_only=False)
        if self.aux_coef:
            self._report_aux_loss(results, len(mini) // rows)
        return results

    def _report_aux_loss(self, results: list[dict], micros: int) -> None:
        """The load-balancing loss per micro-batch (coefficient included, summed over the
        layers), as router_loss.py reports it: megatron's router tracks each layer's
        loss / coefficient summed over the micro-batches; its layers are on every stage."""
        tracked = get_moe_layer_wise_logging_tracker().get("load_balancing_loss")
        total = (tracked["values"].sum() if tracked else torch.zeros(())).to(self.device)
        # under sequence parallelism each TP rank routed 1/TP of the tokens: its share
        dist.all_reduce(total, group=ps.get_tensor_model_parallel_group())
        dist.all_reduce(total, group=ps.get_pipeline_model_parallel_group())
        clear_aux_losses_tracker()
        for metrics in results:
            metrics[ROUTER_METRIC] = float(total) * self.aux_coef / micros

    def optimizer_step(self, max_grad_norm: float) -> OptimizerStep:
        # the schedule's finalize_model_grads has reduced the gradients (sums, so unscaling
        # after them is exact)
        grads = ready_grads(self.model, self.dopt)
        self.precision.unscale_(t for _, t in grads.named)
        norm = clipped_norm(grads, max_grad_norm, self.tied,
                            ps.get_expert_tensor_model_pipeline_parallel_group()
                            if self.spec.moe else None, sliced=self.dopt is not None)
        return self.precision.step(DistributedStep(self.dopt) if self.dopt else self.optimizer,
                                   norm)

    def shared_loss_metrics(self, sums: dict[str, float], micro_steps: int
                            ) -> tuple[dict[str, float], int]:
        """Loss metrics exist on the last PP stage only; every rank reports the same."""
        box = [(sums, micro_steps)]
        dist.broadcast_object_list(box, ps.get_pipeline_model_parallel_last_rank(),
                                   group=ps.get_pipeline_model_parallel_group())
        return box[0]

    def _run(self, micros: list[TokenBatch], objective: Objective | None,
             counts: Counts | None, forward_only: bool) -> list[dict]:
        """Megatron's schedule over `micros` (equal shapes); per-micro results (last stage)."""
        width = micros[0].input_ids.shape[1]
        causal = torch.triu(torch.ones(width, width, dtype=torch.bool, device=self.device),
                            diagonal=1)[None, None]  # [1, 1, L, L], True = masked
        positions = torch.arange(width, device=self.device)[None]

        def step(data, model):
            micro = next(data).to(self.device)
            # the routers leave padding out of the load balance (True = padding)
            routing = {"padding_mask": micro.attention_mask == 0} if self.spec.moe else {}
            with self.precision.autocast():
                logits = model(input_ids=micro.input_ids, attention_mask=causal,
                               position_ids=positions.expand(len(micro), -1), **routing)
            return logits, partial(self._loss, micro, objective, counts)

        self._aux_share(len(micros), forward_only)

        context = torch.no_grad() if forward_only else contextlib.nullcontext()
        chunks = self.ddps if self.ddps is not None else self.chunks
        # the interleaved schedule reads each chunk's micro-batches from its own iterator
        data = iter(micros) if len(chunks) == 1 else [iter(micros) for _ in chunks]
        with context:
            return get_forward_backward_func()(
                forward_step_func=step, data_iterator=data, model=chunks,
                num_microbatches=len(micros), seq_length=width,
                micro_batch_size=len(micros[0]), forward_only=forward_only)

    def _loss(self, micro: TokenBatch, objective: Objective | None, counts: Counts | None,
              logits: torch.Tensor):
        with_entropy = objective is not None and objective.needs_entropy
        if self.head.kind == "policy":
            outputs, entropy = vocab_parallel_logprobs(logits, micro.input_ids, with_entropy,
                                                       self.head.distribution)
        else:  # V(s_t) from the hidden state after tokens < t, like model_head.token_values
            outputs, entropy = F.pad(logits[:, :-1, 0].float(), (1, 0)), None  # [B, L]
        if objective is None:  # forward only: hand the outputs back
            return torch.zeros((), device=logits.device), torch.ones((), dtype=torch.int), {
                "outputs": outputs.detach().cpu()}
        loss, metrics = objective(outputs, entropy, micro, counts)
        if self.aux_share:  # the schedule multiplies by grad_scale_func: see _aux_share
            return loss / self.aux_share, torch.ones((), dtype=torch.int), metrics
        # the schedule back-propagates what this returns: the scaled loss under fp16
        return self.precision.scaled(loss), torch.ones((), dtype=torch.int), metrics

    def _aux_share(self, micros: int, forward_only: bool) -> None:
        """The load-balancing loss's gradient at router_loss.py's scale: 1 / (micro-batches
        x data-parallel ranks) of each micro-batch's loss (Megatron's mean over all
        micro-batches of all ranks), times the fp16 loss scale. megatron-core's router
        back-propagates its loss times `grad_scale_func(1)` (the schedule sets that scale
        after each forward; with its per-token flag off, the routers skip their token
        weighting, which assumes equal micro-batches), and the schedule applies the same
        function to the main loss on the last stage: so `_loss` returns the main loss
        divided by the share, and the function multiplies by share x loss scale."""
        config = self.chunks[0].config
        if not self.aux_coef or forward_only:
            self.aux_share, config.grad_scale_func = None, None
            return
        self.aux_share = 1.0 / (micros * ps.get_data_parallel_world_size())
        scale = float(self.precision.scaled(torch.ones(()))) * self.aux_share
        config.grad_scale_func = lambda t: t * scale

    # ---- phase switch (offload.py; unverified on GPU) -----------------------------------
    def offload(self, part: str) -> str:
        """This rank's shard: AdamW's state (torch's, over the whole parameters or the
        distributed optimizer's slices), DDP's gradient buffers and the parameters
        (megatron_ddp.offload_megatron)."""
        return offload_megatron(self.model, self.ddps, self.optimizer, part, self.device)

    def onload(self) -> str:
        return onload_megatron(self.model, self.ddps, self.optimizer, self.device)

    # ---- checkpoints -------------------------------------------------------------------
    def _shard_file(self, path: str) -> str:
        coords = f"tp{self.tp_rank}_pp{ps.get_pipeline_model_parallel_rank()}"
        if self.ep_size > 1:  # each EP rank holds its own experts
            coords += f"_ep{self.ep_rank}"
        if self.etp_size > 1:  # and each expert-TP rank its slices of them
            coords += f"_etp{self.etp_rank}"
        return os.path.join(path, "megatron", f"{coords}.pt")

    def _writes_shard(self) -> bool:
        """One writer per distinct shard: DP rank 0, or with experts split, the first
        rank of each (EP, expert-TP) coordinate's expert-data-parallel group."""
        if self.ep_size > 1 or self.etp_size > 1:
            return ps.get_expert_data_parallel_rank() == 0
        return ps.get_data_parallel_rank() == 0

    def save(self, path: str) -> None:
        os.makedirs(os.path.join(path, "megatron"), exist_ok=True)
        if self._writes_shard():
            torch.save({"model": self._chunk_states(),  # one per model chunk
                        "optimizer": (self.optimizer.state_dict()
                                      if self.optimizer and not self.dopt else None),
                        "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                        "loss_scaler": self.precision.state_dict()},
                       self._shard_file(path))
        if self.dopt is not None:
            save_slices(self.dopt, path)
        rank = dist.get_rank()
        torch.save({"rng": torch.get_rng_state()}, os.path.join(path, f"rng_{rank}.pt"))
        if self.head.kind != "policy":  # a critic is resumed from its shards only
            dist.barrier()
            return
        weights = self.state_dict_for_sync()  # collective: every rank takes part
        if rank == 0:
            os.makedirs(os.path.join(path, "model"), exist_ok=True)
            AutoConfig.from_pretrained(self.model_path).save_pretrained(
                os.path.join(path, "model"))
            save_file({k: v.contiguous() for k, v in weights.items()},
                      os.path.join(path, "model", "model.safetensors"))
        dist.barrier()

    def load(self, path: str) -> None:
        state = torch.load(self._shard_file(path), weights_only=True)
        saved = state["model"] if isinstance(state["model"], list) else [state["model"]]
        if len(saved) != len(self.chunks):
            raise ValueError(f"checkpoint {path} holds {len(saved)} model chunks per rank, "
                             f"this run builds {len(self.chunks)} (resume with the same "
                             f"virtual_pipeline_model_parallel_size)")
        for chunk, chunk_state in zip(self.chunks, saved):
            missing, unexpected = chunk.load_state_dict(chunk_state, strict=False)
            missing = [k for k in missing if not k.endswith("_extra_state")]
            if missing or unexpected:
                raise ValueError(f"checkpoint {path} does not match the model: missing "
                                 f"{missing}, unexpected {unexpected}")
        if self.dopt is not None:
            load_slices(self.dopt, path)
        elif self.optimizer is not None and state["optimizer"] is None:
            raise ValueError(f"checkpoint {path} holds no optimizer state for this "
                             f"optimizer: it was saved with use_distributed_optimizer")
        elif self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.precision.load_state_dict(state.get("loss_scaler"))  # absent before fp16 scaling
        rng = torch.load(os.path.join(path, f"rng_{dist.get_rank()}.pt"), weights_only=True)
        torch.set_rng_state(rng["rng"])
