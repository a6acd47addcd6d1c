"""From `device_mapping` to Ray placement.

Every device index any role names becomes one bundle of a single placement group, so
"device 3" means the same bundle for every role. A role's worker `r` is placed on the
bundle of its first device, `device_mapping[r * num_gpus_per_worker]`. When several roles
name the same device (colocation), each worker asks for an equal fraction of it, so Ray
still refuses a layout that does not fit instead of overcommitting silently.

On a machine without GPUs a device index is a logical slot: a local Ray is started with
a custom resource `flywheel_slot` sized to the highest index, and bundles hold slots
instead of GPUs. The same YAML therefore runs on a laptop and on a GPU node.

What this module deliberately leaves alone: CPU threads per worker (the worker sets
torch's thread count), and multi-device workers (vLLM tensor parallelism), which start
their own processes on the sibling devices.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

SLOT_RESOURCE = "flywheel_slot"
PLACEMENT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RoleDevices:
    """The devices one role asked for."""

    role: str
    device_mapping: tuple[int, ...]
    devices_per_worker: int = 1

    @property
    def num_workers(self) -> int:
        return max(1, len(self.device_mapping) // self.devices_per_worker)

    def worker_device(self, rank: int) -> int:
        return self.device_mapping[rank * self.devices_per_worker]


@dataclass
class DevicePlacement:
    """One placement group over all devices, plus how many roles share each device."""

    group: PlacementGroup
    resource: str  # "GPU" or SLOT_RESOURCE
    sharing: Counter  # device index -> number of workers placed on it

    def scheduling(self, device: int) -> PlacementGroupSchedulingStrategy:
        return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=device)

    def actor_resources(self, device: int) -> dict:
        """Ray options for one worker on `device`: an equal share of that device."""
        share = 1.0 / self.sharing[device]
        if self.resource == "GPU":
            return {"num_gpus": share, "num_cpus": 0}
        return {"num_cpus": 0, "resources": {SLOT_RESOURCE: share}}

    def device_nodes(self) -> dict[int, str]:
        """Ray node id holding each device's bundle (which machine a role landed on)."""
        table = ray.util.placement_group_table(self.group)
        return {int(b): node for b, node in table.get("bundles_to_node_id", {}).items()}

    def release(self) -> None:
        remove_placement_group(self.group)


def slots_needed(roles: list[RoleDevices]) -> int:
    return 1 + max((d for r in roles for d in r.device_mapping), default=0)


def missing_devices_message(n: int, resource: str, available: float) -> str:
    """What to do when a joined cluster is short of devices: GPUs on a GPU cluster; on
    CPU nodes, `flywheel_slot` resources given to `ray start` (a local Ray started by
    `platform run` sizes them itself)."""
    if resource == "GPU":
        return (f"device_mapping names device {n - 1} but the Ray cluster has "
                f"{int(available)} GPUs: join a cluster with {n} GPUs in all (`ray start "
                f"--num-gpus=K` on each node), or use fewer devices in device_mapping")
    return (f"device_mapping names device {n - 1} but the Ray cluster has {int(available)} "
            f"device slots (no GPUs, {SLOT_RESOURCE}={int(available)}): start its nodes with "
            f"{n} slots in all, e.g. `ray start --head "
            f"--resources='{{\"{SLOT_RESOURCE}\": {n}}}'` (each worker node: "
            f"`ray start --address=HEAD:6379 --resources='{{\"{SLOT_RESOURCE}\": K}}'` "
            f"for the K slots it holds), or run without --address to start a local Ray")


def place_devices(roles: list[RoleDevices]) -> DevicePlacement:
    """Reserve every named device and count how many workers share each one."""
    resource = "GPU" if ray.cluster_resources().get("GPU", 0) > 0 else SLOT_RESOURCE
    available = ray.cluster_resources().get(resource, 0)
    n = slots_needed(roles)
    if n > available:
        raise RuntimeError(missing_devices_message(n, resource, available))
    sharing: Counter = Counter()
    for role in roles:
        for rank in range(role.num_workers):
            sharing[role.worker_device(rank)] += 1
    group = placement_group([{resource: 1.0} for _ in range(n)], strategy="PACK")
    ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_TIMEOUT_S)
    if not ready:
        remove_placement_group(group)
        raise RuntimeError(
            f"Ray could not reserve {n} {resource} bundles within {PLACEMENT_TIMEOUT_S:.0f}s; "
            "check the cluster's free resources (`ray status`)"
        )
    return DevicePlacement(group=group, resource=resource, sharing=sharing)
