"""`platform runs / plot / ui / examples`, tab completion, and how a cluster is found.

Runs are made on disk the way `platform run` leaves them (status.json, metrics.jsonl,
checkpoint-<step>/ with its COMPLETE marker), so these tests need no Ray and no model;
test_two_node_cluster.py runs a real pipeline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flywheel.cli import main
from flywheel.config.schema import RayConfig
from flywheel.pipelines.run.metric_views import PANELS, REWARD_KEYS, VALIDATION_KEYS
from flywheel.platform.checkpoint import PLOT_REFRESH_S, writing_checkpoint
from flywheel.platform.plots import refresh_run_plots
from flywheel.platform.ray_runtime import cluster_address
from flywheel.platform.resources import missing_devices_message
from flywheel.platform.run_status import summarize, write_status

REPO = Path(__file__).resolve().parents[2]


def make_run(run_dir: Path, status: str, steps: int, checkpoints: tuple[int, ...] = (),
             max_steps: int = 20, **status_info) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("exp_name: x\n")
    records = [{"step": 0, "val/accuracy": 0.3}]
    records += [{"step": s, "reward/mean": 0.1 * s, "time/step": 0.5,
                 "staleness/mean": 1.0, "idle/actor_infer": 0.5,
                 "throughput/samples_per_s": 100.0} for s in range(1, steps + 1)]
    records[-1]["val/accuracy"] = 0.45
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_status(run_dir, "running", max_steps=max_steps)
    if status != "running":
        write_status(run_dir, status, **status_info)
    for step in checkpoints:
        with writing_checkpoint(run_dir, step, plots=PANELS) as tmp:
            (tmp / "pipeline_state.json").write_text("{}")
    return run_dir


def test_runs_lists_status_steps_figures_checkpoint_and_resume(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_run(runs / "a" / "1-finished", "finished", 20, checkpoints=(10, 20))
    make_run(runs / "a" / "2-failed", "failed", 7, checkpoints=(5,))
    killed = make_run(runs / "b" / "3-killed", "running", 3)
    status = json.loads((killed / "status.json").read_text())
    status["pid"] = _dead_pid()  # a run killed outright never wrote its end
    (killed / "status.json").write_text(json.dumps(status))

    assert main(["runs", "--runs-dir", str(runs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    finished = next(line for line in lines if "1-finished" in line).split()
    assert finished[:5] == ["finished", "20/20", "2.000", "0.450", "checkpoint-20"]
    failed = next(line for line in lines if "2-failed" in line).split()
    assert failed[:5] == ["failed", "7/20", "0.700", "0.450", "checkpoint-5"]
    assert next(line for line in lines if "3-killed" in line).split()[:5] == [
        "interrupted", "3/20", "0.300", "0.450", "-"]
    resume = lines[lines.index(next(line for line in lines if "2-failed" in line)) + 1]
    run = (runs / "a" / "2-failed").as_posix()
    assert resume == f"  resume: platform run --resume {run}"
    assert lines[-1] == f"mlflow UI: platform ui --runs-dir {runs.as_posix()}"


def test_running_run_is_running(tmp_path):
    run = make_run(tmp_path / "r", "running", 2)  # this process: alive
    summary = summarize(run, REWARD_KEYS, VALIDATION_KEYS)
    assert summary.status == "running" and summary.resume_command() is None


def test_plot_one_run_and_an_overlay(tmp_path, capsys):
    a = make_run(tmp_path / "sync" / "1", "finished", 30)
    b = make_run(tmp_path / "async" / "1", "finished", 30)
    assert main(["plot", str(a)]) == 0
    assert (a / "plots.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "both.png"
    assert main(["plot", str(a), str(b), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.splitlines() == [f"wrote {a.as_posix()}/plots.png",
                                                    f"wrote {out.as_posix()}"]


def test_plot_of_a_folder_that_is_no_run_is_one_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: FileNotFoundError: {tmp_path.as_posix()}: no metrics.jsonl (not a run "
        f"directory) (FLYWHEEL_DEBUG=1 prints the traceback)"]


def test_checkpoint_redraws_the_plots(tmp_path):
    run = make_run(tmp_path / "run", "running", 4)
    assert not (run / "plots.png").exists()
    with writing_checkpoint(run, 4, plots=PANELS) as tmp:
        (tmp / "x").write_text("")
    drawn = (run / "plots.png").stat().st_mtime_ns
    assert refresh_run_plots(run, PANELS) == run / "plots.png"  # the end of the run: no new metrics
    assert (run / "plots.png").stat().st_mtime_ns == drawn
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 5, "reward/mean": 0.5}) + "\n")
    refresh_run_plots(run, PANELS)
    assert (run / "plots.png").stat().st_mtime_ns > drawn


def test_a_checkpoint_soon_after_a_drawing_does_not_redraw(tmp_path):
    """One drawing per PLOT_REFRESH_S at most from checkpoints; the end of a run draws."""
    run = make_run(tmp_path / "run", "running", 4)
    with writing_checkpoint(run, 4, plots=PANELS):
        pass
    picture = run / "plots.png"
    drawn = picture.stat().st_mtime_ns
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 5, "reward/mean": 0.5}) + "\n")
    with writing_checkpoint(run, 5, plots=PANELS):
        pass
    assert picture.stat().st_mtime_ns == drawn  # younger than PLOT_REFRESH_S
    old = drawn - int((PLOT_REFRESH_S + 1) * 1e9)  # as if drawn a while ago
    os.utime(picture, ns=(old, old))
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 6, "reward/mean": 0.5}) + "\n")
    with writing_checkpoint(run, 6, plots=PANELS):
        pass
    assert picture.stat().st_mtime_ns > old


def test_examples_lists_every_shipped_config(capsys):
    assert main(["examples"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shipped = sorted(p.name for p in (REPO / "examples").glob("*.yaml"))
    assert [line.split()[0] for line in lines[:-1]] == shipped
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines[:-1])  # a description each
    assert lines[-1].startswith("run one: platform run --config ")


@pytest.mark.parametrize("stop", [signal.SIGTERM, pytest.param(signal.SIGINT,
                                                                 marks=pytest.mark.long)],
                         ids=["SIGTERM", "SIGINT"])
def test_ui_serves_mlflow_on_localhost_and_a_stop_leaves_no_process(tmp_path, stop):
    """Stopped by SIGTERM or SIGINT sent to the platform process alone, `platform ui`
    stops mlflow's server and its uvicorn children too, and says so without `error:`."""
    import mlflow
    import psutil

    runs = tmp_path / "runs"
    runs.mkdir()
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{runs}/mlruns.db").search_experiments()
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flywheel", "ui", "--runs-dir", str(runs),
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, answer = time.monotonic() + 90, None
        while answer is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    answer = r.status
            except OSError:
                time.sleep(0.5)
        assert answer == 200, proc.stdout.read1().decode() if proc.poll() is not None else ""
        server = psutil.Process(proc.pid).children(recursive=True)
        assert server, "mlflow runs in child processes"
        proc.send_signal(stop)  # the platform process only, as a shell's kill or Ctrl-C
        assert proc.wait(timeout=60) == 0
        output = proc.stdout.read().decode()
        gone, alive = psutil.wait_procs(server, timeout=5)
        assert not alive, [p.cmdline() for p in alive]
        assert f"mlflow UI stopped ({stop.name})" in output and "error:" not in output, output
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # whatever the platform group still holds
        proc.wait(timeout=30)


