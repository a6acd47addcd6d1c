"""Starting a local Ray, or joining one, the way a laptop and a cluster both need.

A local Ray gets a capped object store (Ray's default claims ~30% of RAM in /dev/shm), no
dashboard, `num_slots` logical device slots so `device_mapping` works without GPUs, and
listens on 127.0.0.1 only (`loopback_only`). Joining an existing cluster uses what is
there: the address is `--address`, else `RAY_ADDRESS` (as `ray job submit` and Ray's own
scripts set it), else `ray.address` in the YAML. "auto" finds a cluster started on this
machine by `ray start --head`; an explicit host:port joins the same way, token
authentication included: Ray itself turns token auth on for "auto" when a token exists
(~/.ray/auth_token, RAY_AUTH_TOKEN[_PATH]) but not for host:port, so `ray start --head`
followed by `--address 127.0.0.1:6379` failed with an authentication error. A joined
cluster needs devices for every device_mapping index: GPUs, or `flywheel_slot` resources on
CPU nodes (see resources.missing_devices_message).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Protocol

import ray

from flywheel.platform.resources import SLOT_RESOURCE
from flywheel.platform.user_code import USER_CODE_DIR_ENV, record_user_code_dir

log = logging.getLogger(__name__)


class RayConfig(Protocol):
    """What starting Ray reads of a run's config (its `ray:` block, flywheel/config/schema/)."""

    address: str | None  # join an existing cluster ("auto" or host:port); unset: local Ray
    num_cpus: int | None  # CPUs for a local Ray; unset: all of this machine's
    object_store_memory_mb: int | None  # object-store cap of a local Ray; unset: sized here

MIN_OBJECT_STORE_BYTES = 512 << 20
LOOPBACK = "127.0.0.1"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # off: Ray keeps a loopback node address
# Ray's logger for token authentication, and its warning on every local start
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_AUTH_ON = "Token authentication is enabled for this Ray cluster"

# Environment every worker process inherits: quiet tokenizers, no hub access attempts.
WORKER_ENV = {
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "RAY_DEDUP_LOGS": "0",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # per-worker "Loading weights" bars drown the log
}


def start_ray(cfg: RayConfig, num_slots: int, address: str | None = None,
              forward_worker_output: bool = True, weight_bytes: int | None = None) -> bool:
    """Join `address` (argument, then config) or start a local Ray with `num_slots` slots.

    `forward_worker_output=False`: a local Ray does not copy workers' output to this
    console (the run's workers write theirs to files, platform/backend_logs.py).
    `weight_bytes`: the size of one weight sync, which sizes the object store when
    `cfg.object_store_memory_mb` is unset (`object_store_bytes`).

    Returns False when Ray was already initialised in this process (a notebook, a test
    session): the caller then leaves it running when done.
    """
    if ray.is_initialized():
        return False
    record_user_code_dir()  # workers import user code from the driver's working folder
    address = cluster_address(cfg, address)
    if address:  # other nodes' workers get the environment through the job's runtime env
        log.info("joining Ray cluster at %s", address)
        if address != "auto":
            _token_auth_as_for_auto()
        runtime_env = {"env_vars": {**WORKER_ENV, **_passthrough_env()}}
        # A cluster on this machine's loopback (another flywheel run's or a test session's
        # local Ray, `loopback_only`): joined on loopback too, or Ray swaps 127.0.0.1 for
        # the routable address, where nothing listens.
        join = loopback_only if _is_loopback(address) else contextlib.nullcontext
        with join():
            ray.init(address=address, runtime_env=runtime_env,
                     logging_level=logging.WARNING)
        return True
    # A local Ray's processes inherit this one's environment. A job runtime env would
    # send every worker through Ray's runtime-env setup instead (measured: 4 actors
    # 3.5-3.8 s with one, 1.9-2.3 s without), so the variables are set here.
    os.environ.update(WORKER_ENV)
    quiet_token_auth_enabled()
    with loopback_only():
        ray.init(
            # "local": a new Ray of its own. Without it ray.init joins whatever cluster
            # /tmp/ray/ray_current_cluster names (a `ray start --head` on this machine),
            # and then refuses num_cpus.
            address="local",
            _node_ip_address=LOOPBACK,
            num_cpus=cfg.num_cpus or os.cpu_count(),
            resources={SLOT_RESOURCE: float(num_slots)},
            object_store_memory=object_store_bytes(cfg, weight_bytes),
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=forward_worker_output,
        )
    return True


def _is_loopback(address: str) -> bool:
    """Whether a host:port cluster address names this machine's loopback."""
    host = address.removeprefix("ray://").rsplit(":", 1)[0]
    return host == "localhost" or host.startswith("127.")


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """A local Ray whose every listener is on 127.0.0.1 (gcs_server, raylet, the driver and
    workers, the dashboard and runtime-env agents, the metrics ports), not on every
    interface as by default (14 listeners on `*` / 0.0.0.0 for one run, Prometheus metrics
    unauthenticated among them).

    How: Ray replaces a node address of 127.0.0.1 by the machine's routable one unless
    `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER` is off (its switch for machines that run no
    cluster, read into `ray_constants` when ray is imported); with the loopback address
    kept, its servers bind to it. The variable goes to the processes the local Ray starts
    (they inherit this environment) and the driver's constant is set for the start; both
    are put back afterwards, so joining a cluster later in this process is unaffected."""
    from ray._private import ray_constants

    saved_env = os.environ.get(LOOPBACK_ENV)
    saved_constant = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_constant
        if saved_env is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = saved_env


def quiet_token_auth_enabled() -> None:
    """Leave out Ray's warning that token authentication is on (it turns it on for every
    new local cluster and warns each time: good news, not the user's business). Its warning
    that authentication is off still shows."""
    logger = logging.getLogger(TOKEN_AUTH_LOGGER)
    if not any(isinstance(f, _DropTokenAuthOn) for f in logger.filters):
        logger.addFilter(_DropTokenAuthOn())


class _DropTokenAuthOn(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(TOKEN_AUTH_ON)


def object_store_bytes(cfg: RayConfig, weight_bytes: int | None) -> int:
    """`object_store_memory_mb` when given; else room for two weight syncs in flight
    (an async run may publish the next before the last is loaded) plus 256 MiB, at
    least 512 MiB (also when the model's size is unknown)."""
    if cfg.object_store_memory_mb is not None:
        return cfg.object_store_memory_mb << 20
    return max(MIN_OBJECT_STORE_BYTES, 2 * (weight_bytes or 0) + (256 << 20))


def cluster_address(cfg: RayConfig, address: str | None = None) -> str | None:
    """The cluster to join: the argument, RAY_ADDRESS, then the config; None: start one."""
    return address or os.environ.get("RAY_ADDRESS") or cfg.address


def _token_auth_as_for_auto() -> None:
    """Enable Ray's token authentication when a token is available and RAY_AUTH_MODE is
    unset: what ray.init does for address="auto" (Ray 2.60's private helper; a Ray
    without it has no token auth to set up)."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _passthrough_env() -> dict[str, str]:
    """Variables the driver has that workers need too (caches, debug switches)."""
    names = ("FLYWHEEL_CACHE", "FLYWHEEL_DEBUG", "HF_HOME", "HF_HUB_OFFLINE", "PYTHONPATH",
             USER_CODE_DIR_ENV)
    return {k: os.environ[k] for k in names if k in os.environ}


def stop_ray() -> None:
    if ray.is_initialized():
        ray.shutdown()
