"""Issue 54 item 9: a local Ray (no --address) listens on 127.0.0.1 only: every listening
socket of the process tree that start_ray starts (gcs_server, raylet, driver, workers,
dashboard / runtime-env agents, metrics ports), read with `ss -ltnp` while an actor runs."""

from __future__ import annotations

import shutil

import pytest

from tests.platform.local_ray_probe import probe_local_ray

pytestmark = pytest.mark.slow

LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_local_ray_listens_on_loopback_only():
    probed = probe_local_ray()  # shared with test_startup_noise.py: one Ray start for both
    assert probed.returncode == 0, probed.stderr[-2000:]
    result = probed.report()
    listeners = result["listeners"]
    names = {name for _, name in listeners}
    assert {"gcs_server", "raylet"} <= names, listeners  # the probe saw Ray's own servers
    outside = [(address, name) for address, name in listeners
               if not address.startswith(LOOPBACK)]
    assert outside == [], outside
    assert result["env_after"] is None  # the switch went back after the start
