"""Run a pipeline on a two-node Ray cluster simulated on this machine, as a user would.

Started as its own process by test_two_node_cluster.py (a Ray cluster and the session's
local Ray do not share a process). The cluster is made the way `ray start` makes one,
with token authentication on (this process is started with RAY_AUTH_MODE=token and a
RAY_AUTH_TOKEN, as `ray start --head` runs once a token exists; Ray reads the mode when
it is imported): a head node with no device slots, then two worker nodes holding one
`flywheel_slot` each. `platform run --address HOST:PORT` is run twice, as a subprocess
whose environment has the token but not RAY_AUTH_MODE (a user's shell): first before the
worker nodes join (it must stop with the `ray start --resources` hint), then after.
Prints one JSON object: both runs' exit codes and stderr tails, and the node ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.pipelines.sim_config import sim_config


def platform_run(config: Path, address: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flywheel", "run", "--config", str(config),
                           "--address", address], env=env, capture_output=True, text=True,
                          timeout=240)


def main(out: Path) -> None:
    from ray.cluster_utils import Cluster

    assert os.environ.get("RAY_AUTH_MODE") == "token" and os.environ.get("RAY_AUTH_TOKEN")
    user_env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    user_env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    config = out / "two_nodes.yaml"
    cfg = sim_config(out / "run", ratio=1, max_steps=4, eval_steps=2)
    cfg["ray"] = {"address": None}
    config.write_text(yaml.safe_dump(cfg))

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        no_slots = platform_run(config, cluster.address, user_env)
        nodes = [cluster.add_node(num_cpus=1, resources={"flywheel_slot": 1})
                 for _ in range(2)]
        cluster.wait_for_nodes()
        slot_nodes = [n.node_id for n in nodes]
        joined = platform_run(config, cluster.address, user_env)
    finally:
        cluster.shutdown()
    print(json.dumps({
        "no_slots": {"rc": no_slots.returncode, "stderr": no_slots.stderr[-2000:]},
        "joined": {"rc": joined.returncode, "stderr": joined.stderr[-3000:],
                   "stdout": joined.stdout[-2000:]},
        "slot_nodes": slot_nodes,
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
