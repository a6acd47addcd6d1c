"""Starting a local Ray, or joining one, the way a laptop and a cluster both need.

A local Ray gets a capped object store (Ray's default claims ~30% of RAM in /dev/shm),
no dashboard, and `num_slots` logical device slots so `device_mapping` works without
GPUs. Joining an existing cluster (`--address` or `ray.address`) uses what is there.
"""

from __future__ import annotations

import logging
import os

import ray

from flywheel.platform.config.schema import RayConfig
from flywheel.platform.resources import SLOT_RESOURCE

log = logging.getLogger(__name__)

# Environment every worker process inherits: quiet tokenizers, no hub access attempts.
WORKER_ENV = {
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "RAY_DEDUP_LOGS": "0",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # per-worker "Loading weights" bars drown the log
}


def start_ray(cfg: RayConfig, num_slots: int, address: str | None = None) -> bool:
    """Join `address` (argument, then config) or start a local Ray with `num_slots` slots.

    Returns False when Ray was already initialised in this process (a notebook, a test
    session): the caller then leaves it running when done.
    """
    if ray.is_initialized():
        return False
    address = address or cfg.address
    runtime_env = {"env_vars": {**WORKER_ENV, **_passthrough_env()}}
    if address:
        log.info("joining Ray cluster at %s", address)
        ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING)
        return True
    ray.init(
        num_cpus=cfg.num_cpus or os.cpu_count(),
        resources={SLOT_RESOURCE: float(num_slots)},
        object_store_memory=cfg.object_store_memory_mb * 1024 * 1024,
        include_dashboard=False,
        runtime_env=runtime_env,
        logging_level=logging.WARNING,
        log_to_driver=True,
    )
    return True


def _passthrough_env() -> dict[str, str]:
    """Variables the driver has that workers need too (caches, debug switches)."""
    names = ("FLYWHEEL_CACHE", "FLYWHEEL_DEBUG", "HF_HOME", "HF_HUB_OFFLINE", "PYTHONPATH")
    return {k: os.environ[k] for k in names if k in os.environ}


def stop_ray() -> None:
    if ray.is_initialized():
        ray.shutdown()
