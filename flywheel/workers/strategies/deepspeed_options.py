"""deepspeed_train's strategy_config: its keys, their defaults, and what it refuses.

Light (no torch, no deepspeed): `platform validate` runs `check` through the backend
catalog (registry.py `config_check`); the backend runs `strategy_options` again when it
starts (deepspeed_train.py), where `torch_adam`'s unset default is resolved (torch's AdamW
on CPU, DeepSpeed's fused Adam on GPU).
"""

from __future__ import annotations

from typing import Any

from flywheel.config.schema import PipelineConfig, WorkerConfig
from flywheel.workers.strategies.strategy_config import checked_config, require

DEFAULTS = {"zero_stage": 2, "offload_optimizer": False, "offload_param": False,
            "torch_adam": None}


def strategy_options(strategy_config: dict[str, Any]) -> dict[str, Any]:
    options = checked_config("deepspeed_train", strategy_config, DEFAULTS)
    require(options["zero_stage"] in (0, 1, 2, 3), "zero_stage",
            f"expected 0, 1, 2 or 3, got {options['zero_stage']!r}")
    require(not options["offload_param"] or options["zero_stage"] == 3, "offload_param",
            "parameter offload needs zero_stage: 3")
    return options


def check(kind: str, worker: WorkerConfig, cfg: PipelineConfig) -> None:
    strategy_options(worker.strategy_args.strategy_config)