def test_ui_without_a_store_is_one_line(tmp_path, capsys):
    assert main(["ui", "--runs-dir", str(tmp_path)]) == 1
    assert "no mlflow store at" in capsys.readouterr().err


@pytest.mark.parametrize(("line", "expected"), [
    ("platform ex", {"examples", "export"}),
    ("platform run --config x.yaml max_st", {"max_steps="}),
    ("platform validate --config x.yaml tracking.back", {"tracking.backends="}),
    ("platform run --add", {"--address"}),
])
def test_tab_completion(tmp_path, line, expected):
    """As the shell hook asks: `platform` re-run with the line in COMP_LINE (a process of
    its own: argcomplete writes to file descriptors pytest holds)."""
    answer = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_IFS": "\n",
           "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
    subprocess.run([sys.executable, "-m", "flywheel"], env=env, check=True, timeout=60,
                   stderr=subprocess.DEVNULL)
    assert {c.strip() for c in answer.read_text().split("\n") if c.strip()} == expected


def test_cluster_address_flag_then_environment_then_config(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(RayConfig()) is None
    assert cluster_address(RayConfig(address="cfg:1")) == "cfg:1"
    monkeypatch.setenv("RAY_ADDRESS", "env:2")
    assert cluster_address(RayConfig(address="cfg:1")) == "env:2"
    assert cluster_address(RayConfig(address="cfg:1"), "flag:3") == "flag:3"


def test_missing_devices_say_what_to_start():
    slots = missing_devices_message(3, "flywheel_slot", 1)
    assert slots.startswith("device_mapping names device 2 but the Ray cluster has 1 device "
                            "slots")
    assert """ray start --head --resources='{"flywheel_slot": 3}'""" in slots
    assert "ray start --num-gpus" in missing_devices_message(4, "GPU", 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_users_stop_of_a_run_is_not_printed_as_an_error(capsys):
    from flywheel.cli import _report_errors
    from flywheel.platform.stop_signals import RunInterrupted

    def stopped_run(_):
        raise RunInterrupted("SIGINT at step 3, checkpoint runs/x/checkpoint-3; resume: "
                             "platform run --resume runs/x")

    assert _report_errors(stopped_run, None) == 130
    err = capsys.readouterr().err
    assert err.startswith("stopped: SIGINT at step 3") and "error" not in err
