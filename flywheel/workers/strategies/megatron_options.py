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

DEFAULTS = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
            "context_parallel_size": 1, "expert_model_parallel_size": 1,
            "sequence_parallel": False, "use_distributed_optimizer": False,
            "recompute_granularity": None, "virtual_pipeline_model_parallel_size": None,
            "apply_rope_fusion": False, "overlap_grad_reduce": False,
            "account_for_loss_in_pipeline_split": False,
            "account_for_embedding_in_pipeline_split": False, "bias_activation_fusion": False}
# Memory savings and speed-ups of Megatron's that this backend does not implement; without
# them the updates are the same, only more memory or time is used.
NOT_IMPLEMENTED = {
    "sequence_parallel": "a memory saving (activations split across the tensor-parallel "
                         "ranks) flywheel's megatron_train does not implement; the updates "
                         "are the same without it: set false",
    "use_distributed_optimizer": "a memory saving (AdamW state sharded across the "
                                 "data-parallel ranks) flywheel's megatron_train does not "
                                 "implement; the updates are the same without it: set false",
    "virtual_pipeline_model_parallel_size": "a speed-up (the interleaved pipeline schedule, "
                                            "smaller bubbles) flywheel's megatron_train does "
                                            "not implement; the updates are the same without "
                                            "it: leave it unset",
    "apply_rope_fusion": "a speed-up (Megatron's fused rotary-embedding kernel) flywheel's "
                         "megatron_train does not implement; the updates are the same "
                         "without it: set false",
    "overlap_grad_reduce": "a speed-up (the gradient all-reduce overlapped with the "
                           "backward pass) flywheel's megatron_train does not implement; "
                           "the updates are the same without it: set false",
    "account_for_loss_in_pipeline_split": "a speed-up (one layer fewer on the last pipeline "
                                          "stage, which also computes the loss) flywheel's "
                                          "megatron_train does not implement; the updates "
                                          "are the same without it: set false",
    "account_for_embedding_in_pipeline_split": "a speed-up (one layer fewer on the first "
                                               "pipeline stage, which also embeds the "
                                               "tokens) flywheel's megatron_train does not "
                                               "implement; the updates are the same "
                                               "without it: set false",
    "bias_activation_fusion": "a speed-up (Megatron's fused bias-and-activation kernel) "
                              "flywheel's megatron_train does not implement; the updates "
                              "are the same without it: set false",
}


def strategy_options(strategy_config: dict[str, Any]) -> dict[str, Any]:
    options = checked_config("megatron_train", strategy_config, DEFAULTS)
    for key in ("context_parallel_size", "expert_model_parallel_size"):
        require(options[key] == 1, key, "only 1 is supported by flywheel's megatron_train")
    for key, why in NOT_IMPLEMENTED.items():
        require(not options[key], key, why, MissingMemorySaving)
    require(options["recompute_granularity"] in (None, "full", "selective"),
            "recompute_granularity", "expected full, selective or null")
    return options


def check(kind: str, worker: WorkerConfig, cfg: PipelineConfig) -> None:
    """`kind`: the role kind (derived.Role.kind); every key of strategy_config checked."""
    strategy_options(worker.strategy_args.strategy_config)
