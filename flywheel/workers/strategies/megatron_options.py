"""megatron_train's strategy_config: its keys, their defaults, and what it refuses.

Light (no torch, no megatron): `platform validate` runs `check` through the backend catalog
(registry.py `config_check`), and the backend runs `strategy_options` again when it
starts, so a config it would refuse at start is refused by validate first. What only the
model can tell (layers per pipeline stage, heads and vocabulary per tensor rank) is checked
at start (megatron_train.py).
"""

from __future__ import annotations

from typing import Any

from flywheel.config.schema import PipelineConfig, WorkerConfig
from flywheel.platform.config.errors import MissingMemorySaving
from flywheel.workers.strategies.strategy_config import checked_config, require

# The MoE families megatron_train builds on megatron-core's MoE layers (megatron_weights.py
# converts their weights); here so that `platform convert` can tell without torch.
MOE_MODEL_TYPES = ("qwen2_moe", "qwen3_moe")
DEFAULTS = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
            "context_parallel_size": 1, "expert_model_parallel_size": 1,
            "expert_tensor_parallel_size": None, "moe_token_dispatcher_type": "allgather",
            "sequence_parallel": False, "use_distributed_optimizer": False,
            "recompute_granularity": None, "virtual_pipeline_model_parallel_size": None,
            "apply_rope_fusion": False, "overlap_grad_reduce": False, "ddp_bucket_size": None,
            "account_for_loss_in_pipeline_split": False,
            "account_for_embedding_in_pipeline_split": False, "bias_activation_fusion": False,
            "moe_grouped_gemm": False}
# Acting (megatron_ddp.py, megatron_train.py): expert_model_parallel_size,
# expert_tensor_parallel_size (unset: 1, each expert whole on its rank; megatron-core's own
# unset default is TP, the same numbers), sequence_parallel, use_distributed_optimizer,
# overlap_grad_reduce, ddp_bucket_size, bias_activation_fusion (megatron's torch.jit
# SwiGLU), recompute_granularity, virtual_pipeline_model_parallel_size (the interleaved
# schedule) and the account_for_*_in_pipeline_split keys (where the layers go).
# Megatron speed-ups this backend does not run; without them the updates are the same,
# only more time is used.
NOT_IMPLEMENTED = {
    "apply_rope_fusion": "a speed-up (megatron-core's fused rotary-embedding kernel) that "
                         "megatron-core takes from Transformer Engine only (rope_utils.py "
                         "asserts 'apply_rope_fusion is not available' without it), and "
                         "flywheel's install has no Transformer Engine; the updates are the "
                         "same without it: set false",
    "moe_grouped_gemm": "a speed-up of MoE experts (one grouped GEMM over all of them) that "
                        "megatron-core runs with the grouped_gemm package or Transformer "
                        "Engine, neither in flywheel's install (its experts run one after "
                        "another, megatron-core's SequentialMLP); the updates are the same "
                        "without it: set false",
}
CONTEXT_PARALLEL = ("megatron-core 0.16 splits the sequence over context-parallel ranks only "
                    "in Transformer Engine's attention: the local DotProductAttention "
                    "flywheel's megatron_train builds asserts context_parallel_size == 1 "
                    "('Context parallelism is only supported by TEDotProductAttention!', "
                    "megatron/core/transformer/dot_product_attention.py), and flywheel's "
                    "install has no Transformer Engine: set 1")


def strategy_options(strategy_config: dict[str, Any]) -> dict[str, Any]:
    options = checked_config("megatron_train", strategy_config, DEFAULTS)
    require(options["context_parallel_size"] == 1, "context_parallel_size", CONTEXT_PARALLEL)
    ep = options["expert_model_parallel_size"]
    require(isinstance(ep, int) and not isinstance(ep, bool) and ep >= 1,
            "expert_model_parallel_size", "expected a positive number of ranks the experts "
            "are split over")
    etp, tp = options["expert_tensor_parallel_size"], options["tensor_model_parallel_size"]
    require(etp is None or (isinstance(etp, int) and not isinstance(etp, bool)
                            and etp in (1, tp)), "expert_tensor_parallel_size",
            f"the experts whole on their rank (1, or unset) or sliced over the "
            f"tensor-parallel ranks as the dense layers are ({tp}, "
            f"tensor_model_parallel_size) are built; megatron-core's other expert layouts "
            f"are not: set 1" + (f" or {tp}" if tp != 1 else ""))
    require(options["moe_token_dispatcher_type"] in ("allgather", "alltoall"),
            "moe_token_dispatcher_type", "how the tokens reach their experts: allgather or "
            "alltoall here (megatron-core's flex dispatcher needs DeepEP, not in flywheel's "
            "install); the updates are the same with either: set alltoall",
            MissingMemorySaving)
    require(not options["sequence_parallel"] or options["tensor_model_parallel_size"] >= 2,
            "sequence_parallel", "a memory saving that splits the activations across the "
            "tensor-parallel ranks: it needs tensor_model_parallel_size >= 2 (megatron-core "
            "refuses it at 1, ROLL's mcore_adapter turns it off there); the updates are "
            "the same without it: set false", MissingMemorySaving)
    bucket = options["ddp_bucket_size"]
    require(bucket is None or (isinstance(bucket, int) and not isinstance(bucket, bool)
                               and bucket > 0),
            "ddp_bucket_size", "expected a positive number of elements per gradient bucket, "
            "or null (Megatron's default)")
    for key, why in NOT_IMPLEMENTED.items():
        require(not options[key], key, why, MissingMemorySaving)
    _check_pipeline_split(options)
    require(options["recompute_granularity"] in (None, "full", "selective"),
            "recompute_granularity", "expected full, selective or null")
    return options


def _check_pipeline_split(options: dict[str, Any]) -> None:
    """The interleaved schedule and the split keys, where they act: each places layers
    across pipeline stages, so with one stage each would do nothing."""
    vpp, pp = options["virtual_pipeline_model_parallel_size"], options[
        "pipeline_model_parallel_size"]
    require(vpp is None or (isinstance(vpp, int) and not isinstance(vpp, bool) and vpp >= 1),
            "virtual_pipeline_model_parallel_size", "expected a positive number of model "
            "chunks per pipeline stage, or null")
    require(not vpp or vpp == 1 or pp >= 2, "virtual_pipeline_model_parallel_size",
            "the interleaved schedule splits each pipeline stage into model chunks: it "
            "needs pipeline_model_parallel_size >= 2; the updates are the same without "
            "it: leave it unset", MissingMemorySaving)
    for key, what in (("account_for_embedding_in_pipeline_split", "embedding"),
                      ("account_for_loss_in_pipeline_split", "loss")):
        require(not options[key] or pp >= 2, key, f"counts the {what} as a layer when the "
                f"layers are split across pipeline stages: with "
                f"pipeline_model_parallel_size 1 there is no split; the updates are the "
                f"same without it: set false", MissingMemorySaving)


def check(kind: str, worker: WorkerConfig, cfg: PipelineConfig) -> None:
    """`kind`: the role kind (derived.Role.kind); every key of strategy_config checked."""
    options = strategy_options(worker.strategy_args.strategy_config)
    require_policy_for_sequence_parallel(kind == "critic", options)


def require_policy_for_sequence_parallel(value_head: bool, options: dict[str, Any]) -> None:
    require(not (value_head and options["sequence_parallel"]), "sequence_parallel",
            "not built for the critic's value head (its hidden states would stay split "
            "across the tensor-parallel ranks): set false on the critic")
