"""Issue 54 item 9: a local Ray (no --address) listens on 127.0.0.1 only: every listening
socket of the process tree that start_ray starts (gcs_server, raylet, driver, workers,
dashboard / runtime-env agents, metrics ports), read with `ss -ltnp` while an actor runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, os, re, subprocess
import ray
from flywheel.config.schema import RayConfig
from flywheel.platform.ray_runtime import start_ray, stop_ray

start_ray(RayConfig(num_cpus=1, object_store_memory_mb=256), 1)

@ray.remote
class Probe:
    def pid(self):
        return os.getpid()

ray.get(Probe.remote().pid.remote())
children = {}
for line in subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True,
                           text=True).stdout.splitlines():
    pid, ppid = map(int, line.split())
    children.setdefault(ppid, []).append(pid)
tree, todo = set(), [os.getpid()]
while todo:
    pid = todo.pop()
    tree.add(pid)
    todo += children.get(pid, [])
listeners = []
for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines():
    if any(int(p) in tree for p in re.findall(r"pid=(\d+)", line)):
        listeners.append([line.split()[3], (re.findall(r'"([^"]+)"', line) or ["?"])[0]])
print(json.dumps({"listeners": listeners,
                  "env_after": os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}))
stop_ray()
"""
LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_local_ray_listens_on_loopback_only():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=180, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    listeners = result["listeners"]
    names = {name for _, name in listeners}
    assert {"gcs_server", "raylet"} <= names, listeners  # the probe saw Ray's own servers
    outside = [(address, name) for address, name in listeners
               if not address.startswith(LOOPBACK)]
    assert outside == [], outside
    assert result["env_after"] is None  # the switch went back after the start
