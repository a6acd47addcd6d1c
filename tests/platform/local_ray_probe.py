"""One local Ray as `platform run` starts it (start_ray, no --address), probed once for the
tests that read how such a start looks from outside: test_startup_noise.py (token
authentication on, its warning not printed) and test_ray_loopback.py (every listening
socket on loopback). A start costs ~11 s under load; each test used to pay its own.

The probe runs in a child process of its own, from an empty folder, without RAY_AUTH_MODE
(as a user's shell has it), and keeps an actor alive while it reads the sockets."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = r"""
import json, os, re, shutil, subprocess
import ray
from flywheel.config.schema import RayConfig
from flywheel.platform.ray_runtime import start_ray, stop_ray

start_ray(RayConfig(num_cpus=1, object_store_memory_mb=128), num_slots=1)
print("auth mode", os.environ.get("RAY_AUTH_MODE"))

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
sockets = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout if shutil.which(
    "ss") else ""  # test_ray_loopback.py skips without ss (iproute2)
for line in sockets.splitlines():
    if any(int(p) in tree for p in re.findall(r"pid=(\d+)", line)):
        listeners.append([line.split()[3], (re.findall(r'"([^"]+)"', line) or ["?"])[0]])
print(json.dumps({"listeners": listeners,
                  "env_after": os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}))
stop_ray()
"""


@dataclass(frozen=True)
class Probed:
    returncode: int
    stdout: str
    stderr: str

    def report(self) -> dict:
        """The probe's last line: the listening sockets of its process tree and the
        switch start_ray sets for the start only."""
        return json.loads(self.stdout.strip().splitlines()[-1])


@functools.cache
def probe_local_ray() -> Probed:
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    with tempfile.TemporaryDirectory(prefix="flywheel-ray-probe-") as folder:
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=folder, capture_output=True,
                              text=True, timeout=300, env={**env, "PYTHONPATH": str(REPO)})
    return Probed(done.returncode, done.stdout, done.stderr)
