"""Workers' output goes to RUN_DIR/logs/<role>-<rank>.log; the console gets warnings once."""

from __future__ import annotations

import os
import sys
import time
import warnings

from ray import cloudpickle

from flywheel.platform.backend_logs import WarningDigest, warning_message
from flywheel.platform.cluster import Cluster
from flywheel.platform.resources import RoleDevices
from flywheel.workers.role_worker import RoleWorker


class ChattyWorker(RoleWorker):
    """Writes the way backends do: print, a C-level write to fd 2, warnings.warn."""

    def __init__(self, role: str, rank: int, world_size: int, log_path: str | None = None):
        super().__init__(role, rank, world_size, num_threads=1, log_path=log_path)
        print(f"INFO engine started on rank {rank}", flush=True)
        os.write(2, b"WARNING 11-25 13:02:01 [cpu.py:7] Pin memory is not supported on CPU.\n")
        warnings.warn("a deprecated knob", UserWarning, stacklevel=1)
        sys.stderr.flush()


# Ray workers cannot import test modules; ship this module's classes by value instead.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_warning_lines_lose_their_prefixes():
    assert warning_message("WARNING 11-25 13:02:01 [config.py:123] Casting bf16 to fp32.") == (
        "Casting bf16 to fp32.")
    assert warning_message("[2026-11-25 13:02:01,123] [WARNING] [accel.py:209] Using cpu") == (
        "Using cpu")
    assert warning_message("(EngineCore pid=12) WARNING 11-25 13:02:01 [a.py:7] Slow.") == "Slow."
    assert warning_message("/x/y.py:21: UserWarning: Apex is missing") == (
        "UserWarning: Apex is missing")
    assert warning_message("INFO 11-25 13:02:01 [loader.py:9] Loading weights took 0.2 s") is None
    assert warning_message("    warnings.warn('x')") is None


def test_each_distinct_warning_is_reported_once(tmp_path):
    (tmp_path / "actor_infer-0.log").write_text(
        "INFO start\nWARNING 11-25 13:02:01 [a.py:1] Slow.\n"
        "WARNING 11-25 13:02:09 [a.py:1] Slow.\n")
    (tmp_path / "actor_infer-1.log").write_text("WARNING 11-25 13:02:01 [a.py:1] Slow.\n")
    digest = WarningDigest(tmp_path)
    report = digest.report("at start-up")
    assert report.splitlines() == [
        f"backend warnings at start-up (the backends' own: vLLM, DeepSpeed, transformers, "
        f"torch): 1 distinct, full logs in {tmp_path}/:",
        "  actor_infer-0: Slow."]
    assert digest.report("during the run") is None
    with (tmp_path / "actor_infer-1.log").open("a") as log:
        log.write("/p/m.py:3: FutureWarning: the default changes\n")
    assert digest.report("during the run").splitlines()[1:] == [
        "  actor_infer-1: FutureWarning: the default changes"]
    with (tmp_path / "actor_infer-1.log").open("a") as log:  # flywheel's own CPU default
        log.write("WARNING 11-25 13:02:01 [a.py:1] Enforce eager set, disabling compile.\n")
    assert digest.report("at the end") is None  # nothing the user needs to read
    with (tmp_path / "actor_infer-1.log").open("a") as log:
        log.write("WARNING 11-25 13:02:01 [a.py:1] Triton is not installed.\n"
                  "WARNING 11-25 13:02:01 [a.py:1] Pin memory is not supported.\n")
    assert digest.report("at the end").splitlines() == [
        f"backend warnings at the end (the backends' own: vLLM, DeepSpeed, transformers, "
        f"torch): 1 distinct (+1 expected on this setup), full logs in {tmp_path}/:",
        "  actor_infer-1: Pin memory is not supported."]


def test_worker_output_lands_in_its_file_not_on_the_console(ray_session, tmp_path, capfd):
    cluster = Cluster.create("actor_infer", ChattyWorker, RoleDevices("actor_infer", (0, 1)),
                             None, init_kwargs={}, log_dir=tmp_path)
    try:
        time.sleep(1.5)  # Ray forwards worker output to the driver about once a second
        for rank in (0, 1):
            text = (tmp_path / f"actor_infer-{rank}.log").read_text()
            assert f"INFO engine started on rank {rank}" in text
            assert "Pin memory is not supported on CPU." in text
            assert "UserWarning: a deprecated knob" in text
        console = capfd.readouterr()
        assert "engine started" not in console.out + console.err
        assert "Pin memory" not in console.out + console.err
        assert WarningDigest(tmp_path).new_warnings() == [
            "actor_infer-0: Pin memory is not supported on CPU.",
            "actor_infer-0: UserWarning: a deprecated knob"]
    finally:
        cluster.shutdown()


def test_vllms_per_weight_cast_warnings_are_expected_not_printed(tmp_path):
    """SmolLM2's start printed "127 distinct": 120 were this line, one per weight."""
    (tmp_path / "actor_infer-0.log").write_text("".join(
        f"(MainProcess pid=1) WARNING 12-02 03:50:51 [utils.py:333] Attempted to load weight "
        f"layers.{i}.mlp.down_proj.weight with dtype torch.float32 into parameter with dtype "
        f"torch.bfloat16\n" for i in range(30)) + "WARNING 12-02 03:50:52 [a.py:1] Slow.\n")
    report = WarningDigest(tmp_path).report("at start-up").splitlines()
    assert "1 distinct (+30 expected on this setup)" in report[0]
    assert report[1:] == ["  actor_infer-0: Slow."]
